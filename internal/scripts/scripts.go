// Package scripts holds every Lua script of the lock, one .lua file each,
// embedded at build time. Each touches only the keys it is given in KEYS,
// so it runs on a Redis Cluster (all KEYS of one call share a slot), all
// but ExtendBatch: its keys need not share one, and it runs on standalone
// masters only.
//
// A lock key's value is its owner's token, followed by the wait mark "!"
// (which no token contains) once a waiter found the key held, and after the
// mark by the turn queue: the ids of the Clients waiting for the key, in
// the order they came, each 8 characters (internal/wake IDLen,
// turn.go). Every script that checks ownership accepts the token alone or
// followed by the mark, and only a marked key's release is announced to
// waiters. A queue may hold a second "!" (a waiter of a release of the
// package without turn queues marks a value unless it ends in "!"): the
// scripts that read the queue skip every "!" in it, so that the ids after
// it stay whole.
//
// A file opens with its header: what the script does and why, its KEYS,
// ARGV and replies, as Lua comments, then one empty line. The header is
// not sent: the script is the rest of the file, so that a master runs and
// names (by SHA1) the code alone, and EVAL carries no prose.
//
// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT. Their SHA1
// digests are written out here (and checked by a test,
// TestScriptDigests) so that no SHA1 code runs on the hot path and FIPS
// builds need none.
package scripts

import (
	"embed"
	"strings"
)

//go:embed *.lua
var files embed.FS

// A Script is a Lua source and its SHA1 digest as Redis names it, each also
// boxed once as a command argument, so that building a command allocates
// neither.
type Script struct {
	Name           string // its file, for messages
	Src, SHA       string
	SrcArg, SHAArg any
}

// New makes a Script of src whose digest is sha.
func New(name, src, sha string) Script {
	return Script{Name: name, Src: src, SHA: sha, SrcArg: src, SHAArg: sha}
}

// load reads the script of file name, its header left out.
func load(name, sha string) Script {
	b, err := files.ReadFile(name)
	if err != nil {
		panic("scripts: " + err.Error()) // embedded at build time: never
	}
	return New(name, body(string(b)), sha)
}

// body returns a script file's source: what follows its header, the
// leading comment lines and the empty line after them.
func body(file string) string {
	for strings.HasPrefix(file, "--") {
		_, file, _ = strings.Cut(file, "\n")
	}
	return strings.TrimPrefix(file, "\n")
}

// The scripts of a lock on one key.
var (
	Release            = load("release.lua", "6b2baaef7dfd2366277cc90b3dd99138e87ba0c1")
	Keep               = load("keep.lua", "279f1d30a98884ddccd82a6a3296c3ee33ba17ac")
	Extend             = load("extend.lua", "50ba4fffa95c7bdc1906a11a8f9f075a7deae60c")
	AcquireFenced      = load("acquire_fenced.lua", "c5f2f8f95724c9915a2539a9fab35a59c4b36672")
	Raise              = load("raise.lua", "2146193a430b154a35465017df7475d61c8cfea4")
	ExtendFenced       = load("extend_fenced.lua", "0cf23e15536f2482ec6939d21315dfd59787a806")
	FencedWrite        = load("fenced_write.lua", "3c70713baab2d309524435f329015c9532e4b5ce")
	Inspect            = load("inspect.lua", "cf95411ae0ea02f1e2c2966b63bc004d040f72aa")
	AcquireAgain       = load("acquire_again.lua", "ed7c084d51354b3a332dd378aaabfd25b8df9d31")
	AcquireFencedAgain = load("acquire_fenced_again.lua", "83e8813784c0683d5f9db2fe8371f4c638e827f0")
	Wait               = load("wait.lua", "afe5bb3aa775a9dadff8484e92753a09a4c357d0")
	Watch              = load("watch.lua", "443b1c9fec41bd0efea19e984b136041e7617eaa")

	// ExtendBatch is Extend for several lock keys in one call (the wire's
	// runs of plain Extends): on one standalone master only, as its keys
	// need not share a hash slot.
	ExtendBatch = load("extend_batch.lua", "c345a488ae4cfaf929e07caee54fb8c42dcdff7c")
)

// The scripts of a lock on several keys (the root package's ObtainMulti).
// Each takes the set's lock keys first in KEYS, then, where it needs them,
// their fence counters in the same order (all in one Redis Cluster hash
// slot: the caller checks it), and runs on the whole set at once: a master
// holds all of a set's keys for one owner, or none of them.
var (
	AcquireSet = load("acquire_set.lua", "57b2f6d39e963ddd4ebdbae819d79488daa2f756")
	RaiseSet   = load("raise_set.lua", "0bca0742cce56ea544bfaf984895301f947ca273")
	ExtendSet  = load("extend_set.lua", "81bb9227a595220fbcdc255ff684c6a4f9245f1c")
	ReleaseSet = load("release_set.lua", "878d730952e568ab5ddadf53245c5ef2838671af")
)

// All lists every script, for loading them all at once.
var All = [...]*Script{&Release, &Keep, &Extend, &AcquireFenced, &Raise, &ExtendFenced, &FencedWrite, &Inspect, &AcquireAgain, &AcquireFencedAgain,
	&AcquireSet, &RaiseSet, &ExtendSet, &ReleaseSet, &Wait, &Watch, &ExtendBatch}
