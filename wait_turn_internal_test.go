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
	w.Released(0, "k\x00"+me+other)
	if x.released != 1 || x.carry != other || x.passed != passNone {
		t.Fatalf("own turn: released %b, carry %q, passed %d; want 1, %q, none", x.released, x.carry, x.passed, other)
	}
	x = head("k")
	w.Released(1, "k\x00"+other+me)
	if x.released != 0 || x.passed != passQueued {
		t.Fatalf("turn passed with this Client queued: released %b, passed %d; want 0, queued", x.released, x.passed)
	}
	x = head("k")
	w.Released(0, "k\x00"+other)
	if x.released != 0 || x.passed != passGone {
		t.Fatalf("turn passed, this Client not queued: released %b, passed %d; want 0, gone", x.released, x.passed)
	}
	x = head("k")
	w.Released(2, "k")
	if x.released != 4 || x.passed != passNone || x.carry != "" {
		t.Fatalf("plain release: released %b, passed %d, carry %q; want 100, none, none", x.released, x.passed, x.carry)
	}
	for _, msg := range []string{"k\x00AAA", "k\x00" + me + "B", "j\x00" + me} {
		x = head("k")
		w.Released(0, msg)
		if x.released != 0 || x.passed != passNone {
			t.Fatalf("%q is no release of k: released %b, passed %d", msg, x.released, x.passed)
		}
	}
	odd := "a\x00" + other // a key holding a zero byte, 8 characters after it
	y := head(odd)
	w.Released(0, odd)
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
		nodes: []NodeError{{Err: ErrTaken}, {Err: ErrTaken}, {Err: ErrTaken}},
		vals:  []int64{0, 30, 50},
	}
	wait, ok := c.quorumFree(rd)
	if !ok || wait != 30*time.Millisecond {
		t.Fatalf("quorumFree = %v, %v; want 30ms, true", wait, ok)
	}
}

// TestQuorumFreeCountsAnUnheardMasterAsFree: a master not heard before
// the round decided (two refusals of three decide it) may be free: a
// quorum can be free once the first of the others' keys expires, not the
// last (a stray key with a long TTL on one master kept a waiter asleep
// for that TTL).
func TestQuorumFreeCountsAnUnheardMasterAsFree(t *testing.T) {
	c := &Client{quorum: 2}
	rd := &round{
		nodes: []NodeError{{Err: ErrTaken}, {Err: ErrTaken}, {Err: errNoReply}},
		vals:  []int64{60000, 30, 0},
	}
	wait, ok := c.quorumFree(rd)
	if !ok || wait != 30*time.Millisecond {
		t.Fatalf("quorumFree = %v, %v; want 30ms, true", wait, ok)
	}
}

// TestSleepHearsWhatCameBeforeIt: a waiter's flags can be set while no
// signal is left to tell it: a head that took over from one that
// obtained the key with its Client queued again (leave, waiter.behind)
// receives the hand-over's signal in its "not the head yet" loop, and a
// release announced before that loop ran coalesced with it. sleepUntil
// must act on the flags it finds set, not sleep the whole lock's TTL with
// the key free.
func TestSleepHearsWhatCameBeforeIt(t *testing.T) {
	c := &Client{closing: make(chan struct{}), turnID: "AAAAAAAA"}
	w := &waker{c: c, keys: map[string]*keyWaiters{}}
	x := &waiter{key: "k", sig: make(chan struct{}, 1)}
	w.keys["k"] = &keyWaiters{queue: []*waiter{x}}
	x.signal()                      // leave: x is the head now
	w.Released(0, "k\x00"+c.turnID) // the release: its signal is dropped
	<-x.sig                         // the head's loop takes the one signal
	timer := time.NewTimer(5 * time.Second)
	start := time.Now()
	if err := c.sleepUntil(t.Context(), w, x, timer, 1, 1, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("slept %v with the release heard before it began: want no sleep", d)
	}
}

// TestReleasedReadsBothWays: a wake message "a\x00" + 8 characters is the
// release of key "a" with a turn queue, or the plain release of a key
// holding that very zero byte; a Client waiting for both keys hears it
// as both (a needless ask costs less than a turn missed).
func TestReleasedReadsBothWays(t *testing.T) {
	const me = "AAAAAAAA"
	w := &waker{c: &Client{turnID: me}, keys: map[string]*keyWaiters{}}
	head := func(key string) *waiter {
		x := &waiter{key: key, sig: make(chan struct{}, 1)}
		w.keys[key] = &keyWaiters{queue: []*waiter{x}}
		return x
	}
	a, odd := head("a"), head("a\x00"+me)
	w.Released(0, "a\x00"+me)
	if a.released != 1 || a.carry != "" {
		t.Errorf("the head of a missed its turn: released %b, carry %q", a.released, a.carry)
	}
	if odd.released != 1 {
		t.Errorf("the head of %q missed its key's release: released %b", odd.key, odd.released)
	}
}

// TestNoYieldToItself: a Client whose release gave the turn records that
// its next waiter of the key lets the Client with the turn ask first; when
// the announcement shows the turn is its own, there is nobody to wait for.
func TestNoYieldToItself(t *testing.T) {
	const me, other = "AAAAAAAA", "BBBBBBBB"
	c := &Client{turnID: me, nodes: make([]*node, 1)}
	c.wake = &waker{c: c, keys: map[string]*keyWaiters{}}
	w := c.wake
	x := &waiter{key: "k", sig: make(chan struct{}, 1)}
	c.handedTurn("k", time.Second)
	if d := w.yielding(x); d <= 0 {
		t.Fatalf("yielding %v after a release that gave the turn away, want > 0", d)
	}
	w.Released(0, "k\x00"+other+me)
	if d := w.yielding(x); d <= 0 {
		t.Fatalf("yielding %v after hearing the turn went to %s, want > 0", d, other)
	}
	w.Released(0, "k\x00"+me+other)
	if d := w.yielding(x); d > 0 {
		t.Fatalf("yielding %v after hearing the turn is this Client's, want none", d)
	}
}
