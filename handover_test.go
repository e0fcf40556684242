package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// These tests hand a lock to another Client (Attach, AttachMulti) while
// the original Obtain's request to one master is still on its way (a
// proxy delays it), and release it there at once: the late request lands
// after the Release, and must not leave its key behind.

// answers is a go-redis hook that counts the lock scripts and SETs a
// client has had answered (or given up on).
type answers struct{ n atomic.Int32 }

func (h *answers) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *answers) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}
func (h *answers) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.count(c)
		}
		return err
	}
}
func (h *answers) count(c redis.Cmder) {
	switch strings.ToLower(c.Name()) {
	case "set", "evalsha", "eval":
		h.n.Add(1)
	}
}

// attachedHandOver is a hand-over on 4 masters: Client A, whose path to master 3
// delays what it sends by delay, obtains the lock (quorum 3: Obtain
// returns before its request to master 3 arrives) and hands it to Client
// B, which attaches it. It returns B's handle, the masters' direct
// clients, and a channel closed once A's request to master 3 has been
// answered, so has landed.
func attachedHandOver(t *testing.T, set bool, delay, timeout time.Duration) (*redlock.Client, *redlock.Lock, []redis.UniversalClient, []string, <-chan struct{}) {
	t.Helper()
	ctx := context.Background()
	servers := redistest.Start(t, 4)
	direct := redistest.Clients(t, servers)
	viaProxy, proxies := proxied(t, servers[3:], true)
	seen := &answers{}
	viaProxy[0].AddHook(seen)
	a := newClient(t, append(boundedClients(t, servers[:3]), viaProxy[0]), redlock.WithNodeTimeout(timeout))
	b := newClient(t, boundedClients(t, servers), redlock.WithNodeTimeout(timeout))
	// Both Clients hold their connections, scripts loaded: the delay
	// below holds A's connection to master 3 only.
	for _, c := range []*redlock.Client{a, b} {
		l, err := c.Obtain(ctx, "warm", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A's Release of "warm" on master 3 is answered: nothing of A's is in
	// flight there when the delay starts.
	for seen.n.Load() < 2 { // its SET, and its Release
		time.Sleep(time.Millisecond)
	}
	proxies[0].DelayOpen(delay, 0)
	before := seen.n.Load()
	keys := []string{"k"}
	var al *redlock.Lock
	var err error
	if set {
		keys = []string{"{k}:a", "{k}:b"}
		al, err = a.ObtainMulti(ctx, keys, time.Hour)
	} else {
		al, err = a.Obtain(ctx, "k", time.Hour)
	}
	if err != nil {
		t.Fatal(err)
	}
	var bl *redlock.Lock
	if set {
		bl, err = b.AttachMulti(ctx, keys, al.Token(), time.Hour, 0)
	} else {
		bl, err = b.Attach(ctx, "k", al.Token(), time.Hour, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	landed := make(chan struct{})
	go func() {
		defer close(landed)
		for seen.n.Load() == before {
			time.Sleep(time.Millisecond)
		}
	}()
	t.Cleanup(func() { <-landed })
	return b, bl, direct, keys, landed
}

// TestHandOverLeavesNoStrayKey: B releases the lock it attached before A's
// request to master 3 has arrived: the Release finds no key there, and A's
// request then sets one for an hour. B's Release goes to master 3 once
// more a node timeout later, and no key of the lock is left. For a key and
// for a set.
func TestHandOverLeavesNoStrayKey(t *testing.T) {
	for _, set := range []bool{false, true} {
		t.Run(fmt.Sprint("set=", set), func(t *testing.T) {
			const delay, timeout = 500 * time.Millisecond, 1500 * time.Millisecond
			_, bl, direct, keys, landed := attachedHandOver(t, set, delay, timeout)
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

// TestCloseSendsTheHandOverRecheck: B releases the lock it attached and
// closes its Client at once, or shortly before, at or after the second
// Release is due. Close returns within about a node timeout, having sent
// it, and no key of the lock is left.
func TestCloseSendsTheHandOverRecheck(t *testing.T) {
	const delay, timeout = 500 * time.Millisecond, 1500 * time.Millisecond
	for _, after := range []time.Duration{0, timeout - 10*time.Millisecond, timeout + 10*time.Millisecond} {
		t.Run(fmt.Sprint("close after ", after), func(t *testing.T) {
			b, bl, direct, keys, landed := attachedHandOver(t, false, delay, timeout)
			if err := bl.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			if v := get(t, direct[3], keys[0]); v != "" {
				t.Fatalf("setup: master 3 holds %q right after the Release, want A's request still on its way", v)
			}
			time.Sleep(after)
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
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	const timeout = 300 * time.Millisecond
	a := newClient(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(timeout))
	b := newClient(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(timeout))
	al, err := a.Obtain(ctx, "k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bl, err := b.Attach(ctx, "k", al.Token(), time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := direct[2].Del(ctx, "k").Err(); err != nil {
		t.Fatal(err)
	}
	evals := cmdCalls(t, direct[2], "eval")
	if err := bl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := direct[2].Set(ctx, "k", "other", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		if n := cmdCalls(t, direct[2], "eval"); n <= evals {
			return errors.New("the second Release never reached master 2")
		}
		return nil
	})
	if v := get(t, direct[2], "k"); v != "other" {
		t.Fatalf("master 2 holds %q after the second Release, want the other owner's key", v)
	}
}
