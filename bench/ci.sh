#!/usr/bin/env bash
# CI smoke run of the benchmark harness (scripts/test.sh runs it after go test):
# every cell for one second, one repeat. It asserts no timings, only that every
# contender completed lock+release cycles in every cell, that no two holders
# of a hot key overlapped and that redlock kept within its allocation goals
# (counted, not timed); the harness exits non-zero otherwise. The report goes
# to out/smoke (gitignored). Without redis-benchmark the ceiling is skipped with
# a message; without redis-server the run fails (scripts/test.sh installs it).
set -euo pipefail
cd "$(dirname "$0")"

bin=$(mktemp -d)/bench
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" .
# The smoke run takes about a minute on 2 cores; the bound only stops a hang.
timeout --kill-after=10s 240s "$bin" -smoke -out out/smoke "$@"
