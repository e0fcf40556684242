#!/usr/bin/env bash
# CI smoke run of the benchmark harness (scripts/test.sh runs it after go test):
# every cell for 150ms, one repeat, the first added latency only, then 200
# locks held under KeepAlive for 1s at 1 and 3 masters. It asserts
# no timings: it fails on any error (a peer library's are noted, not failed:
# they are the peer's), any attempt refused on a fresh key, any
# overlap of two holders of a hot key, a contender without cycles, redlock
# above its allocation targets (counted, not timed), or a held lock not
# obtained, lost, never renewed or not released, or a key left. run_test.go
# and held_test.go show these checks failing on broken locks and runs. The report goes to out/smoke (gitignored).
# Without redis-benchmark the ceiling is skipped with a message; without
# redis-server the run fails (scripts/test.sh installs it).
set -euo pipefail
cd "$(dirname "$0")"

bin=$(mktemp -d)/bench
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" .
# The smoke run takes about a minute on 2 cores; the bound only stops a hang.
timeout --kill-after=10s 240s "$bin" -smoke -out out/smoke "$@"
