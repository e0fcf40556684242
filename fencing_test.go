package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Fencing tokens: they rise across holders, keys and faults; FencedWrite
// refuses a stale one.

// TestFencesIncreaseAcrossHolders: each holder of a key, whatever its
// Client, gets a fence above the one before.
func TestFencesIncreaseAcrossHolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, a := cluster(t, 5, redlock.WithFencing())
	b := newClient(t, clients, redlock.WithFencing())
	var last int64
	for i := range 40 {
		c := a
		if i%2 == 1 {
			c = b
		}
		l, err := c.Obtain(ctx, "job", time.Minute)
		if err != nil {
			t.Fatalf("holder %d: %v", i, err)
		}
		if l.Fence() <= last {
			t.Fatalf("holder %d got fence %d after %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFencesIncreaseWhileMastersFreeze: fences rise across holders while
// up to two masters of five are frozen at random, and resume with the
// requests they held.
func TestFencesIncreaseWhileMastersFreeze(t *testing.T) {
	ctx := context.Background()
	servers, _, c := cluster(t, 5, redlock.WithFencing(), redlock.WithNodeTimeout(100*time.Millisecond))
	rng := rand.New(rand.NewPCG(1, 2))
	var last int64
	for round := range 60 {
		frozen := rng.Perm(5)[:rng.IntN(3)] // 0, 1 or 2 masters
		for _, i := range frozen {
			if err := servers[i].Stop(); err != nil {
				t.Fatal(err)
			}
		}
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := c.Obtain(octx, "job", time.Second, redlock.WithRetry(redlock.LinearBackoff(20*time.Millisecond)))
		cancel()
		if err != nil {
			t.Fatalf("round %d, frozen %v: %v", round, frozen, err)
		}
		if l.Fence() <= last {
			t.Fatalf("round %d, frozen %v: fence %d after %d", round, frozen, l.Fence(), last)
		}
		last = l.Fence()
		// Resume first: the frozen masters' late requests run now.
		for _, i := range frozen {
			servers[i].Cont()
		}
		l.Release(ctx)
	}
}

// TestFenceSingleInstanceCounts: on one master the fences count 1, 2, 3...
// in the counter key beside the lock's, in its hash slot.
func TestFenceSingleInstanceCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	clients := redistest.Clients(t, servers)
	c, err := redlock.NewSingle(clients[0], redlock.WithFencing(), redlock.WithKeyPrefix("lock:"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for want := int64(1); want <= 5; want++ {
		l := obtain(t, c, "job", time.Minute)
		if l.Fence() != want {
			t.Fatalf("fence %d, want %d", l.Fence(), want)
		}
		l.Release(ctx)
	}
	if v := get(t, clients[0], "{lock:job}:fence"); v != "5" {
		t.Fatalf("counter {lock:job}:fence = %q, want 5", v)
	}
}

// TestFenceIsQuorumMaxAndCountersAreRaised: with counters drifted apart,
// the fence is the largest of the quorum's after the increment, and the
// masters that count are raised to it.
func TestFenceIsQuorumMaxAndCountersAreRaised(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3, redlock.WithFencing())
	for i, v := range []int{5, 9, 2} { // counters drifted apart
		clients[i].Set(ctx, "{job}:fence", v, 0)
	}
	l := obtain(t, c, "job", time.Minute)
	// The quorum's largest counter after INCR: 10 if master 1 was in it,
	// else 6; all masters that count carry at least that.
	if f := l.Fence(); f != 10 && f != 6 {
		t.Fatalf("fence %d", f)
	}
	redistest.Eventually(t, func() error {
		at := 0
		for _, rdb := range clients {
			if v, _ := strconv.ParseInt(get(t, rdb, "{job}:fence"), 10, 64); v >= l.Fence() {
				at++
			}
		}
		if at < 2 {
			return fmt.Errorf("only %d masters carry the fence %d", at, l.Fence())
		}
		return nil
	})
}

// TestExtendRetakeRaisesCounter: an Extend that re-takes a key a
// restarted master lost raises that master's counter back to the lock's
// fence.
func TestExtendRetakeRaisesCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers, clients, c := cluster(t, 3, redlock.WithFencing())
	for range 3 { // counters at 3
		l := obtain(t, c, "job", time.Minute)
		l.Release(ctx)
	}
	l := obtain(t, c, "job", time.Minute)
	// Obtain returns at a quorum: no grant on its way to the master that restarts.
	onEvery(t, clients, "job", l.Token())
	if err := servers[0].Restart(false); err != nil { // forgets key and counter
		t.Fatal(err)
	}
	// Requests on the restarted master's old pooled connections fail once
	// each; Extend until one reaches it.
	redistest.Eventually(t, func() error {
		if err := l.Extend(ctx, time.Minute); err != nil {
			return err
		}
		if get(t, clients[0], "job") != l.Token() {
			return errors.New("key not re-taken on the restarted master")
		}
		return nil
	})
	if got := get(t, clients[0], "{job}:fence"); got != strconv.FormatInt(l.Fence(), 10) {
		t.Fatalf("restarted master's counter %q after the re-take, want %d", got, l.Fence())
	}
}

// TestNoFencingWritesNoCounter: without WithFencing, the fence is 0 and
// the masters hold the lock's key alone.
func TestNoFencingWritesNoCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	l := obtain(t, c, "job", time.Minute)
	defer l.Release(ctx)
	if l.Fence() != 0 {
		t.Fatalf("fence %d without WithFencing", l.Fence())
	}
	redistest.Eventually(t, func() error {
		for i, rdb := range clients {
			if n, _ := rdb.DBSize(ctx).Result(); n != 1 {
				return fmt.Errorf("master %d has %d keys, want only the lock", i, n)
			}
		}
		return nil
	})
}

// TestMultiFencesIncreasePerKey: sets and single-key locks on overlapping
// keys, in random order, with masters frozen at random: every holder's
// fence is above the fence of every earlier holder of each of its keys, so
// a resource guarded by one key can check it alone.
func TestMultiFencesIncreasePerKey(t *testing.T) {
	ctx := context.Background()
	servers, clients, c := cluster(t, 5, redlock.WithFencing(), redlock.WithNodeTimeout(100*time.Millisecond))
	rng := rand.New(rand.NewPCG(3, 4))
	keys := []string{"acct:1", "acct:2", "acct:3", "acct:4"}
	last := map[string]int64{}
	for round := range 60 {
		set := keys[:0:0]
		for _, i := range rng.Perm(len(keys))[:1+rng.IntN(3)] {
			set = append(set, keys[i])
		}
		frozen := rng.Perm(5)[:rng.IntN(3)]
		for _, i := range frozen {
			if err := servers[i].Stop(); err != nil {
				t.Fatal(err)
			}
		}
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var l *redlock.Lock
		var err error
		if len(set) == 1 && round%2 == 0 {
			l, err = c.Obtain(octx, set[0], time.Second, redlock.WithRetry(redlock.LinearBackoff(20*time.Millisecond)))
		} else {
			l, err = c.ObtainMulti(octx, set, time.Second, redlock.WithRetry(redlock.LinearBackoff(20*time.Millisecond)))
		}
		cancel()
		if err != nil {
			t.Fatalf("round %d, set %q, frozen %v: %v", round, set, frozen, err)
		}
		for _, k := range set {
			if l.Fence() <= last[k] {
				t.Fatalf("round %d, set %q, frozen %v: fence %d, but %s had %d", round, set, frozen, l.Fence(), k, last[k])
			}
			last[k] = l.Fence()
		}
		for _, i := range frozen {
			servers[i].Cont()
		}
		l.Release(ctx)
	}
	// Every counter the sets touched stands at least at its key's last
	// fence on a quorum.
	for _, k := range keys {
		at := 0
		for _, rdb := range clients {
			if v, _ := strconv.ParseInt(get(t, rdb, "{"+k+"}:fence"), 10, 64); v >= last[k] {
				at++
			}
		}
		if at < 3 {
			t.Fatalf("key %s: counter at its last fence %d on %d masters", k, last[k], at)
		}
	}
}

// TestMultiFenceIsAboveEveryKeysHolders: counters apart (one key much used
// alone), a set's fence is above both, every counter of the set is raised
// to it on every master, and the next holder of either key goes above.
func TestMultiFenceIsAboveEveryKeysHolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, clients, c := cluster(t, 3, redlock.WithFencing(), redlock.WithKeyPrefix("lock:"))
	for range 7 {
		l := obtain(t, c, "from", time.Minute)
		l.Release(ctx)
	}
	redistest.Eventually(t, func() error { // every master runs the set's acquire
		if vs := holdersOf(t, clients, "lock:from"); count(vs, "") != 3 {
			return fmt.Errorf("lock:from still held: %q", vs)
		}
		return nil
	})
	l, err := c.ObtainMulti(ctx, []string{"to", "from"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() != 8 {
		t.Fatalf("fence %d, want 8 (the counter of from, 7, plus one)", l.Fence())
	}
	redistest.Eventually(t, func() error {
		for i, rdb := range clients {
			for _, ck := range []string{"{lock:to}:fence", "{lock:from}:fence"} {
				if v := get(t, rdb, ck); v != "8" {
					return fmt.Errorf("master %d: %s = %q, want 8", i, ck, v)
				}
			}
		}
		return nil
	})
	l.Release(ctx)
	next := obtain(t, c, "to", time.Minute)
	if next.Fence() != 9 {
		t.Fatalf("the next holder of to: fence %d, want 9", next.Fence())
	}
	// The resource guarded by "to" checks it as for one key.
	rdb := clients[0]
	if err := redlock.FencedWrite(ctx, rdb, "balance:to", next.Fence(), "100"); err != nil {
		t.Fatal(err)
	}
	if err := redlock.FencedWrite(ctx, rdb, "balance:to", l.Fence(), "stale"); !errors.Is(err, redlock.ErrStaleFence) {
		t.Fatalf("the set's older fence on to's resource: %v, want ErrStaleFence", err)
	}
}

// TestFencingOnRedisCluster: with fencing on a Redis Cluster, a key and its
// counter share a slot, whatever the key's hash tag; a key with a '}' but
// no hash tag, whose counter cannot, is refused before any request.
func TestFencingOnRedisCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rc := redistest.StartCluster(t, 3)
	cc := rc.Client()
	t.Cleanup(func() { cc.Close() })
	c, err := redlock.NewSingle(cc, redlock.WithFencing(), redlock.WithKeyPrefix("lock:"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := []string{"user:{42}:profile", "{tagged}", "a{b", "x{y}z}"}
	for i := range 100 {
		keys = append(keys, fmt.Sprint("job-", i))
	}
	for _, k := range keys {
		l, err := c.Obtain(ctx, k, time.Minute)
		if err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		if l.Fence() != 1 {
			t.Fatalf("key %q: fence %d, want 1", k, l.Fence())
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("key %q: Extend: %v", k, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("key %q: Release: %v", k, err)
		}
	}
	// A '}' without a hash tag: no counter key can share its slot.
	for _, k := range []string{"a}b", "x{}y{z}"} { // Redis reads "{}" as no tag at all
		if _, err := c.Obtain(ctx, k, time.Minute); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Fatalf("key %q on a Cluster with fencing: %v, want ErrInvalidArgument", k, err)
		}
	}
}

// TestFencedWrite: FencedWrite takes a write with a fence at least the
// highest seen, refuses a stale one (a StaleFenceError), and FencedRead
// returns the value with its fence.
func TestFencedWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := redistest.Clients(t, servers)[0].(*redis.Client)
	rdb.ScriptFlush(ctx) // the first write loads the script
	for _, step := range []struct {
		fence int64
		value string
		stale bool
	}{
		{5, "a", false},
		{5, "b", false}, // equal: the same holder writes again
		{4, "c", true},  // lower: a stale holder
		{9, "d", false},
		{5, "e", true},
	} {
		err := redlock.FencedWrite(ctx, rdb, "account:1", step.fence, step.value)
		var se *redlock.StaleFenceError
		if step.stale != errors.Is(err, redlock.ErrStaleFence) || (err != nil && !step.stale) {
			t.Fatalf("write %q with fence %d: %v", step.value, step.fence, err)
		}
		if step.stale && (!errors.As(err, &se) || se.Fence != step.fence || se.Highest < step.fence) {
			t.Fatalf("stale write error %#v", err)
		}
	}
	v, f, err := redlock.FencedRead(ctx, rdb, "account:1")
	if err != nil || v != "d" || f != 9 {
		t.Fatalf("resource holds %q at fence %d (%v), want d at 9", v, f, err)
	}
	if _, _, err := redlock.FencedRead(ctx, rdb, "nothing"); err != redis.Nil {
		t.Fatalf("FencedRead of a missing resource: %v", err)
	}
	for _, bad := range []int64{0, -1} {
		if err := redlock.FencedWrite(ctx, rdb, "account:1", bad, "x"); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Fatalf("fence %d: %v", bad, err)
		}
	}
}

// TestFencedWriteAtTheEdges: fences are compared as 64-bit integers, not
// Lua doubles, and a stored fence that is not one is an error, never a
// pass.
func TestFencedWriteAtTheEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Clients(t, redistest.Start(t, 1))[0]
	const two53 = int64(1) << 53
	for _, tc := range []struct {
		name          string
		stored        string
		fence         int64
		stale         bool
		highest       int64
		malformedRead bool
	}{
		{name: "above 2^53, lower by one", stored: fmt.Sprint(two53 + 1), fence: two53, stale: true, highest: two53 + 1},
		{name: "above 2^53, equal", stored: fmt.Sprint(two53 + 1), fence: two53 + 1},
		{name: "above 2^53, higher by one", stored: fmt.Sprint(two53), fence: two53 + 1},
		{name: "MaxInt64 stored, one below", stored: fmt.Sprint(int64(math.MaxInt64)), fence: math.MaxInt64 - 1, stale: true, highest: math.MaxInt64},
		{name: "MaxInt64 equal", stored: fmt.Sprint(int64(math.MaxInt64)), fence: math.MaxInt64},
		{name: "fewer digits", stored: "1000", fence: 999, stale: true, highest: 1000},
		{name: "more digits", stored: "999", fence: 1000},
		{name: "zero stored", stored: "0", fence: 1},
		{name: "nan stored", stored: "nan", fence: 5, malformedRead: true},
		{name: "exponent stored", stored: "1e3", fence: 5, malformedRead: true},
		{name: "hex stored", stored: "0x10", fence: 5, malformedRead: true},
		{name: "negative stored", stored: "-5", fence: 5, malformedRead: true},
		{name: "leading zero stored", stored: "007", fence: 5, malformedRead: true},
		{name: "beyond int64 stored", stored: "9223372036854775808", fence: math.MaxInt64, malformedRead: true},
	} {
		key := "edge:" + tc.name
		if err := rdb.HSet(ctx, key, "fence", tc.stored, "value", "old").Err(); err != nil {
			t.Fatal(err)
		}
		err := redlock.FencedWrite(ctx, rdb, key, tc.fence, "new")
		var se *redlock.StaleFenceError
		switch {
		case tc.malformedRead:
			if err == nil || errors.Is(err, redlock.ErrStaleFence) {
				t.Errorf("%s: write with fence %d: %v, want an error about the stored fence", tc.name, tc.fence, err)
			}
			if _, _, err := redlock.FencedRead(ctx, rdb, key); err == nil {
				t.Errorf("%s: FencedRead accepted stored fence %q", tc.name, tc.stored)
			}
		case tc.stale:
			if !errors.As(err, &se) || se.Highest != tc.highest || se.Fence != tc.fence {
				t.Errorf("%s: %v, want stale with highest %d", tc.name, err, tc.highest)
			}
		default:
			if err != nil {
				t.Errorf("%s: %v, want accepted", tc.name, err)
			}
			if v, f, err := redlock.FencedRead(ctx, rdb, key); err != nil || v != "new" || f != tc.fence {
				t.Errorf("%s: resource holds %q at fence %d (%v)", tc.name, v, f, err)
			}
		}
	}
}
