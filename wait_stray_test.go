package redlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

// strayOnGate puts a stray value of key on the master waiters of b ask
// first (a contender that crashed between its SET and its undo, a Release
// that never reached that master), with ttl (0: no expiry), and returns
// that master's position.
func strayOnGate(t *testing.T, b *redlock.Client, clients []redis.UniversalClient, key string, ttl time.Duration) int {
	t.Helper()
	gate := redlock.GateOf(b, key)
	if err := clients[gate].Set(context.Background(), key, "stray-owner", ttl).Err(); err != nil {
		t.Fatal(err)
	}
	return gate
}

// TestWaiterObtainsPastAStrayKeyOnTheGate: a stray key on the master a
// waiter asks first does not starve it once the holder of the other two
// masters releases: the waiter, refused at the gate after a quorum of
// masters announced the release, asks every master and gets the two that
// are free, within a few round trips of the release, whether the stray
// expires in a minute or never.
func TestWaiterObtainsPastAStrayKeyOnTheGate(t *testing.T) {
	for name, stray := range map[string]time.Duration{"a minute": time.Minute, "no expiry": 0} {
		t.Run(name, func(t *testing.T) {
			_, clients, a := cluster(t, 3)
			b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
			gate := strayOnGate(t, b, clients, "k", stray)
			held, err := a.Obtain(t.Context(), "k", 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ch := waitFor(t.Context(), b, "k", 3*time.Second)
			for i, m := range clients {
				if i != gate {
					marked(t, m, "k")
				}
				subscribed(t, m)
			}
			time.Sleep(100 * time.Millisecond) // the ask at the subscriptions' confirmation
			released := time.Now()
			if err := held.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			l := wokenBy(t, ch, released, time.Second)
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
		held, err := a.Obtain(t.Context(), "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
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
				marked(t, m, "k")
			}
		}
		time.Sleep(100 * time.Millisecond) // every waiter has asked and queued
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
