#!/usr/bin/env bash
# Checks that the root's LICENSE is the Apache License 2.0 and that every
# other module of the tree (each directory with a go.mod) has a LICENSE
# identical to it. A module is published alone: its zip holds only its own
# directory, without the root's LICENSE, and pkg.go.dev shows no
# documentation for a module whose license it cannot find.
#
# Usage: scripts/check-license.sh [DIR]   (default: this repository; DIR runs it on a copy)
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

if ! grep -q 'Apache License' LICENSE 2>/dev/null || ! grep -q 'Version 2.0, January 2004' LICENSE; then
	echo "check-license: $PWD/LICENSE is missing or is not the Apache License 2.0" >&2
	exit 1
fi
errors=0 n=0
while IFS= read -r mod; do
	dir=$(dirname "$mod")
	n=$((n + 1))
	if [ ! -f "$dir/LICENSE" ]; then
		echo "check-license: ${dir#./} has a go.mod and no LICENSE: cp LICENSE ${dir#./}/" >&2
		errors=$((errors + 1))
	elif ! cmp -s LICENSE "$dir/LICENSE"; then
		echo "check-license: ${dir#./}/LICENSE differs from the root's LICENSE (diff LICENSE ${dir#./}/LICENSE): cp LICENSE ${dir#./}/" >&2
		errors=$((errors + 1))
	fi
done < <(find . -name go.mod -not -path ./go.mod -not -path '*/.git/*' -not -path '*/testdata/*' -not -path '*/vendor/*' | sort)
if [ $errors -gt 0 ]; then
	echo "check-license: $errors of $n modules lack the root's LICENSE (Apache-2.0)" >&2
	exit 1
fi
echo "check-license: the root and its $n other modules carry the same Apache-2.0 LICENSE"
