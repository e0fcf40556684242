package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Timing faults found by an adversarial review of the library: each test
// failed on the code it was written against, and its comment tells the
// defect it pins, as it was before the fix.

// cutReplies delays the replies of every connection open now through p,
// and resets their client side after a moment, while what the client sent
// has already reached the server: the master ran the request, the client
// sees a reset and never gets the reply.
func cutReplies(t *testing.T, p *redistest.Proxy) {
	t.Helper()
	p.DelayOpen(0, 300*time.Millisecond)
	go func() {
		time.Sleep(50 * time.Millisecond)
		p.CutOpen()
	}()
}

// TestRetryAfterResetDoesNotMisreportObtain: the master runs the SET, then
// the connection is reset before its reply comes back. The transport takes
// the reset for "the master never read it" (transport.go closedConn) and
// sends the SET again on a fresh connection, where SET NX finds our own key:
// Obtain reports ErrTaken ("another owner holds the lock") although nobody
// else does, and leaves our key on the master for the whole TTL (a failed
// attempt does not undo a master that answered "taken"). The proxy's cut
// sometimes beats its reading of the SET (then the SET never ran and the
// retry is right): the test tries a few times.
func TestRetryAfterResetDoesNotMisreportObtain(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	viaProxy, proxies := proxied(t, servers, false)
	c := newClient(t, viaProxy, redlock.WithNodeTimeout(2*time.Second))
	for round := range 5 {
		key := fmt.Sprint("k", round)
		warm, err := c.Obtain(ctx, "warm", time.Minute) // the lane has its connection
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		cutReplies(t, proxies[0])
		l, err := c.Obtain(ctx, key, time.Minute)
		if err == nil {
			_ = l.Release(ctx)
			time.Sleep(300 * time.Millisecond) // the cut's delayed bytes are gone
			continue                           // the SET never ran: try again
		}
		if errors.Is(err, redlock.ErrTaken) {
			t.Errorf("Obtain with no other owner anywhere: %v, want success or ErrUnavailable", err)
		}
		// The failed attempt releases the key in the background.
		redistest.Eventually(t, func() error {
			if held := get(t, direct[0], key); held != "" {
				return fmt.Errorf("after the failed Obtain the master still holds our key %q (TTL %v)", held, direct[0].PTTL(ctx, key).Val())
			}
			return nil
		})
		return
	}
	t.Skip("the cut never came after the SET")
}

// TestRetryAfterResetDoesNotFakeALoss: the master runs the Release's
// delete, the connection is reset before the reply comes back, and the
// transport's retry finds the key gone: Release reports ErrLockLost ("work
// done under the lock may have overlapped") for a lock that was held to the
// end and released by this very call.
func TestRetryAfterResetDoesNotFakeALoss(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	viaProxy, proxies := proxied(t, servers, false)
	c := newClient(t, viaProxy, redlock.WithNodeTimeout(2*time.Second))
	for round := range 5 {
		key := fmt.Sprint("k", round)
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		cutReplies(t, proxies[0])
		err = l.Release(ctx)
		if err == nil {
			time.Sleep(300 * time.Millisecond)
			continue // the delete never ran before the retry: try again
		}
		if errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("Release of a lock held until this call: %v, want nil (or ErrUnavailable), not ErrLockLost", err)
		}
		if v := get(t, direct[0], key); v != "" {
			t.Fatalf("key still held: %q", v)
		}
		return
	}
	t.Skip("the cut never came after the delete")
}

// TestRetryAfterKillDoesNotMisreportObtain is the same defect without a
// proxy: an operator (or Redis's own client eviction) kills connections
// after the master ran the SET but before it wrote the reply; the client
// reads EOF and the transport sends the SET again. Whether the master reads
// the SET or the kill first is up to its event loop, so the test tries a
// few times.
func TestRetryAfterKillDoesNotMisreportObtain(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	clients := redistest.Clients(t, servers)
	admin := servers[0].Client()
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, clients, redlock.WithNodeTimeout(2*time.Second))
	for round := range 10 {
		key := fmt.Sprint("k", round)
		warm, err := c.Obtain(ctx, "warm", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// Freeze the master so that the SET and the kill are read in one
		// turn of its event loop, before the SET's reply is written.
		if err := servers[0].Stop(); err != nil {
			t.Fatal(err)
		}
		type result struct {
			l   *redlock.Lock
			err error
		}
		obtained := make(chan result, 1)
		go func() {
			l, err := c.Obtain(ctx, key, time.Minute)
			obtained <- result{l, err}
		}()
		time.Sleep(50 * time.Millisecond)
		killed := make(chan error, 1)
		go func() {
			killed <- admin.Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err()
		}()
		time.Sleep(50 * time.Millisecond)
		if err := servers[0].Cont(); err != nil {
			t.Fatal(err)
		}
		if err := <-killed; err != nil {
			t.Fatal(err)
		}
		r := <-obtained
		if r.err == nil {
			_ = r.l.Release(ctx)
			continue // the kill came first: the SET never ran
		}
		if errors.Is(r.err, redlock.ErrTaken) {
			t.Errorf("round %d: Obtain with no other owner anywhere: %v, want success or ErrUnavailable", round, r.err)
		}
		if v := get(t, clients[0], key); v != "" {
			t.Errorf("round %d: after the failed Obtain the master still holds our key %q", round, v)
		}
		return
	}
	t.Skip("the kill came first every time")
}

// TestWatchdogFollowsAShortenedValidity: KeepAlive's watchdog sleeps a
// whole renewal interval after each renewal (watchdog.go run), reading the
// validity only when it wakes. A manual Extend with a shorter TTL (or a
// failed Extend, which now shortens the validity) moves the validity's end
// before that wake-up: the work context stays live after the lock lapsed,
// while another owner holds it.
func TestWatchdogFollowsAShortenedValidity(t *testing.T) {
	ctx := context.Background()
	_, clients, a := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newClient(t, clients, redlock.WithNodeTimeout(100*time.Millisecond))
	l, err := a.Obtain(ctx, "job", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop, err := l.KeepAlive(ctx) // renews every second
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := l.Extend(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	validUntil := time.Now().Add(l.Validity())
	bctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	bl, err := b.Obtain(bctx, "job", time.Minute, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
	if err == nil {
		defer bl.Release(ctx)
		if wctx.Err() == nil {
			t.Fatalf("B holds the lock (A's validity ended %v ago, A's Validity() = %v) while A's work context is still live",
				time.Since(validUntil).Round(time.Millisecond), l.Validity())
		}
		return
	}
	// B never got it: the watchdog renewed A's lock before the shorter
	// validity ended, as it should.
	if !errors.Is(err, redlock.ErrTaken) || wctx.Err() != nil || l.Validity() < time.Second {
		t.Fatalf("B: %v; A's work context %v, validity %v: want A renewed in time", err, wctx.Err(), l.Validity())
	}
}

// pipeRecorder panics on the pipelines it sees while armed, remembering
// their commands, and records the commands of every pipeline otherwise.
type pipeRecorder struct {
	mu       sync.Mutex
	armed    bool
	panicked []redis.Cmder   // the commands of the pipeline it panicked on
	sent     [][]redis.Cmder // the pipelines that went on
}

func (p *pipeRecorder) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (p *pipeRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *pipeRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.mu.Lock()
		if p.armed {
			p.armed = false
			p.panicked = slices.Clone(cmds)
			p.mu.Unlock()
			panic("hook panics")
		}
		p.sent = append(p.sent, slices.Clone(cmds))
		p.mu.Unlock()
		return next(ctx, cmds)
	}
}

// TestPanickedBatchIsNotResent: a hook that panics in a pipeline leaves the
// panicked batch's commands in the transport's scratch list (transport.go
// send: t.cmds is cleared only after Exec returns), and the next batch on
// that lane sends them again, before its own. Those commands alias the
// arguments of pooled requests that have since been delivered and reused:
// the master runs whatever they now hold (a second copy of the new
// request, or garbage). Seen here: the next Release runs twice, and the
// second run's "absent" answer is what the caller reads.
func TestPanickedBatchIsNotResent(t *testing.T) {
	for _, inline := range []bool{true, false} {
		t.Run(fmt.Sprint("inline=", inline), func(t *testing.T) {
			ctx := context.Background()
			servers := redistest.Start(t, 1)
			rdb := servers[0].Client(func(o *redis.Options) {
				o.ContextTimeoutEnabled = inline
				o.PoolSize = 4 // one lane
			})
			defer rdb.Close()
			hook := &pipeRecorder{}
			rdb.AddHook(hook)
			c := newClient(t, []redis.UniversalClient{rdb})
			a, err := c.Obtain(ctx, "a", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			b, err := c.Obtain(ctx, "b", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			hook.mu.Lock()
			hook.armed = true
			hook.mu.Unlock()
			// The scripts are not loaded yet: the Release goes out as a
			// pipeline (SCRIPT LOAD..., EVALSHA), and the hook panics.
			if err := a.Release(ctx); err == nil {
				t.Fatal("Release through a panicking hook succeeded")
			}
			errB := b.Release(ctx)
			hook.mu.Lock()
			defer hook.mu.Unlock()
			panicked := map[redis.Cmder]bool{}
			for _, c := range hook.panicked {
				panicked[c] = true
			}
			for _, pipe := range hook.sent {
				var again []string
				for _, c := range pipe {
					if panicked[c] {
						again = append(again, describe(c))
					}
				}
				if len(again) > 0 {
					t.Errorf("a later pipeline of %d commands re-sends %d commands of the batch that panicked: %v", len(pipe), len(again), again)
				}
			}
			if errB != nil {
				t.Errorf("Release of a held lock after the panic: %v, want nil", errB)
			}
		})
	}
}

// describe names a command briefly: its name and arguments, scripts elided.
func describe(c redis.Cmder) string {
	var b strings.Builder
	for i, a := range c.Args() {
		if i > 0 {
			b.WriteByte(' ')
		}
		s := fmt.Sprint(a)
		if len(s) > 12 {
			s = s[:12] + "..."
		}
		b.WriteString(s)
	}
	return b.String()
}

// TestCloseReturnsWhileAMasterIsFrozen: Close waits for every lane's batch
// in flight, whose read is bounded by the go-redis client's ReadTimeout
// unless ContextTimeoutEnabled is set. New refuses a client with no read
// timeout (with it, Close would block while a master stays frozen), and
// with one Close returns while a master is frozen.
func TestCloseReturnsWhileAMasterIsFrozen(t *testing.T) {
	servers := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, len(servers))
	for _, rt := range []time.Duration{-1, -2} {
		rdb := servers[0].Client(func(o *redis.Options) { o.ReadTimeout = rt })
		defer rdb.Close()
		if _, err := redlock.New([]redis.UniversalClient{rdb}); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Fatalf("New with ReadTimeout %d: %v, want ErrInvalidArgument", rt, err)
		}
	}
	for i, s := range servers {
		rdb := s.Client(func(o *redis.Options) { o.ReadTimeout = 2 * time.Second })
		defer rdb.Close()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		clients[i] = rdb
	}
	c, err := redlock.New(clients, redlock.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	takeDown(t, "frozen", servers[0])
	l, err := c.Obtain(context.Background(), "k", time.Minute)
	if err != nil {
		t.Fatalf("Obtain with one of three masters frozen: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		servers[0].Cont() // let Close finish, so the test can end
		<-closed
		t.Fatal("Close did not return within 5s while one master of three was frozen")
	}
}

// TestSecondCloseWaitsToo: a Close called while another is still running
// returns nil at once (redlock.go Close: the closed flag is swapped first),
// while the client's Do calls and goroutines still run: "returns when every
// goroutine of the client has ended" holds only for the first caller. Two
// owners of a Client (a defer and a shutdown hook) race like this.
func TestSecondCloseWaitsToo(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	var running atomic.Bool
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Do(ctx, "k", time.Minute, func(ctx context.Context) error {
			running.Store(true)
			defer running.Store(false)
			close(started)
			<-ctx.Done()
			time.Sleep(300 * time.Millisecond) // winds down
			return nil
		})
	}()
	<-started
	go c.Close()
	time.Sleep(50 * time.Millisecond)
	c.Close()
	stillRunning := running.Load()
	<-done
	if stillRunning {
		t.Fatal("the second Close returned while a Do of the client was still running")
	}
}

// TestObtainWrapsTheContextsOwnCause: a context made with
// context.WithTimeoutCause ends with its own cause, and a failed Obtain
// "also matches the context's cause" (ErrNotObtained's doc). When Obtain
// stops because the next attempt could not start before the deadline
// (redlock.go obtain) or because its deadline has passed before the
// context's timer fired (ended, collect), it wraps a bare
// context.DeadlineExceeded instead.
func TestObtainWrapsTheContextsOwnCause(t *testing.T) {
	_, _, c := cluster(t, 1)
	errShutdown := errors.New("shutting down")
	if _, err := c.Obtain(context.Background(), "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), 100*time.Millisecond, errShutdown)
	defer cancel()
	_, err := c.Obtain(ctx, "k", time.Second, redlock.WithRetry(redlock.LinearBackoff(400*time.Millisecond)))
	if !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Obtain of a held lock: %v", err)
	}
	if !errors.Is(err, errShutdown) {
		t.Errorf("Obtain that stopped for its context's deadline: %v; want it to match the context's cause %q", err, errShutdown)
	}
}

// TestKeepAliveStartedLateRenewsInTime: a lock kept past part of its TTL
// before KeepAlive starts (set-up work, then "keep it while I finish") has
// less validity left than the renewal interval. The watchdog's first
// renewal waits the full interval regardless (watchdog.go run: the first
// timer is w.next(w.every)), so the lock lapses on healthy masters and the
// work context stays live until the interval ends, while another owner
// already holds the lock.
func TestKeepAliveStartedLateRenewsInTime(t *testing.T) {
	ctx := context.Background()
	_, clients, a := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newClient(t, clients, redlock.WithNodeTimeout(100*time.Millisecond))
	l, err := a.Obtain(ctx, "job", 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // set-up work; about 385ms of validity left
	left := l.Validity()
	wctx, stop, err := l.KeepAlive(ctx) // renews every 500ms
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	bctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	bl, err := b.Obtain(bctx, "job", time.Minute, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
	if err != nil {
		return // the watchdog kept the lock: fine
	}
	defer bl.Release(ctx)
	if wctx.Err() == nil {
		t.Fatalf("KeepAlive started with %v of validity left: B obtained the lock while A's work context is still live (A's Validity() = %v)", left.Round(time.Millisecond), l.Validity())
	}
	t.Errorf("KeepAlive started with %v of validity left on healthy masters: lock lost (%v) before its first renewal", left.Round(time.Millisecond), context.Cause(wctx))
}

// TestStallLeavesNoKeyOfAFailedObtain: a single master stalls for a second
// (a slow command, a fork, a paused VM). An Obtain during the stall times
// out; its SET is already in the master's socket buffer and runs when the
// stall ends. The undo (redlock.go undo) is bounded by the node timeout:
// on a new connection it cannot even learn its client ID before the stall
// ends, so it fails, and the failed attempt's key sits on the master for the
// whole TTL: nobody, the caller included, can take the lock until then.
// (ContextTimeoutEnabled as the README advises; without it the read waits
// for ReadTimeout and the undo then runs behind the SET.)
func TestStallLeavesNoKeyOfAFailedObtain(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
		o.PoolSize = 4 // one lane: the warm-up gives it its connection
	})
	defer rdb.Close()
	direct := redistest.Clients(t, servers)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(100*time.Millisecond))
	if l, err := c.Obtain(ctx, "warm", time.Minute); err != nil {
		t.Fatal(err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := c.Obtain(ctx, "k", time.Minute)
	if !errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("Obtain on a stalled master: %v, want ErrUnavailable", err)
	}
	time.Sleep(time.Second)
	if err := servers[0].Cont(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // whatever clean-up there is has run
	if v := get(t, direct[0], "k"); v != "" {
		ttl := direct[0].PTTL(ctx, "k").Val()
		_, err := c.Obtain(ctx, "k", time.Minute)
		t.Fatalf("a second after the stall ended, the failed attempt's key %q is still there for %v; Obtain now: %v", v, ttl.Round(time.Second), err)
	}
}

// TestIdleClientGivesItsConnectionsBack: the README says the Client holds
// a connection of each master's pool "while requests flow" and "gives them
// back after 5ms without requests". The transport (transport.go connTurn)
// gives a connection back only in steady use, every 2s; an idle lane keeps
// its connection from the user's pool for ever.
func TestIdleClientGivesItsConnectionsBack(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) { o.PoolSize = 16 }) // four lanes
	defer rdb.Close()
	c := newClient(t, []redis.UniversalClient{rdb})
	for i := range 20 {
		l, err := c.Obtain(ctx, fmt.Sprint("k", i), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // idle for longer than connIdle (1s)
	if s := rdb.PoolStats(); s.IdleConns < s.TotalConns {
		t.Fatalf("idle for 1.5s, the lock client still holds %d of the %d connections of the user's pool", s.TotalConns-s.IdleConns, s.TotalConns)
	}
}

// TestReleasedLockLeavesNoKeyAfterAStall: the same late SET after a
// successful Release. Master 2 of 3 stalls; Obtain takes masters 0 and 1,
// Release deletes there and returns nil. Master 2's SET, already in its
// socket buffer, runs when the stall ends; the Release to master 2 gave up
// before then. A released lock's key sits on master 2 for the whole TTL
// ("no key left on any master after a successful Release once the faults
// stop" is the chaos checker's own rule).
func TestReleasedLockLeavesNoKeyAfterAStall(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, 3)
	for i, s := range servers {
		rdb := s.Client(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		clients[i] = rdb
	}
	direct := redistest.Clients(t, servers)
	c := newClient(t, clients, redlock.WithNodeTimeout(100*time.Millisecond))
	if l, err := c.Obtain(ctx, "warm", time.Minute); err != nil {
		t.Fatal(err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := servers[2].Stop(); err != nil {
		t.Fatal(err)
	}
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with two of three masters up: %v", err)
	}
	time.Sleep(time.Second)
	if err := servers[2].Cont(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if vs := holdersOf(t, direct, "k"); count(vs, l.Token()) > 0 {
		t.Fatalf("after a Release that returned nil and the stall's end, the masters hold %q (TTL on master 2: %v)", vs, direct[2].PTTL(ctx, "k").Val().Round(time.Second))
	}
}

// TestShorterStragglerCannotShortenAHeldLock: on masters where the CLIENT
// KILL barrier cannot run (an ACL that denies CLIENT KILL; Cluster masters,
// which use pooled connections), transport.go says order across
// connections is kept by the re-take deadline of extendScript. That guard
// covers only the re-take of an absent key; the PEXPIRE branch has none. A
// straggling Extend with a shorter TTL lands after a later, successful
// Extend and cuts the key on that master below the validity the later
// Extend reported. With a stranger's key on the third master, B obtains
// while A's Validity() still says seconds: two holders.
func TestShorterStragglerCannotShortenAHeldLock(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	clients := make([]redis.UniversalClient, 3)
	proxies := make([]*redistest.Proxy, 3)
	for i, s := range servers {
		// A user that may do everything but kill clients.
		if err := direct[i].Do(ctx, "acl", "setuser", "locker", "on", ">pw", "~*", "&*", "+@all", "-client|kill").Err(); err != nil {
			t.Fatal(err)
		}
		p, err := redistest.NewProxy(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		rdb := s.Client(func(o *redis.Options) {
			o.Addr = p.Addr()
			o.Username, o.Password = "locker", "pw"
			o.ContextTimeoutEnabled = true // the README's advice
		})
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		clients[i], proxies[i] = rdb, p
	}
	a := newClient(t, clients, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newClient(t, direct, redlock.WithNodeTimeout(100*time.Millisecond))
	// A stranger holds master 2 for a while: A's quorum is masters 0 and 1.
	if err := direct[2].Set(ctx, "k", "stranger", 900*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := a.Obtain(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Master 1's connection turns slow one way: A's Extend to 200ms
	// reaches it 300ms late, after its caller gave up.
	proxies[1].DelayOpen(300*time.Millisecond, 0)
	if err := l.Extend(ctx, 200*time.Millisecond); err == nil {
		t.Fatal("Extend with master 1 slow succeeded")
	}
	// A extends again, to 10s. Without the barrier, master 1's lane waits
	// until the straggler is stale: the Extend may fail while it does; A
	// keeps trying within its (now short) validity.
	for l.Validity() > 0 {
		if err := l.Extend(ctx, 10*time.Second); err == nil || errors.Is(err, redlock.ErrLockLost) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	bctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	bl, err := b.Obtain(bctx, "k", 10*time.Second, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
	if err != nil {
		return // A's lock held: fine
	}
	defer bl.Release(ctx)
	if v := l.Validity(); v > 0 {
		t.Fatalf("B obtained the lock while A's Validity() is %v: master 1 holds %q, its key was cut by A's straggling Extend(200ms)", v, get(t, direct[1], "k"))
	}
}

// TestShorterStragglerOnAClusterMaster: the same cut on a Redis Cluster
// master, which the transport sends through go-redis's pooled connections
// with no barrier at all. One master (NewSingle over a one-node cluster):
// A's Extend(200ms) times out on a slow connection, A's Extend(10s) then
// succeeds on a fresh one, and the straggler lands after it: the key
// expires at about 500ms while A's Validity() says ten seconds; B takes the
// lock.
func TestShorterStragglerOnAClusterMaster(t *testing.T) {
	ctx := context.Background()
	rc := redistest.StartCluster(t, 1)
	p, err := redistest.NewProxy(rc.Servers[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cc := rc.Client(func(o *redis.ClusterOptions) {
		o.ContextTimeoutEnabled = true
		o.MaxRedirects = -1 // no go-redis retries: see TestClusterRetriesOutlastTheNodeTimeout
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, p.Addr()) // every node connection through the proxy
		}
	})
	defer cc.Close()
	if err := cc.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	direct := rc.Client()
	defer direct.Close()
	a, err := redlock.NewSingle(cc, redlock.WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redlock.NewSingle(direct, redlock.WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := a.Obtain(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil { // scripts loaded
		t.Fatal(err)
	}
	p.DelayOpen(300*time.Millisecond, 0)
	if err := l.Extend(ctx, 200*time.Millisecond); err == nil {
		t.Fatal("Extend through a slow connection succeeded")
	}
	// Without a barrier across a Cluster's pooled connections, the lane
	// waits until the straggler is stale: the next Extend may fail while it
	// does; A keeps trying within its (now short) validity.
	for l.Validity() > 0 {
		if err := l.Extend(ctx, 10*time.Second); err == nil || errors.Is(err, redlock.ErrLockLost) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	bl, err := b.Obtain(bctx, "k", 10*time.Second, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
	if err != nil {
		return // A's lock held: fine
	}
	defer bl.Release(ctx)
	if v := l.Validity(); v > 0 {
		t.Fatalf("B obtained the lock while A's Validity() is %v: A's straggling Extend(200ms) cut the key", v)
	}
}

// TestClusterRetriesOutlastTheNodeTimeout: "every request to every master
// is bounded by" the node timeout (README). On a Cluster master with the
// README's settings (ContextTimeoutEnabled; the README names MaxRetries,
// not MaxRedirects), go-redis retries a timed-out command up to
// MaxRedirects times (default 3) with a backoff it sleeps until
// ctx.Done(); the transport's deadlineCtx (transport.go) has no Done
// channel, so every backoff runs in full. An Obtain without a context
// deadline runs inline on its caller's goroutine and returns about twice
// its node timeout late. (With MaxRedirects: -1 it returns on time.)
func TestClusterRetriesOutlastTheNodeTimeout(t *testing.T) {
	ctx := context.Background()
	rc := redistest.StartCluster(t, 1)
	cc := rc.Client(func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
	defer cc.Close()
	if err := cc.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := redlock.NewSingle(cc, redlock.WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if l, err := c.Obtain(ctx, "warm", time.Minute); err != nil {
		t.Fatal(err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	takeDown(t, "frozen", rc.Servers[0])
	start := time.Now()
	_, err = c.Obtain(ctx, "k", time.Minute)
	took := time.Since(start)
	if err == nil {
		t.Fatal("obtained on a frozen master")
	}
	if took > 160*time.Millisecond {
		t.Fatalf("Obtain with a 100ms node timeout on a frozen Cluster master returned after %v: %v", took, err)
	}
}

// TestDoReturnsWithItsContext: the caller's context ends while fn runs
// and most masters have stopped answering. fn returns at once, but Do then
// releases in the foreground with context.WithoutCancel (watchdog.go Do),
// bounded only by the node timeout: Do returns a node timeout after its
// context ended. The library's rule is that nothing outlasts the caller's
// context by more than scheduling slack, and clean-up that must go on does
// so in the background.
func TestDoReturnsWithItsContext(t *testing.T) {
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ended time.Time
	err := c.Do(ctx, "k", 10*time.Second, func(wctx context.Context) error {
		takeDown(t, "frozen", servers[0], servers[1])
		cancel()
		ended = time.Now()
		<-wctx.Done()
		return wctx.Err()
	})
	if late := time.Since(ended); late > 200*time.Millisecond {
		t.Fatalf("Do returned %v after its context was cancelled: %v", late.Round(time.Millisecond), err)
	}
}

// TestReleaseBeforeStopIsNoLoss: KeepAlive's user releases the lock, then
// stops the watchdog. The watchdog is built to say errReleased then, not
// ErrLockLost. But releaseLocked zeroes the validity when it starts
// (lock.go), and a watchdog that wakes while the Release is in flight sees
// released=false and Validity()=0 (watchdog.go run, before its TryLock): it
// cancels the work with ErrLockLost, "the validity ran out before a
// renewal completed (was the process paused?)", for a lock that was held
// to the end and released by its owner.
func TestReleaseBeforeStopIsNoLossMidRelease(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	viaProxy, proxies := proxied(t, servers, true)
	c := newClient(t, viaProxy, redlock.WithNodeTimeout(time.Second))
	l, err := c.Obtain(ctx, "k", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(30*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a renewal or two
	for _, p := range proxies {
		p.DelayOpen(150*time.Millisecond, 0) // the masters answer slowly, well within the node timeout
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	stop()
	if cause := context.Cause(wctx); errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("work context of a lock its owner released: cause %v", cause)
	}
}

// TestDefaultRenewalFitsTheValidity: an explicit WithRenewEvery is checked
// against the validity (options.go checkWatchdog), the default ttl/3 is
// not. With a drift factor the docs allow ([0, 1)) above 2/3, the validity
// is shorter than ttl/3: the first renewal comes after the lock lapsed, and
// Do on healthy masters always loses its lock.
func TestDefaultRenewalFitsTheValidity(t *testing.T) {
	_, _, c := cluster(t, 3, redlock.WithDriftFactor(0.7), redlock.WithNodeTimeout(50*time.Millisecond))
	err := c.Do(context.Background(), "k", time.Second, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(600 * time.Millisecond):
			return nil
		}
	})
	if err != nil {
		t.Fatalf("Do with the default renewal on healthy masters: %v (want nil, or ErrInvalidArgument before it starts)", err)
	}
}

// TestCancelledCallWrapsItsCause: a request the lane drops because its
// caller's context ended (request.go dropped) is delivered as errSkipped,
// which wraps neither context.Canceled nor the context's cause. When those
// replies reach collect (round.go) before it sees ctx.Done, they decide
// the round ("unavailable") and the error says only "the caller gave up
// before it was sent": an exit caused by the context that does not wrap
// its cause. A few in a hundred calls.
func TestCancelledCallWrapsItsCause(t *testing.T) {
	_, _, c := cluster(t, 3)
	l, err := c.Obtain(context.Background(), "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	errMine := errors.New("shutting down")
	bad := 0
	var last error
	for range 300 {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errMine)
		if err := l.Extend(ctx, time.Minute); !errors.Is(err, errMine) {
			bad, last = bad+1, err
		}
	}
	for i := range 300 { // a Release with a cancelled context goes out in the background
		l, err := c.Obtain(context.Background(), fmt.Sprint("r", i), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errMine)
		if err := l.Release(ctx); !errors.Is(err, errMine) {
			bad, last = bad+1, err
		}
	}
	if bad > 0 {
		t.Fatalf("%d of 600 calls with a cancelled context did not match its cause; the last: %v", bad, last)
	}
}

// TestIdleLaneLeavesTheUsersPoolUsable: the same held connection, seen
// from the application sharing the client: with a small pool, its own
// commands time out waiting for the connection an idle lock client keeps.
func TestIdleLaneLeavesTheUsersPoolUsable(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, 3)
	for i, s := range servers {
		rdb := s.Client(func(o *redis.Options) {
			o.PoolSize = 1
			o.PoolTimeout = 200 * time.Millisecond
		})
		defer rdb.Close()
		clients[i] = rdb
	}
	c := newClient(t, clients)
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the lock client is idle
	if err := clients[0].Set(ctx, "data", "v", 0).Err(); err != nil {
		t.Fatalf("the application's own command on its client, 100ms after the last lock request: %v", err)
	}
}

// TestPanickedBatchSharesNoCommandAcrossMasters: the stale commands a
// panicked pipeline leaves in one lane's t.cmds are the pooled requests'
// own *redis.Cmd objects, and the pool hands those requests to other
// masters' lanes. The stale lane sends a command that another master's lane
// sends at the same time: two go-redis pipelines write replies into one
// Cmd (the race detector fails this test), and a reply of one master can be
// read as another's, a "granted" counted for a master that refused.
func TestPanickedBatchSharesNoCommandAcrossMasters(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, 3)
	hooks := make([]*pipeRecorder, 3)
	for i, s := range servers {
		rdb := s.Client()
		defer rdb.Close()
		hooks[i] = &pipeRecorder{}
		rdb.AddHook(hooks[i])
		clients[i] = rdb
	}
	c := newClient(t, clients)
	for round := range 20 {
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 50 {
					if g == 0 && i == 10 {
						h := hooks[round%3]
						h.mu.Lock()
						h.armed = true
						h.mu.Unlock()
					}
					l, err := c.Obtain(ctx, fmt.Sprint(g, "-", i), time.Minute)
					if err == nil {
						_ = l.Extend(ctx, time.Minute)
						_ = l.Release(ctx)
					}
				}
			})
		}
		wg.Wait()
	}
}

// TestDuplicateMastersRejectedWhateverTheSpelling: New rejects two clients
// of one server only when their Addr strings are equal (redlock.go
// serverOf). "localhost:port" and "127.0.0.1:port" name one server, and New
// takes them as two independent masters: one restart of that server then
// loses two votes of three.
func TestDuplicateMastersRejectedWhateverTheSpelling(t *testing.T) {
	servers := redistest.Start(t, 2)
	a := servers[0].Client()
	b := servers[0].Client(func(o *redis.Options) { o.Addr = fmt.Sprintf("localhost:%d", servers[0].Port()) })
	other := servers[1].Client()
	for _, c := range []*redis.Client{a, b, other} {
		defer c.Close()
	}
	c, err := redlock.New([]redis.UniversalClient{a, b, other})
	if err == nil {
		c.Close()
		t.Fatalf("New took %s and %s, one server, as two masters", a.Options().Addr, b.Options().Addr)
	}
	if !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatal(err)
	}
}
