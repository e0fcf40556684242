package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The undo of a failed attempt: it leaves no key on a master that granted
// late, and costs nothing where a master refused.

// TestStallLeavesNoKeyOfAFailedObtain: a single master stalls (a slow
// command, a fork, a paused VM), longer than an Obtain's node timeout and
// its undo's. The Obtain times out; its SET, already in the master's socket
// buffer, runs when the stall ends; the failed attempt's key must not stay
// for the whole TTL, where nobody, the caller included, could take the
// lock. (ContextTimeoutEnabled as the README advises.)
func TestStallLeavesNoKeyOfAFailedObtain(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := clientOf(t, servers[0], bounded, oneLane) // the warm-up gives the lane its connection
	direct := redistest.Clients(t, servers)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(100*time.Millisecond))
	warm(t, c)
	takeDown(t, "frozen", servers[0])
	_, err := c.Obtain(ctx, "k", time.Minute)
	if !errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("Obtain on a stalled master: %v, want ErrUnavailable", err)
	}
	time.Sleep(500 * time.Millisecond) // the stall outlasts the undo's node timeout too
	resume(t, servers[0])
	redistest.Within(t, 500*time.Millisecond, func() error { // whatever clean-up there is has run
		if v := landed(t, direct[0], "k"); v != "" {
			return fmt.Errorf("after the stall ended, the failed attempt's key %q is still there for %v", v, direct[0].PTTL(ctx, "k").Val().Round(time.Second))
		}
		return nil
	})
}

// TestUndoWaitsForTheLateAnswer: an attempt decided at its quorum before a
// slow master answered undoes its key there only if that master's answer
// calls for it. A late grant is released; a late refusal (the key is
// another owner's) costs that master no Release at all.
func TestUndoWaitsForTheLateAnswer(t *testing.T) {
	ctx := context.Background()
	c, servers, p, direct := slowThird(t)
	evalshas := func() int64 { return calls(t, direct, "evalsha") }
	redistest.Eventually(t, func() error { // the warm-up's Release decided at a quorum: the slow master's may still be on its way
		if evalshas() == 0 {
			return errors.New("the warm-up's Release has not reached the slow master")
		}
		return nil
	})
	p.DelayOpen(100*time.Millisecond, 0)

	// Refused by the two fast masters, granted late by the slow one.
	take(t, servers, "granted-late", 0, 1)
	before := evalshas()
	if _, err := c.Obtain(ctx, "granted-late", time.Minute); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Obtain: %v, want ErrTaken", err)
	}
	redistest.Eventually(t, func() error {
		if n := evalshas() - before; n != 1 {
			return fmt.Errorf("the slow master ran %d scripts after its late grant, want its undo", n)
		}
		if n, err := direct.Exists(ctx, "granted-late").Result(); err != nil || n != 0 {
			return errors.New("the late grant's key is still on the slow master")
		}
		return nil
	})

	// Refused by all three, the slow one late: it gets no Release.
	take(t, servers, "refused-late", 0, 1, 2)
	before = evalshas()
	sets := calls(t, direct, "set")
	if _, err := c.Obtain(ctx, "refused-late", time.Minute); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Obtain: %v, want ErrTaken", err)
	}
	redistest.Eventually(t, func() error { // the slow master refused
		if calls(t, direct, "set") == sets {
			return errors.New("the slow master has not run the SET")
		}
		return nil
	})
	never(t, 250*time.Millisecond, func() error { // an undo sent at the late refusal would arrive now (100ms on its way)
		if n := evalshas() - before; n != 0 {
			return fmt.Errorf("the slow master ran %d scripts after refusing late: an undo it did not need", n)
		}
		return nil
	})
	if v, err := direct.Get(ctx, "refused-late").Result(); err != nil || v != "other" {
		t.Fatalf("the other owner's key on the slow master: %q, %v", v, err)
	}
}

// TestUndoSurvivesClose: an attempt failed (two refusals) while a slow
// master's grant was still on its way, and the Client is closed right after
// Obtain returned: the undo's Release, due when the grant is delivered to a
// closing lane, is still sent, and no key stays for its whole TTL.
func TestUndoSurvivesClose(t *testing.T) {
	ctx := context.Background()
	c, servers, p, direct := slowThird(t)
	p.DelayOpen(200*time.Millisecond, 0)
	take(t, servers, "closed-late", 0, 1)
	if _, err := c.Obtain(ctx, "closed-late", time.Minute); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Obtain: %v, want ErrTaken", err)
	}
	if err := c.Close(); err != nil { // the slow master's grant is still on its way
		t.Fatal(err)
	}
	delivered(t, p) // anything sent before Close returned has landed
	landed(t, direct, "closed-late")
	if v, err := direct.Get(ctx, "closed-late").Result(); err != redis.Nil {
		ttl := direct.PTTL(ctx, "closed-late").Val()
		t.Fatalf("after Close, the failed attempt's key is still on the slow master: %q (%v), expires in %v", v, err, ttl)
	}
}

// TestUndoLateRefusalOfOurOwnRetry: a Redis Cluster client with go-redis's
// default MaxRedirects (New documents MaxRetries -1 only) retries a
// command whose read timed out, on a fresh connection: the first SET NX
// ran, and the retry finds our own key and answers nil, which reads as
// ErrTaken. A late ErrTaken from a client that may resend still gets its
// Release, or the attempt's own key would stay for its whole TTL.
func TestUndoLateRefusalOfOurOwnRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Start(t, 2)
	rc := redistest.StartCluster(t, 1)
	p, err := redistest.NewProxy(rc.Servers[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cc := clusterClient(t, rc, func(o *redis.ClusterOptions) {
		o.ContextTimeoutEnabled = true
		o.ReadTimeout = 200 * time.Millisecond // shorter than the node timeout: go-redis retries within it
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, p.Addr())
		}
	})
	direct := clusterClient(t, rc)
	c := newClient(t, append(redistest.Clients(t, servers), redis.UniversalClient(cc)), redlock.WithNodeTimeout(time.Second))
	warm(t, c)
	redistest.Eventually(t, func() error {
		if n, _ := direct.Exists(ctx, "warm").Result(); n != 0 {
			return errors.New("warm still on the Cluster master")
		}
		return nil
	})
	take(t, servers, "retried", 0, 1)
	if err := cc.Get(ctx, "retried").Err(); err != redis.Nil { // go-redis has loaded COMMAND's table
		t.Fatal(err)
	}
	p.DelayOpen(0, 400*time.Millisecond) // the open connection's answers come late; a fresh one's do not
	if _, err := c.Obtain(ctx, "retried", time.Minute); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Obtain: %v, want ErrTaken", err)
	}
	redistest.Within(t, 1500*time.Millisecond, func() error { // the retry's answer, and the undo sent after it, have landed
		if v, err := direct.Get(ctx, "retried").Result(); err != redis.Nil {
			return fmt.Errorf("the failed attempt's own key is still on the Cluster master: %q (%v), expires in %v",
				v, err, direct.PTTL(ctx, "retried").Val().Round(time.Second))
		}
		return nil
	})
}

// TestUndoDrainReportsNoQuorum: the answers the undo drains after the
// caller decided do not enter the outcome, whose nodes become the
// QuorumError. A fenced attempt that reached its quorum (masters 0 and 1)
// and then lost it (the raise failed on master 1), while master 2's grant
// came in late, does not report that grant as "ok" (2 of 3 agreed, quorum
// 2): master 2 reads "no reply before the outcome was decided".
func TestUndoDrainReportsNoQuorum(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	slow, proxies := proxied(t, servers[2:], true)
	m0, m1 := clientOf(t, servers[0]), clientOf(t, servers[1])
	m1.AddHook(failRaise{})
	c := newClient(t, []redis.UniversalClient{m0, m1, slow[0]}, redlock.WithNodeTimeout(time.Second), redlock.WithFencing())
	warm(t, c)
	direct2 := clientOf(t, servers[2])
	redistest.Eventually(t, func() error { // the warm-up's acquire and Release reached master 2 before its delay
		if n := scriptsRun(t, direct2); n < 2 {
			return fmt.Errorf("master 2 ran %d scripts, want the warm-up's 2", n)
		}
		return nil
	})
	p := proxies[0]
	if err := m0.Set(ctx, "{k}:fence", 10, 0).Err(); err != nil {
		t.Fatal(err)
	}
	p.DelayOpen(100*time.Millisecond, 0)
	_, err := c.Obtain(ctx, "k", time.Minute)
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("Obtain: %v", err)
	}
	agreed := 0
	for _, n := range qe.Nodes {
		if n.Err == nil {
			agreed++
		}
	}
	if agreed >= qe.Quorum {
		t.Fatalf("a failed Obtain reports %d masters agreed, quorum %d: %v", agreed, qe.Quorum, err)
	}
}
