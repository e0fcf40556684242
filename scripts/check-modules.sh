#!/usr/bin/env bash
# Checks that every go.mod in the tree requires the modules of this repository
# (github.com/redlock-go/redlock and its sub-modules, such as .../redlockotel)
# at versions that exist. Inside the repository the sub-modules build through
# their replace directives, which the go command ignores in a dependency: a
# user's `go get github.com/redlock-go/redlock/redlockotel` resolves the
# require line itself, and fails on a version that names nothing.
#
# A pseudo-version (v0.0.0-YYYYMMDDHHMMSS-abcdefabcdef, v1.2.4-0.TIME-HASH,
# v1.2.4-pre.0.TIME-HASH) must name, by the first 12 hex digits of its hash,
# a commit that is an ancestor of HEAD, whose committer time in UTC is TIME and
# which has the module's go.mod; a base other than vN.0.0 needs its tag, an
# ancestor of the commit. The go command refuses a pseudo-version otherwise.
# A release version v1.2.3 must be a tag (redlockotel/v1.2.3 for a sub-module).
#
# Usage: scripts/check-modules.sh [GO.MOD...]   (default: every go.mod in the tree)
#        scripts/check-modules.sh --self-test   (made-up go.mod files it must refuse)
# On a shallow clone it says so and fails only for a commit that is absent.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=github.com/redlock-go/redlock
git rev-parse --git-dir >/dev/null 2>&1 || {
	echo "check-modules: $PWD is not a git repository: the check needs its history" >&2
	exit 1
}
shallow=$(git rev-parse --is-shallow-repository)
errors=0

# requirements GOMOD prints "PATH VERSION" for each require of a module of
# this repository. go mod edit -print reads the file as the go command does
# (quoted paths, indented blocks, CRLF line ends) and prints it in its one
# canonical form, which the awk reads (self-test: "in a block, quoted").
requirements() {
	go mod edit -print "$1" | awk -v root="$ROOT" '
		/^require \($/ { blk = 1; next }
		blk && /^\)$/ { blk = 0; next }
		{ p = ""; if (blk) { p = $1; v = $2 } else if ($1 == "require") { p = $2; v = $3 } }
		p == root || index(p, root "/") == 1 { print p, v }
	'
}

# pseudo COMMIT prints the v0.0.0 pseudo-version of COMMIT.
pseudo() {
	local v
	v=$(TZ=UTC git show -s --format='%cd-%H' --date=format-local:%Y%m%d%H%M%S "$1")
	echo "v0.0.0-${v:0:27}"
}

# bad MESSAGE reports a problem with the requirement that check is looking at.
bad() {
	echo "check-modules: $gomod: $path $version: $*" >&2
	errors=$((errors + 1))
}

# check GOMOD PATH VERSION reports each reason the go command would refuse PATH@VERSION.
check() {
	local gomod=$1 path=$2 version=$3 dir prefix base rev stamp commit ctime
	dir=${path#"$ROOT"}
	dir=${dir#/}
	prefix=${dir:+$dir/}
	if [[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
		git rev-parse -q --verify "refs/tags/$prefix$version^{commit}" >/dev/null ||
			bad "no tag $prefix$version in this repository (push the tag, or require a pseudo-version of a commit)"
		return 0
	fi
	if [[ $version =~ ^v[0-9]+\.0\.0-[0-9]{14}-[0-9A-Za-z]+$ ]]; then
		base=""
	elif [[ $version =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)-0\.[0-9]{14}-[0-9A-Za-z]+$ ]] && ((BASH_REMATCH[3] > 0)); then
		base="v${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.$((BASH_REMATCH[3] - 1))"
	elif [[ $version =~ ^(v[0-9]+\.[0-9]+\.[0-9]+-.+)\.0\.[0-9]{14}-[0-9A-Za-z]+$ ]]; then
		base=${BASH_REMATCH[1]}
	else
		bad "neither a release version (v1.2.3) nor a pseudo-version (v0.0.0-YYYYMMDDHHMMSS-abcdefabcdef)"
		return 0
	fi
	stamp=${version: -27:14} rev=${version: -12}
	if [[ ! ${version##*-} =~ ^[0-9a-f]{12}$ ]]; then
		bad "the hash must be the first 12 hex digits of a commit, not ${version##*-}"
		return 0
	fi
	if [ -z "$base" ] && [ "${version%%.*}" != v0 ]; then
		bad "without a preceding tag the version must start v0.0.0-"
	fi
	if ! git cat-file -e "$rev^{commit}" 2>/dev/null; then
		if [ "$shallow" = true ]; then
			bad "names no commit in this shallow clone: fetch the history (git fetch --unshallow) and run the check again"
		else
			bad "names no commit of this repository (HEAD's pseudo-version is $(pseudo HEAD))"
		fi
		return 0
	fi
	commit=$(git rev-parse "$rev^{commit}")
	if ! git merge-base --is-ancestor "$commit" HEAD; then
		if [ "$shallow" = true ]; then
			echo "check-modules: $gomod: $path $version: shallow clone, cannot tell whether $rev is an ancestor of HEAD (git fetch --unshallow to check)" >&2
		else
			bad "commit $rev is not an ancestor of HEAD: name a commit of this branch, which the go command can fetch once it is pushed"
		fi
	fi
	ctime=$(TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d%H%M%S "$commit")
	[ "$stamp" = "$ctime" ] ||
		bad "timestamp $stamp is not the committer time of $rev in UTC ($ctime): the go command refuses it; the version is ${version:0:${#version}-27}$ctime-$rev"
	if [ "$(git show "$commit:${prefix}go.mod" 2>/dev/null | awk '$1 == "module" { print $2; exit }')" != "$path" ]; then
		bad "commit $rev has no ${prefix}go.mod declaring module $path"
	fi
	if [ -n "$base" ] && ! git merge-base --is-ancestor "$prefix$base" "$commit" 2>/dev/null; then
		bad "its base needs the tag $prefix$base on an ancestor of $rev"
	fi
}

# expect NAME WANT VERSION [FORMAT] runs the check on a go.mod that
# requires redlockotel at VERSION, the require written by the printf FORMAT
# (default: on one line): it must pass (WANT "") or fail saying WANT.
expect() {
	# shellcheck disable=SC2059 # the format is the case's
	printf "module example.com/m\n\ngo 1.26.0\n\n${4:-require %s %s\n}" "$ROOT/redlockotel" "$3" >"$tmp/go.mod"
	verdict "$1" "$2"
}

# verdict NAME WANT runs the check on $tmp/go.mod: it must pass (WANT "")
# or fail saying WANT.
verdict() {
	local name=$1 want=$2 out rc=0
	out=$(bash "$PWD/scripts/check-modules.sh" "$tmp/go.mod" 2>&1) || rc=$?
	if { [ -z "$want" ] && [ $rc -eq 0 ]; } || { [ -n "$want" ] && [ $rc -ne 0 ] && [[ $out == *"$want"* ]]; }; then
		echo "check-modules self-test: ok   $name"
	else
		echo "check-modules self-test: FAIL $name: exit $rc, output: ${out:-none} (want ${want:-a pass})"
		selftest_failed=1
	fi
}

# --self-test: versions that the go command refuses, each of which the check
# must refuse for the expected reason, and HEAD's own, which it must accept.
if [ "${1:-}" = --self-test ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	selftest_failed=0
	head=$(pseudo HEAD)
	expect "a made-up hash" "names no commit" v0.0.0-20260101000000-0123456789ab
	expect "HEAD at a wrong time" "is not the committer time" "v0.0.0-20000101000000-${head: -12}"
	expect "HEAD's hash in full" "12 hex digits" "${head%-*}-$(git rev-parse HEAD)"
	expect "an absent tag" "no tag redlockotel/v1.9.9" v1.9.9
	expect "a base tag that is absent" "needs the tag redlockotel/v1.9.9" "v1.9.10-0.${head#v0.0.0-}"
	expect "HEAD's pseudo-version" "" "$head"
	expect "a made-up hash in a block, // indirect" "names no commit" v0.0.0-20260101000000-0123456789ab \
		'require (\n\tgolang.org/x/sys v0.1.0\n\t%s %s // indirect\n)\n'
	expect "a made-up hash in a block, quoted" "names no commit" v0.0.0-20260101000000-0123456789ab \
		'require (\n\t"%s" %s\n)\n'
	expect "a made-up hash on one line, quoted" "names no commit" v0.0.0-20260101000000-0123456789ab \
		'require "%s" %s\n'
	expect "a made-up hash in an indented block" "names no commit" v0.0.0-20260101000000-0123456789ab \
		'  require (\n\t%s %s\n  )\n'
	expect "a made-up hash in a block with CRLF line ends" "names no commit" v0.0.0-20260101000000-0123456789ab \
		'require (\r\n\t%s %s\r\n)\r\n'
	expect "HEAD's pseudo-version with CRLF line ends" "" "$head" 'require (\r\n\t%s %s\r\n)\r\n'
	printf 'module example.com/m\n\nrequire (\n' >"$tmp/go.mod"
	verdict "a go.mod the go command cannot read" "the go command cannot read it"
	exit $selftest_failed
fi
if [ $# -eq 0 ]; then
	mapfile -t mods < <(find . -name go.mod -not -path '*/.git/*' -not -path '*/testdata/*' -not -path '*/vendor/*' | sort)
	set -- "${mods[@]}"
fi
if [ "$shallow" = true ]; then
	echo "check-modules: this is a shallow clone: only the presence of each commit is checked for sure (git fetch --unshallow for the rest)" >&2
fi
n=0
for gomod in "$@"; do
	if ! reqs=$(requirements "$gomod"); then
		echo "check-modules: $gomod: the go command cannot read it (go mod edit -print $gomod)" >&2
		errors=$((errors + 1))
		continue
	fi
	while read -r path version; do
		[ -n "$path" ] || continue
		check "$gomod" "$path" "$version"
		n=$((n + 1))
	done <<<"$reqs"
done
if [ $errors -gt 0 ]; then
	echo "check-modules: $errors problem(s) in the requirements of this repository's modules (see above)" >&2
	exit 1
fi
echo "check-modules: $n requirement(s) of this repository's modules name existing versions"
