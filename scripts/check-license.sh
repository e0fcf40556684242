#!/usr/bin/env bash
# Checks that the root's LICENSE is the Apache License 2.0 and that every
# other module of the tree (each directory with a go.mod) has a LICENSE
# identical to it. A module is published alone: its zip holds only its own
# directory, without the root's LICENSE, and pkg.go.dev shows no
# documentation for a module whose license it cannot find. Each LICENSE must
# be a regular file: the go command leaves symbolic links out of a module's
# zip (self-test: "a LICENSE that is a symbolic link").
#
# Usage: scripts/check-license.sh [DIR]      (default: this repository; DIR runs it on a copy)
#        scripts/check-license.sh --self-test (made-up trees it must refuse or accept)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

if [ "${1:-}" = --self-test ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	failures=0
	# expect NAME WANT: the check on the tree $tmp/t passes (WANT "") or fails saying WANT.
	expect() {
		local out rc=0
		out=$(bash "$repo/scripts/check-license.sh" "$tmp/t" 2>&1) || rc=$?
		if { [ -z "$2" ] && [ $rc -eq 0 ]; } || { [ -n "$2" ] && [ $rc -ne 0 ] && [[ $out == *"$2"* ]]; }; then
			echo "check-license self-test: ok   $1"
		else
			echo "check-license self-test: FAIL $1: exit $rc, output: ${out:-none} (want ${2:-a pass})"
			failures=1
		fi
	}
	mkdir -p "$tmp/t/sub" "$tmp/t/testdata/m"
	cp "$repo/LICENSE" "$tmp/t/LICENSE"
	touch "$tmp/t/go.mod" "$tmp/t/sub/go.mod" "$tmp/t/testdata/m/go.mod"
	expect "a module without a LICENSE" "sub has a go.mod and no LICENSE"
	ln -s ../LICENSE "$tmp/t/sub/LICENSE"
	expect "a LICENSE that is a symbolic link" "sub/LICENSE is a symbolic link"
	rm "$tmp/t/sub/LICENSE"
	echo "MIT License" >"$tmp/t/sub/LICENSE"
	expect "a LICENSE other than the root's" "sub/LICENSE differs"
	cp "$tmp/t/LICENSE" "$tmp/t/sub/LICENSE"
	expect "a copy of the root's LICENSE (testdata holds no module)" ""
	mv "$tmp/t/LICENSE" "$tmp/t/LICENSE.orig"
	ln -s LICENSE.orig "$tmp/t/LICENSE"
	expect "a root LICENSE that is a symbolic link" "LICENSE is a symbolic link"
	exit $failures
fi

cd "${1:-$repo}"
if [ -L LICENSE ]; then
	echo "check-license: $PWD/LICENSE is a symbolic link, which a module's zip leaves out: make it a file" >&2
	exit 1
fi
if ! grep -q 'Apache License' LICENSE 2>/dev/null || ! grep -q 'Version 2.0, January 2004' LICENSE; then
	echo "check-license: $PWD/LICENSE is missing or is not the Apache License 2.0" >&2
	exit 1
fi
errors=0 n=0
while IFS= read -r mod; do
	dir=$(dirname "$mod")
	n=$((n + 1))
	if [ -L "$dir/LICENSE" ]; then
		echo "check-license: ${dir#./}/LICENSE is a symbolic link, which the module's zip leaves out: rm ${dir#./}/LICENSE && cp LICENSE ${dir#./}/" >&2
		errors=$((errors + 1))
	elif [ ! -f "$dir/LICENSE" ]; then
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
