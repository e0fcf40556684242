package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Locks on several keys (ObtainMulti, DoMulti): every key or none, on every
// master; Extend and Release act on the whole set.

// TestObtainMultiTakesEveryKeyOrNone: a set is held on every master with
// every key; a set that meets a held key takes none of its keys anywhere
// and says which key blocked it; Release frees every key.
func TestObtainMultiTakesEveryKeyOrNone(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			ctx := context.Background()
			_, clients, c := cluster(t, n)
			l, err := c.ObtainMulti(ctx, []string{"a", "b", "c"}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if got := l.Keys(); !slices.Equal(got, []string{"a", "b", "c"}) || l.Key() != "a" {
				t.Fatalf("Keys %q, Key %q", got, l.Key())
			}
			redistest.Eventually(t, func() error { // Obtain returned at quorum
				if got := holdsAll(t, clients, l.Token(), "a", "b", "c"); got != n {
					return fmt.Errorf("%d of %d masters hold the whole set", got, n)
				}
				return nil
			})
			for i, rdb := range clients {
				if pttl := rdb.PTTL(ctx, "c").Val(); pttl <= 0 || pttl > time.Minute {
					t.Fatalf("master %d: key c's TTL %v", i, pttl)
				}
			}

			// {c, d} meets c: nothing of it is taken, d included.
			_, err = c.ObtainMulti(ctx, []string{"d", "c"}, time.Minute)
			var qe *redlock.QuorumError
			if !errors.Is(err, redlock.ErrTaken) || !errors.As(err, &qe) {
				t.Fatalf("overlapping set: %v, want ErrTaken with a *QuorumError", err)
			}
			refused := 0
			for _, ne := range qe.Nodes {
				if ne.Err == redlock.ErrTaken {
					refused++
					if ne.Key != "c" {
						t.Fatalf("master %s refused for key %q, want c", ne.Addr, ne.Key)
					}
				}
			}
			if refused <= n-qe.Quorum {
				t.Fatalf("%d refusals decided it, want more than %d", refused, n-qe.Quorum)
			}
			if !strings.Contains(err.Error(), `(key "c")`) {
				t.Fatalf("the error does not name the key that blocked: %v", err)
			}
			if vs := holdersOf(t, clients, "d"); count(vs, "") != n {
				t.Fatalf("key d taken by a failed set: %q", vs)
			}
			// A single-key lock and a set exclude each other on a shared key.
			if _, err := c.Obtain(ctx, "b", time.Minute); !errors.Is(err, redlock.ErrTaken) {
				t.Fatalf("Obtain of a key in a held set: %v, want ErrTaken", err)
			}
			single := obtain(t, c, "e", time.Minute)
			if _, err := c.ObtainMulti(ctx, []string{"d", "e"}, time.Minute); !errors.Is(err, redlock.ErrTaken) {
				t.Fatalf("set over a single-key lock: %v, want ErrTaken", err)
			}

			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if l.Validity() != 0 {
				t.Fatal("validity after Release")
			}
			redistest.Eventually(t, func() error { // Release returned at quorum
				for _, k := range []string{"a", "b", "c"} {
					if vs := holdersOf(t, clients, k); count(vs, "") != n {
						return fmt.Errorf("key %s after Release: %q", k, vs)
					}
				}
				return nil
			})
			if vs := holdersOf(t, clients, "e"); count(vs, single.Token()) != n {
				t.Fatalf("the set's Release touched another lock's key: %q", vs)
			}
			l2, err := c.ObtainMulti(ctx, []string{"d", "c"}, time.Minute)
			if err != nil {
				t.Fatalf("the freed set: %v", err)
			}
			l2.Release(ctx)
		})
	}
}

// TestObtainMultiBadInput: every bad input is an ErrInvalidArgument before
// any request, never ErrNotObtained; duplicates count once.
func TestObtainMultiBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 1)
	many := make([]string, redlock.MaxKeys+1)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		keys []string
		ttl  time.Duration
		want string
	}{
		{"no keys", ctx, nil, time.Minute, "no keys"},
		{"empty set", ctx, []string{}, time.Minute, "no keys"},
		{"empty key", ctx, []string{"a", ""}, time.Minute, "empty key (keys[1])"},
		{"too many", ctx, many, time.Minute, "more than 64 distinct keys"},
		{"ttl", ctx, []string{"a", "b"}, 0, "ttl must be at least 1ms"},
		{"nil context", nil, []string{"a", "b"}, time.Minute, "nil context"},
	} {
		_, err := c.ObtainMulti(tc.ctx, tc.keys, tc.ttl)
		if !errors.Is(err, redlock.ErrInvalidArgument) || errors.Is(err, redlock.ErrNotObtained) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ObtainMulti: %v, want ErrInvalidArgument saying %q", tc.name, err, tc.want)
		}
		err = c.DoMulti(tc.ctx, tc.keys, tc.ttl, func(context.Context) error { return nil })
		if !errors.Is(err, redlock.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: DoMulti: %v, want ErrInvalidArgument saying %q", tc.name, err, tc.want)
		}
	}
	if err := c.DoMulti(ctx, []string{"a"}, time.Minute, nil); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("DoMulti with a nil fn: %v", err)
	}
	if n := clients[0].DBSize(ctx).Val(); n != 0 {
		t.Fatalf("bad input left %d keys", n)
	}

	// Duplicates count once, also past MaxKeys given.
	dup := append(slices.Repeat([]string{"b", "a"}, redlock.MaxKeys), "b", "c")
	l, err := c.ObtainMulti(ctx, dup, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Keys(); !slices.Equal(got, []string{"b", "a", "c"}) {
		t.Fatalf("Keys %q, want [b a c]", got)
	}
	got := l.Keys()
	got[0] = "changed"
	if l.Keys()[0] != "b" {
		t.Fatal("Keys returned the lock's own slice")
	}
	l.Release(ctx)
	l, err = c.ObtainMulti(ctx, many[:redlock.MaxKeys], time.Minute)
	if err != nil {
		t.Fatalf("MaxKeys keys: %v", err)
	}
	if got := holdsAll(t, clients, l.Token(), many[:redlock.MaxKeys]...); got != 1 {
		t.Fatal("the master does not hold all MaxKeys keys")
	}
	l.Release(ctx)

	c.Close()
	if _, err := c.ObtainMulti(ctx, []string{"a", "b"}, time.Minute); !errors.Is(err, redlock.ErrClosed) || !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("ObtainMulti after Close: %v", err)
	}
}

// TestSetOfOneKeyIsALockOnIt: a set of one key (duplicates dropped) is
// taken as Obtain takes a key, with a plain SET NX rather than a script.
func TestSetOfOneKeyIsALockOnIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 1)
	warm, err := c.Obtain(ctx, "warm", time.Minute) // loads the scripts, opens the lane
	if err != nil {
		t.Fatal(err)
	}
	warm.Release(ctx)
	sets, evals := calls(t, clients[0], "set"), calls(t, clients[0], "evalsha")
	l, err := c.ObtainMulti(ctx, []string{"only", "only"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Keys(); !slices.Equal(got, []string{"only"}) || l.Key() != "only" {
		t.Fatalf("Keys %q, Key %q", got, l.Key())
	}
	if s, e := calls(t, clients[0], "set")-sets, calls(t, clients[0], "evalsha")-evals; s != 1 || e != 0 {
		t.Fatalf("the acquire ran %d SETs and %d scripts, want one SET NX", s, e)
	}
	if _, err := c.Obtain(ctx, "only", time.Minute); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Obtain of the set's key: %v, want ErrTaken", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWrongTypeKeyIsTakenAsForObtain: a key of the set that holds a
// value of another type (not a lock) is refused by Obtain as "held"
// (SET NX finds the key); the set's script fails on it with WRONGTYPE.
func TestWrongTypeKeyIsTakenAsForObtain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	for _, rdb := range clients {
		rdb.HSet(ctx, "h", "f", "v")
	}
	_, err1 := c.Obtain(ctx, "h", time.Minute)
	_, err2 := c.ObtainMulti(ctx, []string{"a", "h"}, time.Minute)
	t.Logf("Obtain: %v", err1)
	t.Logf("ObtainMulti: %v", err2)
	if errors.Is(err1, redlock.ErrTaken) != errors.Is(err2, redlock.ErrTaken) {
		t.Errorf("a key of another type: Obtain %v, ObtainMulti %v: want the same kind", err1, err2)
	}
}

// TestMultiExtendAndRelease: Extend and Release act on the whole set,
// owner-checked key by key: Extend re-takes a vanished key and is refused
// where a key is another owner's; Release never deletes another owner's
// key, and reports the loss.
func TestMultiExtendAndRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	keys := []string{"x", "y", "z"}
	l, err := c.ObtainMulti(ctx, keys, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if v := l.Validity(); v < 50*time.Second {
		t.Fatalf("validity %v after Extend(1m)", v)
	}
	redistest.Eventually(t, func() error { // Extend returned at quorum
		for i, rdb := range clients {
			for _, k := range keys {
				if pttl := rdb.PTTL(ctx, k).Val(); pttl < 50*time.Second {
					return fmt.Errorf("master %d key %s: TTL %v after Extend(1m)", i, k, pttl)
				}
			}
		}
		return nil
	})

	// A key vanished everywhere (an eviction): Extend takes it back.
	for _, rdb := range clients {
		rdb.Del(ctx, "y")
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		if got := holdsAll(t, clients, l.Token(), keys...); got != 3 {
			return fmt.Errorf("%d of 3 masters hold the set after Extend re-took y", got)
		}
		return nil
	})

	// Another owner holds z on two masters: Extend is refused there, and
	// changes nothing of ours on them.
	for _, rdb := range clients[:2] {
		rdb.Set(ctx, "z", "someone-else", time.Minute)
		rdb.PExpire(ctx, "x", 30*time.Second)
	}
	err = l.Extend(ctx, time.Minute)
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend with z taken on 2 of 3: %v, want ErrLockLost", err)
	}
	for i, rdb := range clients[:2] {
		if pttl := rdb.PTTL(ctx, "x").Val(); pttl > 30*time.Second {
			t.Fatalf("master %d: x extended to %v by a refused Extend", i, pttl)
		}
	}

	// Release deletes ours, never theirs, and reports the loss.
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release: %v, want ErrLockLost", err)
	}
	redistest.Eventually(t, func() error {
		for i, rdb := range clients {
			if v := get(t, rdb, "z"); (i < 2) != (v == "someone-else") || (i == 2 && v != "") {
				return fmt.Errorf("master %d: z = %q after Release", i, v)
			}
			for _, k := range []string{"x", "y"} {
				if v := get(t, rdb, k); v != "" {
					return fmt.Errorf("master %d: %s = %q after Release", i, k, v)
				}
			}
		}
		return nil
	})

	// WithHoldAtLeast keeps every key of the set for the rest of the hold.
	l, err = c.ObtainMulti(ctx, []string{"p", "q"}, time.Minute, redlock.WithHoldAtLeast(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil || l.KeptUntil().IsZero() {
		t.Fatalf("Release with a hold: %v, kept until %v", err, l.KeptUntil())
	}
	redistest.Eventually(t, func() error {
		for i, rdb := range clients {
			for _, k := range []string{"p", "q"} {
				if pttl := rdb.PTTL(ctx, k).Val(); pttl <= 0 || pttl > time.Second {
					return fmt.Errorf("master %d key %s: TTL %v after a held Release, want the rest of 1s", i, k, pttl)
				}
			}
		}
		return nil
	})
}

// TestDoMultiRenewsTheSet: the watchdog renews every key of the set while fn
// runs past the TTL, and the set is free once DoMulti returns.
func TestDoMultiRenewsTheSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	other := newClient(t, clients)
	const ttl = 300 * time.Millisecond
	err := c.DoMulti(ctx, []string{"m", "n"}, ttl, func(ctx context.Context) error {
		for range 4 {
			work(ttl / 2)
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if _, err := other.ObtainMulti(ctx, []string{"n"}, time.Minute); !errors.Is(err, redlock.ErrTaken) {
				return fmt.Errorf("n while the set is held: %v", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		for _, k := range []string{"m", "n"} {
			if vs := holdersOf(t, clients, k); count(vs, "") != 3 {
				return fmt.Errorf("%s after DoMulti: %q", k, vs)
			}
		}
		return nil
	})
}

// TestMultiMasterDown: a minority down or frozen still grants sets; a
// majority down does not; and a failed attempt leaves no key of the set on
// any master that granted it.
func TestMultiMasterDown(t *testing.T) {
	for _, how := range []string{"killed", "frozen"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			servers, clients, c := cluster(t, 5, redlock.WithNodeTimeout(200*time.Millisecond))
			takeDown(t, how, servers[4])
			l, err := c.ObtainMulti(ctx, []string{"a", "b"}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			redistest.Eventually(t, func() error {
				if got := holdsAll(t, clients[:4], l.Token(), "a", "b"); got != 4 {
					return fmt.Errorf("%d of the 4 live masters hold the set", got)
				}
				return nil
			})
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// Another owner holds b on master 1 and a on master 2: with 4
			// down, only masters 0 and 3 grant {a, b}; the attempt fails
			// and both give the whole set back.
			clients[1].Set(ctx, "b", "other", time.Minute)
			clients[2].Set(ctx, "a", "other", time.Minute)
			_, err = c.ObtainMulti(ctx, []string{"a", "b"}, time.Minute)
			if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrUnavailable) {
				t.Fatalf("2 refusals and a master down: %v, want ErrNotObtained and ErrUnavailable", err)
			}
			redistest.Eventually(t, func() error { // the attempt fails before a late grant's answer, whose undo follows it
				for _, i := range []int{0, 3} {
					if a, b := get(t, clients[i], "a"), get(t, clients[i], "b"); a != "" || b != "" {
						return fmt.Errorf("master %d kept a=%q b=%q after the failed attempt", i, a, b)
					}
				}
				return nil
			})

			takeDown(t, how, servers[2], servers[3])
			if _, err := c.ObtainMulti(ctx, []string{"c", "d"}, time.Minute); !errors.Is(err, redlock.ErrUnavailable) {
				t.Fatalf("a majority down: %v, want ErrUnavailable", err)
			}
		})
	}
}

// TestMultiOnRedisCluster: on a Redis Cluster a set must share a hash slot:
// a set that cannot is refused before any request, with the way to tag it;
// tagged sets work, with fencing too.
func TestMultiOnRedisCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rc := redistest.StartCluster(t, 3)
	cc := rc.Client()
	t.Cleanup(func() { cc.Close() })
	for _, fencing := range []bool{false, true} {
		opts := []redlock.Option{redlock.WithKeyPrefix("lock:")}
		if fencing {
			opts = append(opts, redlock.WithFencing())
		}
		c, err := redlock.NewSingle(cc, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// account:a and account:b are in different slots (hash tags aside).
		_, err = c.ObtainMulti(ctx, []string{"account:a", "account:b"}, time.Minute)
		if !errors.Is(err, redlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "{account}:a and {account}:b") {
			t.Fatalf("fencing %v: untagged set: %v, want ErrInvalidArgument showing the tags", fencing, err)
		}
		for i := range 20 { // tags in slots of every shard
			set := []string{fmt.Sprintf("{acct%d}:a", i), fmt.Sprintf("{acct%d}:b", i), fmt.Sprintf("x:{acct%d}", i)}
			l, err := c.ObtainMulti(ctx, set, time.Minute)
			if err != nil {
				t.Fatalf("fencing %v: set %q: %v", fencing, set, err)
			}
			if fencing && l.Fence() < 1 {
				t.Fatalf("set %q: fence %d", set, l.Fence())
			}
			if _, err := c.Obtain(ctx, set[1], time.Minute); !errors.Is(err, redlock.ErrTaken) {
				t.Fatalf("a key of a held set: %v, want ErrTaken", err)
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatalf("set %q: Extend: %v", set, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("set %q: Release: %v", set, err)
			}
			for _, k := range set {
				if n := cc.Exists(ctx, "lock:"+k).Val(); n != 0 {
					t.Fatalf("lock:%s left after Release", k)
				}
			}
		}
		// A prefix with a tag puts every key in its slot.
		tagged, err := redlock.NewSingle(cc, append(opts, redlock.WithKeyPrefix("{locks}:"))...)
		if err != nil {
			t.Fatal(err)
		}
		defer tagged.Close()
		l, err := tagged.ObtainMulti(ctx, []string{"account:a", "account:b"}, time.Minute)
		if err != nil {
			t.Fatalf("prefix {locks}: %v", err)
		}
		l.Release(ctx)
	}
}
