package redlock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	// B's Release returns at a quorum, maybe before it ran on master 2:
	// the other owner takes the key there once it has run and found no
	// key, before B's Client sees that answer, so before the second
	// Release is kept.
	direct, bl, answers := handOverMissingMaster2(t, func(master2 redis.UniversalClient, _ string) error {
		return master2.Set(context.Background(), "k", "other", time.Hour).Err()
	})
	if err := bl.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		if got, err := answers(); err != nil || len(got) < 2 {
			return fmt.Errorf("B's Releases on master 2 answered %v (the other owner's SET: %v), want a first that found no key and the second Release", got, err)
		}
		return nil
	})
	if got, _ := answers(); !slices.Equal(got, []int64{-1, 0}) {
		t.Fatalf("B's Releases on master 2 answered %v, want [-1 0]: the first found no key, the second found the other owner's and left it", got)
	}
	if v := get(t, direct[2], "k"); v != "other" {
		t.Fatalf("master 2 holds %q after the second Release, want the other owner's key", v)
	}
}

// TestHandOverRecheckGoesWhenItsAnswerIsHandledLate: B's Release of the
// lock it attached runs on master 2 and finds no key there; A's request,
// on its way, lands right after it; and B's machine, busy, handles that
// answer only after the second Release was due. The Release ran before
// that time, so the second one still goes, at once, and no key of A's is
// left on master 2.
func TestHandOverRecheckGoesWhenItsAnswerIsHandledLate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct, bl, answers := handOverMissingMaster2(t, func(master2 redis.UniversalClient, token string) error {
		err := master2.SetNX(ctx, "k", token, time.Hour).Err() // A's request lands
		// Past the second Release's time: it is due 500ms after the
		// first began, which was before this answer came.
		time.Sleep(600 * time.Millisecond)
		return err
	})
	if err := bl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	redistest.Eventually(t, func() error {
		got, err := answers()
		if err != nil || len(got) == 0 {
			return fmt.Errorf("B's Releases on master 2 answered %v (A's late SET: %v), want a first that found no key", got, err)
		}
		if v := get(t, direct[2], "k"); v != "" || len(got) < 2 {
			return fmt.Errorf("master 2 holds %q (TTL %v) %v after B's Release, which ran there before A's request landed and whose answer was handled after the second Release was due: B's Releases there answered %v, want a second that deleted A's key",
				v, direct[2].PTTL(ctx, "k").Val().Round(time.Minute), time.Since(released).Round(time.Millisecond), got)
		}
		return nil
	})
	if got, _ := answers(); !slices.Equal(got, []int64{-1, 1}) {
		t.Fatalf("B's Releases on master 2 answered %v, want [-1 1]: the first found no key, the second deleted A's", got)
	}
}

// handOverMissingMaster2 is a hand-over whose Obtain's request to master
// 2 is still on its way: A's key, for an hour, on masters 0 and 1, and B's
// handle attached to it (B's node timeout 300ms: its second Release is due
// 500ms after the first began). It returns the masters' direct clients,
// B's handle, and B's Releases of "k" on master 2 as releasesOfK notes
// them, running first (with master 2's direct client and A's token).
func handOverMissingMaster2(t *testing.T, first func(master2 redis.UniversalClient, token string) error) ([]redis.UniversalClient, *redlock.Lock, func() ([]int64, error)) {
	t.Helper()
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	const token = "A's token"
	for _, m := range direct[:2] {
		if err := m.Set(ctx, "k", token, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	bc := redistest.Clients(t, servers)
	answers := releasesOfK(bc[2], func() error { return first(direct[2], token) })
	b := newClient(t, bc, redlock.WithNodeTimeout(300*time.Millisecond))
	bl, err := b.Attach(ctx, "k", token, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	return direct, bl, answers
}

// releasesOfK adds to rdb a hook that notes the master's answer to each
// Release of "k" (release.lua: EVALSHA or EVAL, 1, k, token) it carries:
// -1 no key, 0 another owner's, 1 deleted. first runs in the goroutine
// that sent them, once the first Release that found no key is answered,
// before the Client sees that answer. answers returns the answers so far
// and first's error.
func releasesOfK(rdb redis.UniversalClient, first func() error) (answers func() ([]int64, error)) {
	var mu sync.Mutex
	var got []int64
	var ferr error
	rdb.AddHook(cmdHook{after: func(cmds []redis.Cmder) {
		for _, c := range cmds {
			a := c.Args()
			cmd, ok := c.(*redis.Cmd)
			if !ok || len(a) != 5 || (a[0] != "evalsha" && a[0] != "eval") || a[3] != "k" {
				continue
			}
			v, err := cmd.Int64()
			if err != nil {
				continue
			}
			mu.Lock()
			got = append(got, v)
			f := first
			if v != -1 {
				f = nil
			} else {
				first = nil
			}
			mu.Unlock()
			if f != nil {
				err := f()
				mu.Lock()
				ferr = err
				mu.Unlock()
			}
		}
	}})
	return func() ([]int64, error) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got), ferr
	}
}
