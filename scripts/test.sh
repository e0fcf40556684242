#!/usr/bin/env bash
# The project's test command (README); CI runs it through .ci/run.
#
# Installs what the tests need when it is missing (redis-server; a C compiler,
# which -race needs), then checks: gofmt, scripts/check-modules.sh (each
# require of a module of this repository names a version that exists; with
# its self-test) and scripts/check-license.sh (every module has the root's
# Apache-2.0 LICENSE). Then, for the root module and every module below it
# (a directory with a go.mod: bench/, chaos/, ...): go vet, go test -race,
# and the module's executable ci.sh if it has one; staticcheck in every
# module; scripts/check-api.sh (the exported API is the one recorded under
# api/); and each fuzz target for a few seconds. Which of these run in the
# background, and why: see "Two kinds of steps" below.
# Every step runs even after a failure; the summary lists what failed and the
# exit status is non-zero if anything did.
#
# Tests start their own redis-server processes on free loopback ports;
# REDLOCK_REQUIRE_REDIS=1 makes a missing redis-server fail them instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."

export REDLOCK_REQUIRE_REDIS=1
GO_TEST_FLAGS=(-race -count=1 -timeout 10m)
STATICCHECK=honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZ_TIME=${FUZZ_TIME:-4s}

header() { printf '\n==== %s\n' "$*"; }
die() {
	printf 'scripts/test.sh: %s\n' "$*" >&2
	exit 1
}

# apt_install PKG... installs Debian packages, with sudo when not root.
apt_install() {
	command -v apt-get >/dev/null 2>&1 ||
		die "cannot install $* (no apt-get): install it yourself, then run this again"
	local sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 ||
			die "cannot install $* (not root and no sudo): install it yourself, then run this again"
		sudo=(sudo)
	fi
	header "installing $* (apt-get)"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

command -v go >/dev/null 2>&1 || die "go not found in PATH (this module needs Go 1.26)"
if [ -z "${REDIS_SERVER:-}" ] && ! command -v redis-server >/dev/null 2>&1; then
	# The package may start Debian's own service on 6379; the tests do not use it.
	apt_install redis-server
	command -v redis-server >/dev/null 2>&1 || die "redis-server still not in PATH after installing it"
fi
if ! command -v "$(go env CC)" >/dev/null 2>&1; then
	apt_install gcc libc6-dev # go test -race needs cgo
fi
echo "go: $(go version)"
echo "redis-server: $(${REDIS_SERVER:-redis-server} --version)"

# Modules: the root first, then every other directory with a go.mod.
modules=(.)
while IFS= read -r mod; do
	modules+=("$(dirname "$mod")")
done < <(find . -name go.mod -not -path ./go.mod \
	-not -path '*/.git/*' -not -path '*/testdata/*' -not -path '*/vendor/*' | sort)

passed=()
failed=()
ci_dirs=()
# step NAME CMD... runs CMD and records NAME as passed or failed.
step() {
	local name=$1
	shift
	local t0=$SECONDS
	if "$@"; then
		passed+=("$name")
		echo "test.sh: ok   $name ($((SECONDS - t0))s)"
	else
		failed+=("$name")
		echo "test.sh: FAIL $name ($((SECONDS - t0))s)"
	fi
}

check_gofmt() {
	local files
	files=$(find . -name '*.go' -not -path '*/.git/*' -not -path '*/testdata/*' -not -path '*/vendor/*' -print0 |
		xargs -0 -r gofmt -l)
	if [ -n "$files" ]; then
		echo "gofmt -l lists files that need gofmt -w:"
		echo "$files"
		return 1
	fi
}

in_dir() { (cd "$1" && shift && "$@"); }

header "gofmt"
step gofmt check_gofmt

header "modules, licenses"
step "modules: requirements" bash scripts/check-modules.sh
step "modules: check's self-test" bash scripts/check-modules.sh --self-test
step "licenses" bash scripts/check-license.sh

# Two kinds of steps. Timed ones, the tests of modules that wait on real
# servers' timing (the root module, chaos, ...), run in the foreground one
# after another. Untimed ones, which count and never time, run from the
# start in one background job at the lowest CPU priority (nice 19), so they
# use what the timed tests leave idle without delaying them: staticcheck
# (pinned, every check on: staticcheck.conf) in every module, the API
# record, each fuzz target of the root module for FUZZ_TIME beyond its
# seed corpus (go test runs the corpus itself), and the tests and ci.sh of
# the modules in untimed_modules (bench: its tests and its smoke run check
# counts, errors and overlaps, never a duration). The background job's
# output follows the foreground's.
untimed_modules=(./bench)
untimed() {
	local m
	for m in "${untimed_modules[@]}"; do [ "$1" = "$m" ] && return 0; done
	return 1
}
modname() {
	local name=${1#./}
	[ "$name" = . ] && name=root
	echo "$name"
}

# fuzz_all runs every Fuzz target of the root module for FUZZ_TIME each
# (go test -fuzz takes one target of one package at a time).
fuzz_all() {
	local pkg target out ok=0
	while read -r pkg; do
		for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
			echo "fuzz $pkg $target"
			if ! out=$(go test -run '^$' -fuzz "^$target\$" -fuzztime "$FUZZ_TIME" "$pkg" 2>&1); then
				printf '%s\n' "$out" | tail -40
				echo "fuzz: $pkg $target failed (go test saved the input under the package's testdata/fuzz)"
				ok=1
			fi
		done
	done < <(go list ./...)
	return $ok
}

# untimed_steps runs the untimed steps and writes their outcomes to $1.
untimed_steps() {
	local status=$1 dir
	passed=() failed=()
	renice -n 19 -p "$BASHPID" >/dev/null 2>&1 ||
		echo "test.sh: could not lower the untimed steps' priority; they run beside the timed ones as they are"
	header "staticcheck ($STATICCHECK)"
	for dir in "${modules[@]}"; do
		step "$(modname "$dir"): staticcheck" in_dir "$dir" go run "$STATICCHECK" ./...
	done
	header "exported API (api/)"
	step "api: record" bash scripts/check-api.sh
	header "fuzz ($FUZZ_TIME per target)"
	step "root: fuzz" fuzz_all
	for dir in "${untimed_modules[@]}"; do
		header "module $(modname "$dir") ($(cd "$dir" && go list -m)): untimed"
		step "$(modname "$dir"): go vet" in_dir "$dir" go vet ./...
		step "$(modname "$dir"): go test" in_dir "$dir" go test "${GO_TEST_FLAGS[@]}" ./...
		if [ -x "$dir/ci.sh" ]; then
			step "$(modname "$dir"): ci.sh" in_dir "$dir" ./ci.sh
		fi
	done
	{
		for n in "${passed[@]}"; do echo "ok $n"; done
		for n in "${failed[@]}"; do echo "FAIL $n"; done
	} >"$status"
}

bg_log=$(mktemp) bg_status=$(mktemp)
trap 'rm -f "$bg_log" "$bg_status"' EXIT
(untimed_steps "$bg_status" >"$bg_log" 2>&1) &
bg_pid=$!

for dir in "${modules[@]}"; do
	untimed "$dir" && continue
	name=$(modname "$dir")
	header "module $name ($(cd "$dir" && go list -m))"
	step "$name: go vet" in_dir "$dir" go vet ./...
	step "$name: go test" in_dir "$dir" go test "${GO_TEST_FLAGS[@]}" ./...
	if [ -x "$dir/ci.sh" ]; then
		step "$name: ci.sh" in_dir "$dir" ./ci.sh
	fi
done

header "untimed steps (ran in the background from the start)"
bg_t0=$SECONDS
wait "$bg_pid" || true
cat "$bg_log"
echo "test.sh: the untimed steps ended $((SECONDS - bg_t0))s after the timed ones"
while read -r outcome name; do
	if [ "$outcome" = ok ]; then passed+=("$name"); else failed+=("$name"); fi
done <"$bg_status"
[ -s "$bg_status" ] || failed+=("untimed steps (no outcome written)")

header "summary"
total=$((${#passed[@]} + ${#failed[@]}))
if [ ${#failed[@]} -gt 0 ]; then
	list=$(printf '%s, ' "${failed[@]}")
	printf 'test.sh: FAILED %d of %d steps in %ds: %s\n' "${#failed[@]}" "$total" "$SECONDS" "${list%, }"
	exit 1
fi
printf 'test.sh: PASS, all %d steps (%d modules) in %ds\n' "$total" "${#modules[@]}" "$SECONDS"
