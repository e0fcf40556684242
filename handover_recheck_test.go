package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// TestHandOverRecheckOutwaitsTheObtainersNodeTimeout: the hand-over of
// TestHandOverLeavesNoStrayKey with both Clients on their default node
// timeouts, and a handle attached with a TTL of its own: A obtains for an
// hour (its requests may take 500ms: min(ttl/10, 500ms)), B attaches for a
// second (100ms). A's request to master 3 is held 300ms on the way, well
// within A's node timeout, and lands after B's Release found no key there.
// B's second Release goes out B's node timeout later, before A's request
// has landed: A's key stays for an hour. The second Release must wait for
// as long as the original Obtain's request may still be on its way, which
// B's own node timeout does not bound.
func TestHandOverRecheckOutwaitsTheObtainersNodeTimeout(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 4)
	direct := redistest.Clients(t, servers)
	viaProxy, proxies := proxied(t, servers[3:], true)
	seen := &answers{}
	viaProxy[0].AddHook(seen)
	a := newClient(t, append(boundedClients(t, servers[:3]), viaProxy[0]))
	b := newClient(t, boundedClients(t, servers))
	for _, c := range []*redlock.Client{a, b} {
		l, err := c.Obtain(ctx, "warm", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for seen.n.Load() < 2 { // A's SET and Release of "warm" on master 3 answered
		time.Sleep(time.Millisecond)
	}
	const delay = 300 * time.Millisecond
	proxies[0].DelayOpen(delay, 0)
	before := seen.n.Load()
	al, err := a.Obtain(ctx, "k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bl, err := b.Attach(ctx, "k", al.Token(), time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := bl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if v := get(t, direct[3], "k"); v != "" {
		t.Fatalf("setup: master 3 holds %q right after the Release, want A's request still on its way", v)
	}
	redistest.Eventually(t, func() error {
		if seen.n.Load() == before {
			return fmt.Errorf("A's request to master 3 never landed")
		}
		return nil
	})
	time.Sleep(time.Second) // far past both Clients' node timeouts
	if v := get(t, direct[3], "k"); v != "" {
		t.Fatalf("master 3 holds %q (TTL %v) %v after the hand-over's Release: A's request, %v on its way (A's node timeout 500ms), landed after B's second Release (B's node timeout 100ms)",
			v, direct[3].PTTL(ctx, "k").Val().Round(time.Minute), time.Since(released).Round(time.Millisecond), delay)
	}
}
