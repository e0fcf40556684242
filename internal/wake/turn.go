package wake

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
)

// The protocol in the key's value and the wake channel (the release
// scripts write it, waiters read it):
//
//   - A lock key's value is its owner's token, followed by Mark once a
//     waiter found the key held, and after the mark by the turn queue: the
//     ids of the Clients waiting for the key, in the order they came, each
//     IDLen characters. No id contains the mark (ids are base64url), and
//     no token does (its random part is base64url; the root package
//     escapes the mark in the holder info a token may carry).
//   - The release of a marked key publishes, on WakeChannel (on a Redis
//     Cluster master, on the key's own sharded channel, named like the
//     key), the key, followed, when Clients queued, by a zero byte and the
//     queue: its first Client has the turn.
//
// (TestReleasedReadsBothWays, FuzzSplitRelease)

// Mark follows the owner's token in the value of a key a waiter found held.
const Mark = "!"

// WakeChannel is the wake channel of a standalone or Sentinel master.
const WakeChannel = "redlock:wake"

// IDLen is the length of a Client's id in the turn queues; the wait script
// counts on it (8).
const IDLen = 8

// NewID returns a random Client id for the turn queues: base64url, so it
// never holds the mark, and 48 random bits, so that two Clients waiting for
// one key do not share one.
func NewID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Channel returns the wake channel of key on a master: its own sharded
// channel on a Redis Cluster master, else WakeChannel.
func Channel(cluster bool, key string) string {
	if cluster {
		return key
	}
	return WakeChannel
}

// ProbeChannel is a Client's own channel on a standalone or Sentinel master.
// Nothing is published on it: a subscription subscribes to it beside the
// wake channel, so that PUBSUB NUMSUB, asked of the master the Client's
// requests reach, says whether the subscription is there (Subs.probe).
func ProbeChannel(id string) string { return WakeChannel + ":" + id }

// Queued reports whether the turn queue q holds id.
func Queued(q, id string) bool {
	for ; len(q) >= IDLen; q = q[IDLen:] {
		if q[:IDLen] == id {
			return true
		}
	}
	return false
}

// SplitRelease reads a wake message as a key followed by a zero byte and a
// turn queue: ok is false when msg cannot be one (no zero byte, or what
// follows the last one is not whole ids). A message may read both as a key
// and as a key with a queue (keys may hold zero bytes): the caller hears it
// both ways.
func SplitRelease(msg string) (key, queue string, ok bool) {
	j := strings.LastIndexByte(msg, 0)
	if j < 0 || len(msg)-j-1 < IDLen || (len(msg)-j-1)%IDLen != 0 {
		return "", "", false
	}
	return msg[:j], msg[j+1:], true
}
