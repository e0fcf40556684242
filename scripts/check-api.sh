#!/usr/bin/env bash
# Checks that the exported API of the public packages is the one recorded
# under api/, so that it changes only on purpose: api/redlock.txt for the
# root module (redlock, redlocktest), api/redlockotel.txt for redlockotel.
# internal/tools/apirecord makes the record, one sorted line per exported
# identifier, field and method, from the packages' export data. Every other
# module with a public package must be listed in records or in unrecorded.
#
# Usage: scripts/check-api.sh      compare; on a difference print the diff and fail
#        scripts/check-api.sh -w   write the record anew (after a change made on purpose)
set -euo pipefail
cd "$(dirname "$0")/.."

# MODULE_DIR:RECORD for each module whose public packages are recorded.
records=(.:api/redlock.txt redlockotel:api/redlockotel.txt)
# Modules with public packages that are no promise to users, so have no
# record: the chaos suite's harness, which serves its own scenarios. Any
# other module with a public package fails the check until it is in records
# (TestCheckAPIRefusesAModuleWithPublicPackagesAndNoRecord).
unrecorded=(chaos)

case "${1:-}" in
-w | "") ;;
*)
	echo "usage: scripts/check-api.sh [-w]" >&2
	exit 2
	;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/apirecord" ./internal/tools/apirecord

differ=0
for r in "${records[@]}"; do
	dir=${r%%:*} record=${r#*:}
	"$tmp/apirecord" "$dir" >"$tmp/api.txt"
	if [ "${1:-}" = -w ]; then
		mkdir -p "$(dirname "$record")"
		cp "$tmp/api.txt" "$record"
		echo "check-api: wrote $record"
	elif [ ! -f "$record" ]; then
		echo "check-api: $record is missing" >&2
		differ=1
	elif ! diff -u --label "$record (recorded)" --label "$record (the code)" "$record" "$tmp/api.txt"; then
		differ=1
	fi
done
known=" ${records[*]%%:*} ${unrecorded[*]} " unknown=0
while IFS= read -r mod; do
	dir=$(dirname "${mod#./}")
	[[ $known == *" $dir "* ]] && continue
	"$tmp/apirecord" "$dir" >"$tmp/api.txt"
	if [ -s "$tmp/api.txt" ]; then
		echo "check-api: the module in $dir has public packages and no record: add $dir:api/NAME.txt to records in scripts/check-api.sh and run scripts/check-api.sh -w (or, if its API is no promise, add $dir to unrecorded)" >&2
		unknown=1
	fi
done < <(find . -name go.mod -not -path ./go.mod -not -path '*/.git/*' -not -path '*/testdata/*' -not -path '*/vendor/*' | sort)
if [ $differ -ne 0 ]; then
	cat >&2 <<'MSG'
check-api: the exported API differs from its record under api/ (diff above: - recorded, + in the code).
If the change is on purpose, run scripts/check-api.sh -w and commit api/ in the same commit as
a CHANGELOG.md entry that names the change (a removed or changed line breaks callers: say so there).
If it is not, restore the API.
MSG
fi
[ $differ -eq 0 ] && [ $unknown -eq 0 ] || exit 1
[ "${1:-}" = -w ] || echo "check-api: the exported API matches api/ (${records[*]#*:})"
