#!/usr/bin/env bash
# The project's test command (README); CI runs it through .ci/run.
#
# Installs what the tests need when it is missing (redis-server; a C compiler,
# which -race needs), then checks: gofmt, scripts/check-modules.sh (each
# require of a module of this repository names a version that exists; with
# its self-test), scripts/check-license.sh (every module has the root's
# Apache-2.0 LICENSE; with its self-test) and this command's own self-test
# (--self-test). Then, for the root module and every module below it (a
# directory with a go.mod: bench/, chaos/, ...): go vet, go test -race, and
# the module's ci.sh if it has one; staticcheck in every module;
# scripts/check-api.sh (the exported API is the one recorded under api/);
# and each fuzz target. Which of these run in the background, and why: see
# "Two kinds of steps" below.
# Every step runs even after a failure; the summary lists what failed and the
# exit status is non-zero if anything did.
#
# Tests start their own redis-server processes on free loopback ports;
# REDLOCK_REQUIRE_REDIS=1 makes a missing redis-server fail them instead of skipping.
#
# Usage: scripts/test.sh               the test command
#        scripts/test.sh --self-test   its background job, ci.sh and fuzz steps on made-up steps
set -euo pipefail
cd "$(dirname "$0")/.."

export REDLOCK_REQUIRE_REDIS=1
GO_TEST_FLAGS=(-race -count=1 -timeout 10m)
STATICCHECK=honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Inputs per fuzz target beyond its seed corpus: a count (Nx), not a
# duration. With a duration, Go 1.26's fuzz coordinator can report its own
# deadline as a failure ("context deadline exceeded") on a busy machine.
FUZZ_TIME=${FUZZ_TIME:-50000x}
# How long the untimed steps may go on after the timed ones end before they
# count as hung (self-test: "a hung job").
UNTIMED_WAIT=${UNTIMED_WAIT:-20m}

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

passed=()
failed=()
# step NAME CMD... runs CMD and records NAME as passed or failed, also in
# the file outcomes_file names, if any. It returns 0 either way, so that a
# caller under set -e goes on to the next step. CMD's output is shown and
# kept in the directory step_logs names, for the summary (reasons).
step() {
	local name=$1 t0=$SECONDS outcome=ok
	shift
	[ -n "${step_logs:-}" ] || step_logs=$(mktemp -d) # (self-test: "a step before")
	"$@" 2>&1 | tee "$(step_log "$name")" || outcome=FAIL
	if [ $outcome = ok ]; then passed+=("$name"); else failed+=("$name"); fi
	printf 'test.sh: %-4s %s (%ds)\n' $outcome "$name" $((SECONDS - t0))
	[ -z "${outcomes_file:-}" ] || echo "$outcome $name" >>"$outcomes_file"
}

# step_log NAME is the file that keeps step NAME's output.
step_log() { printf '%s/%s.log' "$step_logs" "$(printf '%s' "$1" | tr -c 'A-Za-z0-9' _)"; }

# reasons NAME... prints, for each failed step NAME, the lines of its
# output that say what failed: a test's --- FAIL line and what the test
# logged under it, a panic, a results table's FAIL row and its figures;
# else the output's last lines. A long run's log is cut in the middle
# where it is read (a CI page): the summary says it at the end (self-test:
# "a failed step's reasons are in the summary").
reasons() {
	local name log lines
	for name in "$@"; do
		log=$(step_log "$name")
		[ -f "$log" ] || continue
		echo "--- $name"
		lines=$(grep -E -A12 '^[[:space:]]*--- FAIL|^panic:|\| FAIL$|^FAIL[[:space:]]' "$log" |
			grep -v -E '^[[:space:]]*--- PASS|^=== (RUN|PAUSE|CONT)' | head -80 || true)
		if [ -n "$lines" ]; then echo "$lines"; else tail -n 15 "$log"; fi
	done
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

modname() {
	local name=${1#./}
	[ "$name" = . ] && name=root
	echo "$name"
}

# ci_step DIR runs DIR/ci.sh when there is one. One without its executable
# bit fails rather than being skipped (self-test: "a ci.sh without its
# executable bit").
ci_step() {
	[ -e "$1/ci.sh" ] || return 0
	[ -x "$1/ci.sh" ] || echo "test.sh: $1/ci.sh is not executable (git update-index --chmod=+x ${1#./}/ci.sh)"
	step "$(modname "$1"): ci.sh" in_dir "$1" ./ci.sh
}

# module_steps DIR [NOTE] runs go vet, go test and ci.sh in the module in DIR.
module_steps() {
	local name
	name=$(modname "$1")
	header "module $name ($(cd "$1" && go list -m))${2:-}"
	step "$name: go vet" in_dir "$1" go vet ./...
	step "$name: go test" in_dir "$1" go test "${GO_TEST_FLAGS[@]}" ./...
	ci_step "$1"
}

# fuzz_all runs every Fuzz target of the module in the current directory
# for FUZZ_TIME each (go test -fuzz takes one target of one package at a
# time). Packages whose targets cannot be listed, and finding no target at
# all, fail it: a fuzz step that fuzzed nothing has not passed (self-test:
# "fuzz_all").
fuzz_all() {
	local pkgs pkg list target out n=0 ok=0
	pkgs=$(go list ./...) || return 1
	for pkg in $pkgs; do
		if ! list=$(go test -list '^Fuzz' "$pkg" 2>&1); then
			printf '%s\n' "$list" | tail -40
			echo "fuzz: cannot list the fuzz targets of $pkg"
			ok=1
			continue
		fi
		for target in $(printf '%s\n' "$list" | grep '^Fuzz' || true); do
			n=$((n + 1))
			echo "fuzz $pkg $target"
			if ! out=$(go test -run '^$' -fuzz "^$target\$" -fuzztime "$FUZZ_TIME" "$pkg" 2>&1); then
				printf '%s\n' "$out" | tail -40
				echo "fuzz: $pkg $target failed (an input that fails it is saved under the package's testdata/fuzz)"
				ok=1
			fi
		done
	done
	if [ $n -eq 0 ]; then
		echo "fuzz: no Fuzz target found in $(go list -m)"
		return 1
	fi
	return $ok
}

# Two kinds of steps. Timed ones, the tests of modules that wait on real
# servers' timing (the root module, chaos, ...), run in the foreground one
# after another. Untimed ones, which count and never time, run from the
# start in one background job at the lowest CPU priority (nice 19), so they
# use what the timed tests leave idle without delaying them: staticcheck
# (pinned, every check on: staticcheck.conf) in every module, the API
# record, each fuzz target of the root module for FUZZ_TIME inputs beyond
# its seed corpus (go test runs the corpus itself), and the steps of the
# modules in untimed_modules. The background job's output follows the
# foreground's. bench is not one of them: its tests and smoke run count
# errors, and the redis-servers they start inherit the job's priority, so
# while chaos keeps both CPUs busy a request misses its node timeout and
# counts as one (a fresh-clone run: "no reply ... timed out after 500ms").
untimed_modules=()
untimed() {
	local m
	for m in "${untimed_modules[@]}"; do [ "$1" = "$m" ] && return 0; done
	return 1
}

untimed_steps() {
	local dir
	header "staticcheck ($STATICCHECK)"
	for dir in "${modules[@]}"; do
		step "$(modname "$dir"): staticcheck" in_dir "$dir" go run "$STATICCHECK" ./...
	done
	header "exported API (api/)"
	step "api: record" bash scripts/check-api.sh
	header "fuzz ($FUZZ_TIME per target)"
	step "root: fuzz" fuzz_all
	for dir in "${modules[@]}"; do
		if untimed "$dir"; then module_steps "$dir" ": untimed"; fi
	done
}

# untimed_start FUNC runs FUNC in the background, at nice 19 and in a
# process group of its own, with its output in $bg_log. The outcome of each
# step goes to $bg_status as the step ends, then "end" when FUNC returns.
untimed_start() {
	set -m # the job's own process group, which untimed_stop ends
	(
		set +m
		outcomes_file=$bg_status
		renice -n 19 -p "$BASHPID" >/dev/null 2>&1 ||
			echo "test.sh: could not lower the untimed steps' priority; they run beside the timed ones as they are"
		"$1"
		echo end >>"$bg_status"
	) </dev/null >"$bg_log" 2>&1 &
	bg_pid=$!
	set +m
}

# untimed_stop ends the background job, all of its process group, if it
# is still running: after a hang, or when the command is interrupted.
untimed_stop() {
	[ -z "${bg_pid:-}" ] || kill -- -"$bg_pid" 2>/dev/null || true
	bg_pid=
}

# untimed_traps makes every exit of the command end the background job and
# remove its files: bash runs the EXIT trap also when INT, TERM or HUP ends
# it, signals which the job's own process group does not get from a
# terminal or from a kill of the command's group (self-test: "an
# interrupted command"); and the paths PATH... given, if any.
untimed_traps() {
	local also=
	[ $# -eq 0 ] || printf -v also '%q ' "$@"
	trap 'untimed_stop; rm -rf "$bg_log" "$bg_status" '"$also" EXIT
}

# untimed_finish shows the background job's log, following it until the
# job ends, and adds the outcomes of its steps to passed and failed. A job
# that ends before its last step fails (self-test: "a job that ends
# early"). One still running UNTIMED_WAIT after the timed steps is stopped
# and fails, its log shown up to where it hung (self-test: "a hung job").
untimed_finish() {
	local outcome name t0=$SECONDS hung=
	timeout "$UNTIMED_WAIT" tail -n +1 -f --pid="$bg_pid" "$bg_log" || hung=1
	if [ -n "$hung" ]; then untimed_stop; else wait "$bg_pid" || true; fi
	bg_pid=
	while read -r outcome name; do
		case $outcome in
		ok) passed+=("$name") ;;
		FAIL) failed+=("$name") ;;
		esac
	done <"$bg_status"
	if [ -n "$hung" ]; then
		echo "test.sh: the untimed steps were still running $UNTIMED_WAIT after the timed ones: stopped them"
		failed+=("untimed steps (still running $UNTIMED_WAIT after the timed ones)")
	elif [ "$(tail -n 1 "$bg_status")" != end ]; then
		failed+=("untimed steps (ended before their last step)")
	else
		echo "test.sh: the untimed steps ended $((SECONDS - t0))s after the timed ones"
	fi
}

# self_test runs the steps' machinery on made-up steps and checks what each
# case must record (scripts/test.sh --self-test; the test command runs it).
self_test() {
	local bad=0 pgid pid
	tmp=$(mktemp -d)
	bg_log=$tmp/log bg_status=$tmp/status bg_pid= step_logs=$tmp/steps
	mkdir "$step_logs"
	trap 'untimed_stop; rm -rf "$tmp"' EXIT
	# verdict CASE CMD...: the case holds if CMD succeeds.
	verdict() {
		local name=$1
		shift
		if "$@"; then
			echo "test.sh self-test: ok   $name"
		else
			echo "test.sh self-test: FAIL $name"
			bad=1
		fi
	}
	# recorded PASSED FAILED: the steps recorded since the last call, each
	# list's names joined by "|", are these.
	recorded() {
		local p f
		p=$(IFS='|' && echo "${passed[*]}") f=$(IFS='|' && echo "${failed[*]}")
		passed=() failed=()
		if [ "$p" != "$1" ] || [ "$f" != "$2" ]; then
			echo "recorded: passed [$p], failed [$f]; want [$1], [$2]"
			return 1
		fi
	}
	# gone PGID: within 10s, no process of the group PGID runs (a zombie,
	# which a container's init may never reap, does not).
	gone() {
		local stat line state pgrp
		for _ in {1..100}; do
			for stat in /proc/[0-9]*/stat; do
				read -r line 2>/dev/null <"$stat" || continue
				read -r state _ pgrp _ <<<"${line##*) }"
				if [ "$pgrp" = "$1" ] && [ "$state" != Z ]; then
					sleep 0.1
					continue 2
				fi
			done
			return 0
		done
		return 1
	}
	# background JOB runs JOB as the untimed steps, its shown log in $tmp/out.
	background() {
		: >"$bg_status"
		untimed_start "$1"
		untimed_finish >"$tmp/out" 2>&1
	}

	job() {
		step "a pass" true
		step "a failure, with spaces" false
	}
	background job
	verdict "an untimed step's failure fails the command" recorded "a pass" "a failure, with spaces"
	verdict "the untimed steps' log is shown" grep -q "FAIL a failure, with spaces" "$tmp/out"

	job() {
		step "first" true
		exit 0
	}
	background job
	verdict "a job that ends early fails" recorded "first" "untimed steps (ended before their last step)"

	renice() { return 127; }
	job() { step "runs" true; }
	background job
	unset -f renice
	verdict "a job without renice runs" recorded "runs" ""

	job() {
		step "a failure before the hang" false
		echo "before the hang"
		step "hangs" sleep 300
	}
	: >"$bg_status"
	untimed_start job
	pgid=$bg_pid
	for _ in {1..600}; do
		grep -q "before the hang" "$bg_log" && break
		sleep 0.1
	done
	UNTIMED_WAIT=1s untimed_finish >"$tmp/out" 2>&1
	verdict "a hung job fails" recorded "" "a failure before the hang|untimed steps (still running 1s after the timed ones)"
	verdict "a hung job's log is shown" grep -q "before the hang" "$tmp/out"
	verdict "a hung job's processes are ended" gone "$pgid"

	job() { step "hangs" sleep 300; }
	(
		untimed_traps
		untimed_start job
		echo "$bg_pid" >"$tmp/pgid"
		sleep 300 &
		echo $! >"$tmp/sleep"
		wait $!
	) &
	pid=$!
	for _ in {1..600}; do
		[ -s "$tmp/sleep" ] && break
		sleep 0.1
	done
	kill -TERM "$pid"
	wait "$pid" || true
	kill "$(cat "$tmp/sleep")"
	verdict "an interrupted command ends its untimed steps" gone "$(cat "$tmp/pgid")"

	mkdir "$tmp/m"
	printf '#!/bin/sh\nexit 0\n' >"$tmp/m/ci.sh"
	chmod -x "$tmp/m/ci.sh"
	ci_step "$tmp/m" >/dev/null 2>&1
	verdict "a ci.sh without its executable bit fails" recorded "" "$tmp/m: ci.sh"
	chmod +x "$tmp/m/ci.sh"
	ci_step "$tmp/m" >/dev/null
	verdict "an executable ci.sh runs" recorded "$tmp/m: ci.sh" ""

	printf 'module example.com/selftest\n\ngo 1.26\n' >"$tmp/m/go.mod"
	printf 'package m\n\nimport "testing"\n\nfunc TestA(*testing.T) {}\n' >"$tmp/m/a_test.go"
	step "no target" in_dir "$tmp/m" fuzz_all >/dev/null
	printf 'package m\n\nimport "testing"\n\nfunc FuzzB(f *testing.F) { f.Fuzz(func(*testing.T, []byte) {}) }\n' >"$tmp/m/b_test.go"
	FUZZ_TIME=10x step "a target" in_dir "$tmp/m" fuzz_all >/dev/null
	printf 'package m\n\nfunc broken() int {}\n' >"$tmp/m/c_test.go"
	step "unlisted" in_dir "$tmp/m" fuzz_all >/dev/null
	verdict "fuzz_all fails without a target, or when one cannot be listed" recorded "a target" "no target|unlisted"

	failing() {
		echo "=== RUN   TestA"
		echo "--- FAIL: TestA (0.01s)"
		echo "    a_test.go:7: the reason"
		for i in {1..100}; do echo "noise $i"; done
		echo "FAIL"
		return 1
	}
	step "a test fails" failing >/dev/null
	step "no test says why" bash -c 'echo the last word; exit 1' >/dev/null
	reasons "a test fails" "no test says why" >"$tmp/reasons"
	verdict "a failed step's reasons are in the summary" grep -q "a_test.go:7: the reason" "$tmp/reasons"
	verdict "a failed step without a test's reason shows its last lines" grep -q "the last word" "$tmp/reasons"
	recorded "" "a test fails|no test says why" >/dev/null

	# The command's first steps run before anything else is set up.
	verdict "a step before the logs' directory is set passes" bash -c "
		set -euo pipefail
		source <(sed -n '/^step() {/,/^}/p; /^step_log() {/,/^}/p' '$0')
		unset step_logs
		trap 'rm -rf \"\${step_logs:-}\"' EXIT
		outcome_of() { step first true >/dev/null; [ \"\${passed[*]}\" = first ]; }
		passed=() failed=()
		outcome_of"
	return $bad
}

if [ "${1:-}" = --self-test ]; then
	self_test
	exit
fi

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

step_logs=$(mktemp -d)
trap 'rm -rf "$step_logs"' EXIT # untimed_traps below takes it over
header "gofmt"
step gofmt check_gofmt

header "modules, licenses, self-tests"
step "modules: requirements" bash scripts/check-modules.sh
step "modules: check's self-test" bash scripts/check-modules.sh --self-test
step "licenses" bash scripts/check-license.sh
step "licenses: check's self-test" bash scripts/check-license.sh --self-test
step "test command's self-test" bash scripts/test.sh --self-test

bg_log=$(mktemp) bg_status=$(mktemp) bg_pid=
untimed_traps "$step_logs"
untimed_start untimed_steps

for dir in "${modules[@]}"; do
	untimed "$dir" && continue
	module_steps "$dir"
done

header "untimed steps (ran in the background from the start)"
untimed_finish

header "summary"
total=$((${#passed[@]} + ${#failed[@]}))
if [ ${#failed[@]} -gt 0 ]; then
	echo "what failed, from each failed step's output:"
	reasons "${failed[@]}"
	list=$(printf '%s, ' "${failed[@]}")
	printf 'test.sh: FAILED %d of %d steps in %ds: %s\n' "${#failed[@]}" "$total" "$SECONDS" "${list%, }"
	exit 1
fi
printf 'test.sh: PASS, all %d steps (%d modules) in %ds\n' "$total" "${#modules[@]}" "$SECONDS"
