#!/usr/bin/env bash
# Run by scripts/test.sh after `go test -race ./...` in this module: that
# run wrote the chaos results table (go test shows a passing package's
# output only with -v), so print it here for the CI log.
set -euo pipefail
cd "$(dirname "$0")"
if [ -f out/results.txt ]; then
	cat out/results.txt
else
	echo "chaos: no out/results.txt (did go test run here?)"
fi
