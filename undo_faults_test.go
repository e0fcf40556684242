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

// slowThird starts three masters, the third behind a proxy, warms the
// Client up (connections taken, scripts loaded on every master), and
// returns the Client, the servers, the proxy and a direct client of the
// third master.
func slowThird(t *testing.T, opts ...redlock.Option) (*redlock.Client, []*redistest.Server, *redistest.Proxy, *redis.Client) {
	t.Helper()
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	p, err := redistest.NewProxy(servers[2].Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	masters := redistest.Clients(t, servers[:2])
	slow := servers[2].Client(func(o *redis.Options) { o.Addr = p.Addr(); o.ContextTimeoutEnabled = true })
	t.Cleanup(func() { slow.Close() })
	masters = append(masters, slow)
	direct := servers[2].Client()
	t.Cleanup(func() { direct.Close() })
	c, err := redlock.New(masters, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l, err := c.Obtain(ctx, "warm", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error { // the slow master's Release may still be on its way
		if n, _ := direct.Exists(ctx, "warm").Result(); n != 0 {
			return errors.New("warm still on the slow master")
		}
		return nil
	})
	return c, servers, p, direct
}

// take sets key to another owner's token on the masters given.
func take(t *testing.T, servers []*redistest.Server, key string, masters ...int) {
	t.Helper()
	for _, i := range masters {
		rdb := servers[i].Client()
		err := rdb.Set(context.Background(), key, "other", time.Minute).Err()
		rdb.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestUndoSurvivesClose: an attempt that failed (two refusals) while
// a slow master's grant was still on its way, and a Close right after
// Obtain returned. The undo's Release is sent when the grant is delivered,
// by then the lane is closed: unless the closing lane keeps it for its
// last sending, the key stays for its whole TTL.
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
	time.Sleep(300 * time.Millisecond) // anything sent before Close returned has landed
	if v, err := direct.Get(ctx, "closed-late").Result(); err != redis.Nil {
		ttl := direct.PTTL(ctx, "closed-late").Val()
		t.Fatalf("after Close, the failed attempt's key is still on the slow master: %q (%v), expires in %v", v, err, ttl)
	}
}

// TestUndoLateRefusalOfOurOwnRetry: a Redis Cluster master with
// go-redis's default MaxRedirects (New documents MaxRetries -1 only)
// retries a command whose read timed out, on a fresh connection. The first
// SET NX ran; the retry finds our own key and answers nil, which the
// request reads as ErrTaken. A late ErrTaken from a client that may resend
// must still get its Release, or the attempt's own key stays on that
// master for its whole TTL.
func TestUndoLateRefusalOfOurOwnRetry(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 2)
	rc := redistest.StartCluster(t, 1)
	p, err := redistest.NewProxy(rc.Servers[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cc := rc.Client(func(o *redis.ClusterOptions) {
		o.ContextTimeoutEnabled = true
		o.ReadTimeout = 200 * time.Millisecond // shorter than the node timeout: go-redis retries within it
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, p.Addr())
		}
	})
	defer cc.Close()
	direct := rc.Client()
	defer direct.Close()
	masters := append(redistest.Clients(t, servers), redis.UniversalClient(cc))
	c, err := redlock.New(masters, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if l, err := c.Obtain(ctx, "warm", time.Minute); err != nil {
		t.Fatal(err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
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
	time.Sleep(1500 * time.Millisecond) // the retry's answer, and anything sent after it, have landed
	if v, err := direct.Get(ctx, "retried").Result(); err != redis.Nil {
		t.Fatalf("the failed attempt's own key is still on the Cluster master: %q (%v), expires in %v",
			v, err, direct.PTTL(ctx, "retried").Val().Round(time.Second))
	}
}

// failRaise fails, after a pause, the commands of a pipeline that carries a
// fence raise (an EVALSHA whose last argument is the fence, 11 here).
type failRaise struct{}

func (failRaise) DialHook(next redis.DialHook) redis.DialHook { return next }
func (failRaise) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if isRaise(c) {
			time.Sleep(300 * time.Millisecond)
			c.SetErr(errors.New("raise failed"))
			return c.Err()
		}
		return next(ctx, c)
	}
}
func isRaise(c redis.Cmder) bool {
	a := c.Args()
	return c.Name() == "evalsha" && len(a) == 7 && fmt.Sprint(a[6]) == "11"
}
func (failRaise) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if isRaise(c) {
				time.Sleep(300 * time.Millisecond)
				err := errors.New("raise failed")
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// TestUndoDrainReportsNoQuorum: Client.undo drains the answers that came
// after the caller decided; they must not enter the outcome, whose nodes
// become the QuorumError. A fenced attempt that reached its quorum
// (masters 0 and 1) and then lost it (the raise failed on master 1) while
// master 2's grant came in late must not report that grant as "ok" (2 of 3
// agreed, quorum 2): master 2 reads "no reply before the outcome was
// decided".
func TestUndoDrainReportsNoQuorum(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	p, err := redistest.NewProxy(servers[2].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m0 := servers[0].Client()
	m1 := servers[1].Client()
	m1.AddHook(failRaise{})
	slow := servers[2].Client(func(o *redis.Options) { o.Addr = p.Addr(); o.ContextTimeoutEnabled = true })
	for _, m := range []*redis.Client{m0, m1, slow} {
		defer m.Close()
	}
	c, err := redlock.New([]redis.UniversalClient{m0, m1, slow}, redlock.WithNodeTimeout(time.Second), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if l, err := c.Obtain(ctx, "warm", time.Minute); err != nil {
		t.Fatal(err)
	} else {
		l.Release(ctx)
	}
	time.Sleep(100 * time.Millisecond)
	if err := m0.Set(ctx, "{k}:fence", 10, 0).Err(); err != nil {
		t.Fatal(err)
	}
	p.DelayOpen(100*time.Millisecond, 0)
	_, err = c.Obtain(ctx, "k", time.Minute)
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
