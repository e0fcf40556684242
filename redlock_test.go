package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// These tests run against real redis-server processes on loopback.

func newClient(t *testing.T, masters []redis.UniversalClient, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.New(masters, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func startServers(t *testing.T, n int) []*redistest.Server { return redistest.Start(t, n) }

func startCluster(t *testing.T, masters int) *redistest.Cluster {
	return redistest.StartCluster(t, masters)
}

func clientsOf(t *testing.T, servers []*redistest.Server) []redis.UniversalClient {
	return redistest.Clients(t, servers)
}

// cluster starts n masters and a Client over them. Its node timeout is
// generous (tests share a busy 2-core machine) unless opts set another.
func cluster(t *testing.T, n int, opts ...redlock.Option) ([]*redistest.Server, []redis.UniversalClient, *redlock.Client) {
	t.Helper()
	servers := redistest.Start(t, n)
	clients := redistest.Clients(t, servers)
	opts = append([]redlock.Option{redlock.WithNodeTimeout(500 * time.Millisecond)}, opts...)
	return servers, clients, newClient(t, clients, opts...)
}

func get(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	v, err := rdb.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// holdersOf returns, per master, the value of key ("" when absent).
func holdersOf(t *testing.T, clients []redis.UniversalClient, key string) []string {
	t.Helper()
	vs := make([]string, len(clients))
	for i, c := range clients {
		vs[i] = get(t, c, key)
	}
	return vs
}

func count(vs []string, v string) int {
	n := 0
	for _, x := range vs {
		if x == v {
			n++
		}
	}
	return n
}

func TestExclusivity(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			_, _, c := cluster(t, n)
			const workers, rounds = 12, 15
			var holders, maxHolders, held atomic.Int32
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for r := range rounds {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						l, err := c.Obtain(ctx, "hot", time.Second, redlock.WithRetry(redlock.LinearBackoff(2*time.Millisecond)))
						if err != nil {
							cancel()
							t.Errorf("worker %d round %d: %v", w, r, err)
							return
						}
						h := holders.Add(1)
						if h > maxHolders.Load() {
							maxHolders.Store(h)
						}
						held.Add(1)
						time.Sleep(100 * time.Microsecond)
						holders.Add(-1)
						if err := l.Release(ctx); err != nil {
							t.Errorf("release: %v", err)
						}
						cancel()
					}
				})
			}
			wg.Wait()
			if got := maxHolders.Load(); got != 1 {
				t.Fatalf("at most %d holders at once, want 1", got)
			}
			if got := held.Load(); got != workers*rounds {
				t.Fatalf("%d holds, want %d", got, workers*rounds)
			}
		})
	}
}

func TestReleaseNeverDeletesAnotherOwnersKey(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			ctx := context.Background()
			_, clients, c := cluster(t, n)
			old, err := c.Obtain(ctx, "k", 30*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			var cur *redlock.Lock
			redistest.Eventually(t, func() error { // once old's keys expire
				cur, err = c.Obtain(ctx, "k", time.Minute)
				return err
			})
			// Let every master expire old's key, then count where cur holds.
			time.Sleep(50 * time.Millisecond)
			held := count(holdersOf(t, clients, "k"), cur.Token())
			if held < n/2+1 {
				t.Fatalf("new owner holds %d of %d masters", held, n)
			}
			err = old.Release(ctx)
			if !errors.Is(err, redlock.ErrLockLost) {
				t.Fatalf("Release of an expired lock: %v, want ErrLockLost", err)
			}
			if got := count(holdersOf(t, clients, "k"), cur.Token()); got != held {
				t.Fatalf("new owner's key on %d masters after the old owner's Release, %d before", got, held)
			}
		})
	}
}

func TestExtendAndValidity(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			ctx := context.Background()
			_, clients, c := cluster(t, n)
			l, err := c.Obtain(ctx, "k", 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			v1 := l.Validity()
			if v1 <= 0 || v1 > 300*time.Millisecond-5*time.Millisecond {
				t.Fatalf("validity %v, want in (0, ttl - drift]", v1)
			}
			time.Sleep(20 * time.Millisecond)
			if v2 := l.Validity(); v2 >= v1 {
				t.Fatalf("validity did not shrink: %v then %v", v1, v2)
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if v := l.Validity(); v <= 300*time.Millisecond {
				t.Fatalf("validity after Extend(1m) is %v", v)
			}
			time.Sleep(400 * time.Millisecond) // past the first TTL
			redistest.Eventually(t, func() error {
				for i, rdb := range clients {
					pttl, err := rdb.PTTL(ctx, "k").Result()
					if err != nil {
						return err
					}
					if pttl < 30*time.Second {
						return fmt.Errorf("master %d: PTTL %v after Extend(1m)", i, pttl)
					}
				}
				return nil
			})
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLapsedLockIsNeverRevived(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	l, err := c.Obtain(ctx, "k", 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(40 * time.Millisecond)
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend of a lapsed lock: %v, want ErrLockLost", err)
	}
	if got := count(holdersOf(t, clients, "k"), l.Token()); got != 0 {
		t.Fatalf("lapsed lock revived on %d masters", got)
	}
}

func TestExtendRetakesVanishedKey(t *testing.T) {
	ctx := context.Background()
	servers, clients, c := cluster(t, 3)
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Restart(false); err != nil { // forgets the key
		t.Fatal(err)
	}
	if got := get(t, clients[0], "k"); got != "" {
		t.Fatalf("restarted master still has %q", got)
	}
	// The first Extend after the restart re-takes the key: the connection
	// that went dead with the old process is not reused.
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		if got := get(t, clients[0], "k"); got != l.Token() {
			return fmt.Errorf("restarted master holds %q after Extend, want our token", got)
		}
		return nil
	})
}

// TestDeadlineKeepsDetail: Obtain retrying until its deadline reports who
// holds the lock, even when the deadline cuts the last attempt short.
func TestDeadlineKeepsDetail(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	h, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	for i := range 30 {
		dctx, cancel := context.WithTimeout(ctx, time.Duration(100+i)*time.Millisecond)
		_, err := c.Obtain(dctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(3*time.Millisecond)))
		cancel()
		var qe *redlock.QuorumError
		if !errors.As(err, &qe) || !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrTaken) {
			t.Fatalf("try %d: %v: want a QuorumError that says the lock is taken", i, err)
		}
	}
}

// TestScriptsLoadInTheSamePipeline: the first script request to a master
// loads every script and runs in one round trip, so a slow master (round
// trip over a sixth of the node timeout) can still release.
func TestScriptsLoadInTheSamePipeline(t *testing.T) {
	ctx := context.Background()
	servers := startServers(t, 1)
	clients := clientsOf(t, servers)
	trips := &pipelineCounter{}
	clients[0].AddHook(trips)
	c := newClient(t, clients)
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	before := trips.trips.Load()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := trips.trips.Load() - before; got != 1 {
		t.Fatalf("the first Release took %d round trips, want 1", got)
	}
}

func TestExtendAndReleaseAfterTakeover(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, rdb := range clients[:2] { // an intruder overwrites a majority
		rdb.Set(ctx, "k", "intruder", time.Minute)
	}
	err = l.Extend(ctx, time.Minute)
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after takeover: %v, want ErrLockLost", err)
	}
	if l.Validity() != 0 {
		t.Fatal("validity of a lost lock is not 0")
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release after takeover: %v, want ErrLockLost", err)
	}
	redistest.Eventually(t, func() error {
		vs := holdersOf(t, clients, "k")
		if count(vs, "intruder") != 2 || vs[2] != "" {
			return fmt.Errorf("masters hold %q, want the intruder's keys untouched and ours gone", vs)
		}
		return nil
	})
}

func TestExtendWithoutAnswersIsNotLost(t *testing.T) {
	ctx := context.Background()
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[:2] {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	err = l.Extend(ctx, time.Minute)
	for _, s := range servers[:2] {
		s.Cont()
	}
	if err == nil || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend with a frozen majority: %v, want an error that is not ErrLockLost", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Extend error %v does not report the timeouts", err)
	}
	if l.Validity() == 0 {
		t.Fatal("an unanswered Extend dropped the validity")
	}
}

// takeDown kills ("killed") or freezes ("frozen", resumed at cleanup) the
// servers.
func takeDown(t *testing.T, how string, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		var err error
		if how == "killed" {
			err = s.Kill()
		} else {
			err = s.Stop()
			t.Cleanup(func() { s.Cont() })
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestMinorityDown(t *testing.T) {
	for _, how := range []string{"killed", "frozen"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			const timeout = 2 * time.Second
			servers, clients, c := cluster(t, 5, redlock.WithNodeTimeout(timeout))
			takeDown(t, how, servers[3:]...)
			start := time.Now()
			l, err := c.Obtain(ctx, "k", time.Minute)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			// Obtain decided at quorum, without waiting for the frozen masters.
			if took >= timeout/2 {
				t.Fatalf("Obtain took %v with a %v node timeout: it waited for the silent masters", took, timeout)
			}
			if got := count(holdersOf(t, clients[:3], "k"), l.Token()); got != 3 {
				t.Fatalf("our token on %d of the 3 live masters", got)
			}
			start = time.Now()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took >= timeout/2 {
				t.Fatalf("Release took %v: it waited for the silent masters", took)
			}
		})
	}
}

func TestMajorityDown(t *testing.T) {
	for _, how := range []string{"killed", "frozen"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			const timeout = 200 * time.Millisecond
			servers, _, c := cluster(t, 5, redlock.WithNodeTimeout(timeout))
			down := map[string]bool{}
			for _, s := range servers[2:] {
				down[s.Addr()] = true
			}
			takeDown(t, how, servers[2:]...)
			start := time.Now()
			_, err := c.Obtain(ctx, "k", time.Minute)
			took := time.Since(start)
			if !errors.Is(err, redlock.ErrNotObtained) {
				t.Fatalf("Obtain with a majority %s: %v, want ErrNotObtained", how, err)
			}
			if took > 2*timeout {
				t.Fatalf("Obtain took %v with a %v node timeout", took, timeout)
			}
			var qe *redlock.QuorumError
			if !errors.As(err, &qe) || qe.Op != "obtain" || qe.Quorum != 3 || len(qe.Nodes) != 5 {
				t.Fatalf("error %v: want a QuorumError for 5 masters", err)
			}
			for _, n := range qe.Nodes {
				if down[n.Addr] && n.Err == nil {
					t.Fatalf("master %s is down but reported no error", n.Addr)
				}
				if !strings.Contains(err.Error(), n.Addr) {
					t.Fatalf("error %q does not name master %s", err, n.Addr)
				}
			}
			if how == "frozen" && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v does not report the timeouts", err)
			}
		})
	}
}

// TestSingleFrozenIsBounded: one frozen master, a client whose socket reads
// are bounded by its own ReadTimeout (1s) only: Obtain and Release still
// return at the node timeout.
func TestSingleFrozenIsBounded(t *testing.T) {
	ctx := context.Background()
	const timeout = 100 * time.Millisecond
	servers, _, c := cluster(t, 1, redlock.WithNodeTimeout(timeout))
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	defer servers[0].Cont()
	for _, call := range []func() error{
		func() error { _, err := c.Obtain(ctx, "other", time.Minute); return err },
		func() error { return l.Release(ctx) },
	} {
		start := time.Now()
		if err := call(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call on a frozen master: %v, want a timeout", err)
		}
		if took := time.Since(start); took > 3*timeout {
			t.Fatalf("call on a frozen master took %v with a %v node timeout", took, timeout)
		}
	}
}

func TestStranger(t *testing.T) {
	for _, held := range []int{2, 3} {
		t.Run(fmt.Sprintf("held on %d of 5", held), func(t *testing.T) {
			ctx := context.Background()
			_, clients, c := cluster(t, 5)
			for _, rdb := range clients[:held] {
				rdb.Set(ctx, "k", "stranger", time.Minute)
			}
			l, err := c.Obtain(ctx, "k", time.Minute)
			if held < 3 {
				if err != nil {
					t.Fatal(err)
				}
				redistest.Eventually(t, func() error {
					if got := count(holdersOf(t, clients, "k"), l.Token()); got != 5-held {
						return fmt.Errorf("our token on %d masters, want %d", got, 5-held)
					}
					return nil
				})
			} else {
				if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrTaken) {
					t.Fatalf("Obtain: %v, want ErrNotObtained with ErrTaken", err)
				}
				redistest.Eventually(t, func() error { // nothing of ours left behind
					if vs := holdersOf(t, clients, "k"); count(vs, "") != 5-held {
						return fmt.Errorf("masters hold %q after a failed Obtain", vs)
					}
					return nil
				})
			}
			if got := count(holdersOf(t, clients, "k"), "stranger"); got != held {
				t.Fatalf("stranger's key left on %d masters, want %d", got, held)
			}
		})
	}
}

// settled waits until the master has run want SETs in all (the last
// attempt's may still be on its way when Obtain returns), and checks no
// more come.
func settled(t *testing.T, rdb redis.UniversalClient, want int) {
	t.Helper()
	redistest.Eventually(t, func() error {
		if got := setCalls(t, rdb); got != want {
			return fmt.Errorf("%d SETs reached the master, want %d", got, want)
		}
		return nil
	})
	time.Sleep(20 * time.Millisecond)
	if got := setCalls(t, rdb); got != want {
		t.Fatalf("%d SETs reached the master, want %d", got, want)
	}
}

func setCalls(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	return cmdCalls(t, rdb, "set")
}

// cmdCalls reads how many times the master ran cmd (INFO commandstats).
func cmdCalls(t *testing.T, rdb redis.UniversalClient, cmd string) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

func TestRetry(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	holder, err := c.Obtain(ctx, "k", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}

	redistest.Eventually(t, func() error { // the holder's own SETs have all landed
		if got := count(holdersOf(t, clients, "k"), holder.Token()); got != 3 {
			return fmt.Errorf("holder on %d masters", got)
		}
		return nil
	})

	t.Run("LimitRetry counts attempts", func(t *testing.T) {
		before := setCalls(t, clients[0])
		_, err := c.Obtain(ctx, "k", time.Second, redlock.WithRetry(redlock.LimitRetry(redlock.LinearBackoff(time.Millisecond), 4)))
		if !errors.Is(err, redlock.ErrNotObtained) {
			t.Fatalf("Obtain: %v", err)
		}
		settled(t, clients[0], before+4)
	})

	t.Run("deadline stops retries", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Obtain(dctx, "k", time.Second, redlock.WithRetry(redlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
		if !errors.Is(err, redlock.ErrNotObtained) {
			t.Fatalf("Obtain: %v", err)
		}
		if took := time.Since(start); took > 50*time.Millisecond+100*time.Millisecond {
			t.Fatalf("Obtain returned %v after a 50ms deadline", took)
		}
	})

	t.Run("cancel stops retries", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(30*time.Millisecond, cancel)
		_, err := c.Obtain(cctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(5*time.Millisecond)))
		if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Obtain: %v, want ErrNotObtained and context.Canceled", err)
		}
	})

	t.Run("retries until the holder's TTL ends", func(t *testing.T) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := c.Obtain(rctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() == holder.Token() {
			t.Fatal("same token for two Obtains")
		}
		l.Release(ctx)
	})

	t.Run("shared strategy keeps no state", func(t *testing.T) {
		s := redlock.LimitRetry(redlock.LinearBackoff(time.Millisecond), 2)
		h, err := c.Obtain(ctx, "shared", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		redistest.Eventually(t, func() error { // h's own SETs have all landed
			if got := count(holdersOf(t, clients, "shared"), h.Token()); got != 3 {
				return fmt.Errorf("holder on %d masters", got)
			}
			return nil
		})
		for range 3 { // each call gets the whole budget
			before := setCalls(t, clients[0])
			c.Obtain(ctx, "shared", time.Second, redlock.WithRetry(s))
			settled(t, clients[0], before+2)
		}
	})
}

func TestScriptCacheFlushed(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, rdb := range clients {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
	}
	for _, rdb := range clients {
		rdb.ScriptFlush(ctx)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
}

func TestConcurrentExtendAndRelease(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	for round := range 20 {
		key := fmt.Sprint("k", round)
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 5 {
					if err := l.Extend(ctx, time.Minute); err != nil && !errors.Is(err, redlock.ErrLockLost) {
						t.Errorf("Extend: %v", err)
					}
				}
			})
		}
		wg.Go(func() {
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
		})
		wg.Wait()
		// No Extend after the Release may bring the key back.
		redistest.Eventually(t, func() error {
			if vs := holdersOf(t, clients, key); count(vs, "") != 3 {
				return fmt.Errorf("masters hold %q after Release", vs)
			}
			return nil
		})
	}
}

func TestRedisClusterBehindNewSingle(t *testing.T) {
	ctx := context.Background()
	rc := redistest.StartCluster(t, 3)
	cc := rc.Client()
	t.Cleanup(func() { cc.Close() })
	c, err := redlock.NewSingle(cc, redlock.WithKeyPrefix("lock:"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var locks []*redlock.Lock
	for i := range 100 { // keys in slots of all three masters
		l, err := c.Obtain(ctx, fmt.Sprint("job-", i), time.Minute)
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		locks = append(locks, l)
	}
	if _, err := c.Obtain(ctx, "job-7", time.Minute); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("second Obtain of a held key: %v", err)
	}
	for _, l := range locks {
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("Extend %s: %v", l.Key(), err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %s: %v", l.Key(), err)
		}
	}
	for i := range 100 {
		if v, err := cc.Exists(ctx, fmt.Sprint("lock:job-", i)).Result(); err != nil || v != 0 {
			t.Fatalf("lock:job-%d left after Release (%d, %v)", i, v, err)
		}
	}
}

func TestClosedClient(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 1)
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := c.Obtain(ctx, "k", time.Minute); !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("Obtain after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
