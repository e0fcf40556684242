package redlock

import (
	"testing"
	"time"
)

// TestReleasedReadsTheTurnQueue: a wake message is a key, or a key, a zero
// byte and the turn queue; the head hears its Client's turn (with the
// rest of the queue to carry), a turn passed with its Client queued after,
// or one passed with its Client not queued. A key that itself holds a
// zero byte is read whole when this Client waits for it.
func TestReleasedReadsTheTurnQueue(t *testing.T) {
	const me, other = "AAAAAAAA", "BBBBBBBB"
	w := &waker{c: &Client{turnID: me}, keys: map[string]*keyWaiters{}}
	head := func(key string) *waiter {
		x := &waiter{key: key, sig: make(chan struct{}, 1)}
		w.keys[key] = &keyWaiters{queue: []*waiter{x}}
		return x
	}
	x := head("k")
	w.released(0, "k\x00"+me+other)
	if x.released != 1 || x.carry != other || x.passed != passNone {
		t.Fatalf("own turn: released %b, carry %q, passed %d; want 1, %q, none", x.released, x.carry, x.passed, other)
	}
	x = head("k")
	w.released(1, "k\x00"+other+me)
	if x.released != 0 || x.passed != passQueued {
		t.Fatalf("turn passed with this Client queued: released %b, passed %d; want 0, queued", x.released, x.passed)
	}
	x = head("k")
	w.released(0, "k\x00"+other)
	if x.released != 0 || x.passed != passGone {
		t.Fatalf("turn passed, this Client not queued: released %b, passed %d; want 0, gone", x.released, x.passed)
	}
	x = head("k")
	w.released(2, "k")
	if x.released != 4 || x.passed != passNone || x.carry != "" {
		t.Fatalf("plain release: released %b, passed %d, carry %q; want 100, none, none", x.released, x.passed, x.carry)
	}
	for _, msg := range []string{"k\x00AAA", "k\x00" + me + "B", "j\x00" + me} {
		x = head("k")
		w.released(0, msg)
		if x.released != 0 || x.passed != passNone {
			t.Fatalf("%q is no release of k: released %b, passed %d", msg, x.released, x.passed)
		}
	}
	odd := "a\x00" + other // a key holding a zero byte, 8 characters after it
	y := head(odd)
	w.released(0, odd)
	if y.released != 1 || y.passed != passNone {
		t.Fatalf("key %q read as a queue: released %b, passed %d", odd, y.released, y.passed)
	}
}

// TestQuorumFreeCountsAnExpiringKey: a refusal with a PTTL of 0 (the key
// expires within the millisecond) is a master free at once, not one that
// says nothing of when it frees (which sent the waiter to sleep for about
// a node timeout).
func TestQuorumFreeCountsAnExpiringKey(t *testing.T) {
	c := &Client{quorum: 2}
	rd := &round{
		nodes: []NodeError{{Err: ErrTaken}, {Err: ErrTaken}, {Err: errNoReply}},
		vals:  []int64{0, 30},
	}
	wait, ok := c.quorumFree(rd)
	if !ok || wait != 30*time.Millisecond {
		t.Fatalf("quorumFree = %v, %v; want 30ms, true", wait, ok)
	}
}
