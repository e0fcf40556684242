package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Hand-overs: a lock attached by another Client and released there while
// the original Obtain's request to one master is still on its way.

// TestHandOverLeavesNoStrayKey: B releases the lock it attached before A's
// request to master 3 has arrived: the Release finds no key there, and A's
// request then sets one for an hour. B's Release goes to master 3 once
// more a node timeout later, and no key of the lock is left. For a key and
// for a set.
func TestHandOverLeavesNoStrayKey(t *testing.T) {
	t.Parallel()
	for _, set := range []bool{false, true} {
		t.Run(fmt.Sprint("set=", set), func(t *testing.T) {
			t.Parallel()
			const delay, timeout = 500 * time.Millisecond, 1500 * time.Millisecond
			_, bl, direct, keys, landed := attachedHandOver(t, set, delay, timeout, time.Hour)
			if err := bl.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			if v := get(t, direct[3], keys[0]); v != "" {
				t.Fatalf("setup: master 3 holds %q right after the Release, want A's request still on its way", v)
			}
			select {
			case <-landed:
			case <-time.After(5 * time.Second):
				t.Fatal("A's request to master 3 never landed")
			}
			landedAfter := time.Since(released)
			if landedAfter >= timeout {
				t.Fatalf("setup: A's request landed %v after the Release, past B's node timeout", landedAfter)
			}
			redistest.Eventually(t, func() error {
				for _, k := range keys {
					if vs := holdersOf(t, direct, k); count(vs, bl.Token()) > 0 {
						return fmt.Errorf("masters hold %s = %q %v after the hand-over's Release (TTL on master 3: %v): a stray key",
							k, vs, time.Since(released).Round(time.Millisecond), direct[3].PTTL(context.Background(), k).Val().Round(time.Second))
					}
				}
				return nil
			})
			t.Logf("A's request landed %v after the Release; no key left %v after it", landedAfter.Round(time.Millisecond), time.Since(released).Round(time.Millisecond))
		})
	}
}

// TestHandOverRecheckOutwaitsTheObtainersNodeTimeout: the hand-over of
// TestHandOverLeavesNoStrayKey with both Clients on their default node
// timeouts, and a handle attached with a TTL of its own: A obtains for an
// hour (its requests may take 500ms: min(ttl/10, 500ms)), B attaches for a
// second (100ms). A's request to master 3 is held 300ms on the way, well
// within A's node timeout, and lands after B's Release found no key there.
// B's second Release must wait for as long as the original Obtain's request
// may still be on its way, which B's own node timeout does not bound: no
// key of A's is left on master 3 for an hour.
func TestHandOverRecheckOutwaitsTheObtainersNodeTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const delay = 300 * time.Millisecond
	_, bl, direct, _, landed := attachedHandOver(t, false, delay, 0, time.Second)
	if err := bl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if v := get(t, direct[3], "k"); v != "" {
		t.Fatalf("setup: master 3 holds %q right after the Release, want A's request still on its way", v)
	}
	select {
	case <-landed:
	case <-time.After(5 * time.Second):
		t.Fatal("A's request to master 3 never landed")
	}
	redistest.Within(t, time.Second, func() error { // far past both Clients' node timeouts
		if v := get(t, direct[3], "k"); v != "" {
			return fmt.Errorf("master 3 holds %q (TTL %v) %v after the hand-over's Release: A's request, %v on its way (A's node timeout 500ms), landed after B's second Release (B's node timeout 100ms)",
				v, direct[3].PTTL(ctx, "k").Val().Round(time.Minute), time.Since(released).Round(time.Millisecond), delay)
		}
		return nil
	})
}

// TestCloseSendsTheHandOverRecheck: B releases the lock it attached and
// closes its Client at once, or shortly before, at or after the second
// Release is due. Close returns within about a node timeout, having sent
// it, and no key of the lock is left.
func TestCloseSendsTheHandOverRecheck(t *testing.T) {
	t.Parallel()
	const delay, timeout = 500 * time.Millisecond, 1500 * time.Millisecond
	for _, after := range []time.Duration{0, timeout - 10*time.Millisecond, timeout + 10*time.Millisecond} {
		t.Run(fmt.Sprint("close after ", after), func(t *testing.T) {
			t.Parallel()
			b, bl, direct, keys, landed := attachedHandOver(t, false, delay, timeout, time.Hour)
			if err := bl.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			if v := get(t, direct[3], keys[0]); v != "" {
				t.Fatalf("setup: master 3 holds %q right after the Release, want A's request still on its way", v)
			}
			time.Sleep(after) // Close comes before, at or after the second Release is due
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			took := time.Since(released)
			if took > timeout+2*time.Second {
				t.Fatalf("Close returned %v after the Release, want about the node timeout (%v)", took, timeout)
			}
			t.Logf("Close returned %v after the Release", took.Round(time.Millisecond))
			select {
			case <-landed:
			case <-time.After(5 * time.Second):
				t.Fatal("A's request to master 3 never landed")
			}
			redistest.Eventually(t, func() error {
				if vs := holdersOf(t, direct, keys[0]); count(vs, bl.Token()) > 0 {
					return fmt.Errorf("masters hold %q after the hand-over's Release and Close: a stray key", vs)
				}
				return nil
			})
		})
	}
}

// TestHandOverRecheckNeverDeletesAnotherOwnersKey: B's Release of an
// attached lock finds master 2 without the key, and another owner takes
// the key there before the second Release is due: that Release runs on
// master 2 and leaves the other owner's key alone.
func TestHandOverRecheckNeverDeletesAnotherOwnersKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	const timeout = 300 * time.Millisecond
	a := newClient(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(timeout))
	b := newClient(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(timeout))
	al := obtain(t, a, "k", time.Hour)
	held(t, direct, "k", al.Token(), 3) // A's last SET lands before the DEL
	bl, err := b.Attach(ctx, "k", al.Token(), time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := direct[2].Del(ctx, "k").Err(); err != nil {
		t.Fatal(err)
	}
	evals := calls(t, direct[2], "eval")
	if err := bl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := direct[2].Set(ctx, "k", "other", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		if n := calls(t, direct[2], "eval"); n <= evals {
			return errors.New("the second Release never reached master 2")
		}
		return nil
	})
	if v := get(t, direct[2], "k"); v != "other" {
		t.Fatalf("master 2 holds %q after the second Release, want the other owner's key", v)
	}
}
