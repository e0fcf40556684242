package redlock_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// Stray keys on the gate (the master waiters ask first) and herds of waiters
// woken together.

// TestWaiterObtainsPastAStrayKeyOnTheGate: a stray key on the master a
// waiter asks first does not starve it once the holder of the other two
// masters releases: the waiter, refused at the gate after a quorum of
// masters announced the release, asks every master and gets the two that
// are free, within a few round trips of the release, whether the stray
// expires in a minute or never.
func TestWaiterObtainsPastAStrayKeyOnTheGate(t *testing.T) {
	t.Parallel()
	for name, stray := range map[string]time.Duration{"a minute": time.Minute, "no expiry": 0} {
		t.Run(name, func(t *testing.T) {
			_, clients, a := cluster(t, 3)
			b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
			gate := strayOnGate(t, b, clients, "k", stray)
			held := obtain(t, a, "k", 3*time.Second)
			ch := waitFor(t.Context(), b, "k", 3*time.Second)
			for i, m := range clients {
				if i != gate {
					marked(t, m, "k")
				}
			}
			subscribedAll(t, clients) // the ask at the subscriptions' confirmation is over
			l := wakes(t, held, ch, time.Second)
			defer l.Release(t.Context())
			hs := holdersOf(t, clients, "k")
			if !strings.HasPrefix(hs[gate], "stray-owner") {
				t.Errorf("the gate holds %q, want the stray untouched", hs[gate])
			}
			if n := count(hs, l.Token()) + count(hs, l.Token()+"!"); n < 2 {
				t.Errorf("holders %q: the waiter's token on %d masters, want the two free ones", hs, n)
			}
		})
	}
}

// TestWaiterPastAStrayKeyWithoutWakeUps: the same stray key, but no
// release is announced (the holder's key expires): the waiter, which
// polls the gate while the gate alone refuses, asks every master once
// the holder's TTL has passed on a quorum, so a lost wake-up costs at
// most the holder's remaining TTL.
func TestWaiterPastAStrayKeyWithoutWakeUps(t *testing.T) {
	_, clients, a := cluster(t, 3)
	b := newClient(t, clients, redlock.WithNodeTimeout(100*time.Millisecond))
	strayOnGate(t, b, clients, "k", time.Minute)
	if _, err := a.Obtain(t.Context(), "k", time.Second); err != nil { // never released: it expires
		t.Fatal(err)
	}
	start := time.Now()
	ch := waitFor(t.Context(), b, "k", 3*time.Second)
	w := outcome(t, ch, 10*time.Second)
	if w.err != nil {
		t.Fatal(w.err)
	}
	defer w.l.Release(t.Context())
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("obtained %v after the wait began, want within about the holder's TTL (1s)", d)
	}
}

// TestWaitersOfSeveralClientsPastAStrayKeyOnTheGate: waiters of three
// Clients queue on the two free masters in different orders (their
// first asks race), so the release gives the turn to one Client on one
// master and to another on the other: no Client hears a quorum of turns
// of its own, and the gate, which holds a stray key, announces nothing.
// A quorum of masters other than the gate announced the release: a
// waiter refused by the gate then asks every master, and the first grant
// comes within a few round trips, not at the holder's TTL.
func TestWaitersOfSeveralClientsPastAStrayKeyOnTheGate(t *testing.T) {
	_, clients, a := cluster(t, 3)
	var cs []*redlock.Client
	for range 3 {
		cs = append(cs, newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond)))
	}
	gate := strayOnGate(t, cs[0], clients, "k", time.Minute)
	for round := range 8 {
		held := obtain(t, a, "k", time.Second)
		got := make(chan waited, 6)
		for _, c := range cs {
			for range 2 {
				go func() {
					start := time.Now()
					l, err := c.Obtain(t.Context(), "k", time.Second, redlock.WithWait())
					if err == nil {
						err = l.Release(t.Context()) // at once: the next waiter's turn
					}
					got <- waited{l, err, time.Since(start)}
				}()
			}
		}
		for i, m := range clients {
			if i != gate {
				queuedN(t, m, "k", len(cs)) // every Client's first waiter asked and queued
			}
		}
		released := time.Now()
		if err := held.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		for n := range 6 {
			w := outcome(t, got, 10*time.Second)
			if w.err != nil {
				t.Fatal(w.err)
			}
			if d := time.Since(released); n == 0 && d > 250*time.Millisecond {
				t.Errorf("round %d: the first waiter obtained and released %v after the release, want a few round trips, not the holder's TTL (1s)", round, d.Round(time.Millisecond))
			}
		}
	}
}

// TestWaitersPastAStrayKeyHandTheLockOn: two Clients wait, B queued
// before C, for a key held on the two masters that are not the gate,
// where a stray key without expiry sits. The holder's release gives B the
// turn; B, refused by the stray at the gate, asks every master and gets
// the lock. B's release must then reach C (B's value carries the turn
// queue, so its release is announced with C's turn), and C gets the lock
// within a few round trips, not once the first holder's 8s TTL, which C
// read when it last asked every master, has passed.
func TestWaitersPastAStrayKeyHandTheLockOn(t *testing.T) {
	_, clients, a := cluster(t, 3)
	ctx := t.Context()
	b := newClient(t, clients)
	c := newClient(t, clients)
	gate := strayOnGate(t, b, clients, "k", 0)
	held := obtain(t, a, "k", 8*time.Second)
	other := (gate + 1) % len(clients)
	chB := waitFor(ctx, b, "k", 20*time.Second)
	queuedN(t, clients[other], "k", 1)
	chC := waitFor(ctx, c, "k", 20*time.Second)
	ids := queuedN(t, clients[other], "k", 2)
	subscribedAll(t, clients) // the asks at the subscriptions' confirmations are over
	lb := wakes(t, held, chB, 2*time.Second)
	if q := queueOf(t, clients[other], "k"); fmt.Sprint(q) != fmt.Sprint(ids[1:]) {
		t.Errorf("B holds %q, with the turn queue %q on master %d, want C's place carried over (%q)", holdersOf(t, clients, "k"), q, other, ids[1:])
	}
	wakes(t, lb, chC, 2*time.Second).Release(ctx) // B's release is heard: C does not sleep out the first holder's TTL
}

// TestHerdWokenTogetherDoesNotSplitTheMasters: eight Clients wait for a
// key on three masters, with no stray key anywhere; the holder releases
// it, or lets it expire (nobody announces that: every waiter's timer,
// set to the PTTL it read, fires at about the same moment). The waiters
// ask the gate first, which serializes them: none gets a master another
// gets, so no grant is ever undone.
func TestHerdWokenTogetherDoesNotSplitTheMasters(t *testing.T) {
	const k = 8
	for name, release := range map[string]bool{"released": true, "expired": false} {
		t.Run(name, func(t *testing.T) {
			h := drainHerd(t, k, false, release, 1500*time.Millisecond, 15*time.Second)
			t.Logf("%d waiters: %d failed, the last lock %v after the release; %d commands (%.1f per lock), %d grants undone",
				k, h.fails, h.took.Round(time.Millisecond), h.asks, float64(h.asks)/float64(max(k-h.fails, 1)), h.undone)
			if h.fails > 0 {
				t.Errorf("%d of %d waiters did not get the lock within 15s", h.fails, k)
			}
			if h.undone > 0 {
				t.Errorf("%d grants undone: waiters woken together split the masters", h.undone)
			}
		})
	}
}

// TestHerdPastAStrayKeyOnTheGateDrains: four Clients woken by one release
// (or by the holder's expiry, which nobody announces) while a stray key
// without expiry sits on the master they ask first all get the lock in
// turn within seconds; the waiters' locks have a 20s TTL, which none of
// them may have to sleep out.
func TestHerdPastAStrayKeyOnTheGateDrains(t *testing.T) {
	const k = 4
	for name, release := range map[string]bool{"released": true, "expired": false} {
		t.Run(name, func(t *testing.T) {
			h := drainHerd(t, k, true, release, 1500*time.Millisecond, 15*time.Second)
			t.Logf("%d waiters: %d failed, the last lock %v after the release; %d commands (%.1f per lock), %d grants undone",
				k, h.fails, h.took.Round(time.Millisecond), h.asks, float64(h.asks)/float64(max(k-h.fails, 1)), h.undone)
			if h.fails > 0 {
				t.Errorf("%d of %d waiters did not get the lock within 15s", h.fails, k)
			}
		})
	}
}
