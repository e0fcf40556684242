#!/usr/bin/env bash
# The project's test command (README); CI runs it through .ci/run.
#
# Installs what the tests need when it is missing (redis-server; a C compiler,
# which -race needs), then for the root module and every module below it (a
# directory with a go.mod: bench/, chaos/, ...): go vet, go test -race, and the
# module's executable ci.sh if it has one (in the background, beside the
# next two); then staticcheck (pinned, every check on: staticcheck.conf) in
# every module, and each fuzz target for a few seconds beyond its seed
# corpus. gofmt is checked once for all.
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

for dir in "${modules[@]}"; do
	name=${dir#./}
	[ "$name" = . ] && name=root
	header "module $name ($(cd "$dir" && go list -m))"
	step "$name: go vet" in_dir "$dir" go vet ./...
	step "$name: go test" in_dir "$dir" go test "${GO_TEST_FLAGS[@]}" ./...
	if [ -x "$dir/ci.sh" ]; then
		ci_dirs+=("$dir")
	fi
done

# The modules' ci.sh steps (bench's smoke run, which counts and never
# times; chaos's report) run in the background beside staticcheck and the
# fuzzing, which assert no timing either: they share the CPUs without a
# flake, and the command ends about a minute sooner. Their output follows
# once they are done.
ci_pids=() ci_logs=() ci_t0=$SECONDS
for dir in "${ci_dirs[@]}"; do
	log=$(mktemp)
	(cd "$dir" && ./ci.sh) >"$log" 2>&1 &
	ci_pids+=($!)
	ci_logs+=("$log")
done

header "staticcheck ($STATICCHECK)"
for dir in "${modules[@]}"; do
	name=${dir#./}
	[ "$name" = . ] && name=root
	step "$name: staticcheck" in_dir "$dir" go run "$STATICCHECK" ./...
done

# fuzz_all runs every Fuzz target of the root module for FUZZ_TIME each
# (go test -fuzz takes one target of one package at a time). go test above
# has already run each seed corpus.
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
	done < <(go list ./... )
	return $ok
}
header "fuzz ($FUZZ_TIME per target)"
step "root: fuzz" fuzz_all

for i in "${!ci_dirs[@]}"; do
	name=${ci_dirs[$i]#./}
	header "module $name: ci.sh (ran in the background)"
	if wait "${ci_pids[$i]}"; then rc=0; else rc=$?; fi
	cat "${ci_logs[$i]}"
	rm -f "${ci_logs[$i]}"
	if [ "$rc" -eq 0 ]; then
		passed+=("$name: ci.sh")
		echo "test.sh: ok   $name: ci.sh (within $((SECONDS - ci_t0))s)"
	else
		failed+=("$name: ci.sh")
		echo "test.sh: FAIL $name: ci.sh (exit $rc, within $((SECONDS - ci_t0))s)"
	fi
done

header "summary"
total=$((${#passed[@]} + ${#failed[@]}))
if [ ${#failed[@]} -gt 0 ]; then
	list=$(printf '%s, ' "${failed[@]}")
	printf 'test.sh: FAILED %d of %d steps in %ds: %s\n' "${#failed[@]}" "$total" "$SECONDS" "${list%, }"
	exit 1
fi
printf 'test.sh: PASS, all %d steps (%d modules) in %ds\n' "$total" "${#modules[@]}" "$SECONDS"
