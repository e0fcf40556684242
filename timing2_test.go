package redlock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Second adversarial review: each test here fails on the code it was
// written against (2d3c695), and names the defect it shows.

// TestKeptReleaseSurvivesARestart: a Release that cannot reach a master is
// kept and sent again "once the master answers again" (transport.go), so
// that a released lock leaves no key behind. It is sent as EVALSHA, in the
// pipeline before the SCRIPT LOADs (transport.go send appends the loads
// after the kept Releases, and only when the node believes its scripts are
// not loaded). A master that was down and comes back has an empty script
// cache, and the node still believes it loaded: the kept Release gets
// NOSCRIPT, an answer, and settle drops it. (When the node knows its
// scripts are not loaded, the loads go out after the kept Releases in the
// same pipeline: NOSCRIPT all the same.) With AOF (the README's advice
// for masters), the released lock's key is back on that master for its
// whole TTL.
func TestKeptReleaseSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3, redistest.Options{Persist: true})
	clients := redistest.Clients(t, servers)
	direct := redistest.Clients(t, servers)
	c := newClient(t, clients, redlock.WithNodeTimeout(200*time.Millisecond))
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil { // every master has our scripts
		t.Fatal(err)
	}
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with two of three masters up: %v", err)
	}
	if err := servers[2].Restart(true); err != nil { // AOF: the key is back
		t.Fatal(err)
	}
	// The kept Release goes out at the lane's next tick (20ms) once the
	// master answers again.
	time.Sleep(time.Second)
	if v := get(t, direct[2], "k"); v == l.Token() {
		info, _ := direct[2].Info(ctx, "commandstats", "errorstats").Result()
		t.Logf("master 2 after the restart:\n%s", info)
		t.Fatalf("a second after master 2 came back, it still holds the released lock's key for %v: the kept Release was dropped (NOSCRIPT)",
			direct[2].PTTL(ctx, "k").Val().Round(time.Second))
	}
}

// clockShim builds the chaos suite's clock shim (chaos/shim/clockshim.c)
// and returns the environment that runs a redis-server with its wall clock
// offset by offset (CLOCK_REALTIME only: what TIME and key expiry read).
// It skips without a C compiler.
func clockShim(t *testing.T, offset time.Duration) []string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc for the clock shim: %v", err)
	}
	dir := t.TempDir()
	so := filepath.Join(dir, "clockshim.so")
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", so, filepath.Join("chaos", "shim", "clockshim.c")).CombinedOutput(); err != nil {
		t.Fatalf("building the clock shim: %v: %s", err, out)
	}
	// The control file: seq (even: stable), offset ns, rate ppm, anchor ns.
	ctl := make([]byte, 4096)
	binary.LittleEndian.PutUint64(ctl[0:], 2)
	binary.LittleEndian.PutUint64(ctl[8:], uint64(int64(offset)))
	binary.LittleEndian.PutUint64(ctl[16:], 1_000_000)
	path := filepath.Join(dir, "clock")
	if err := os.WriteFile(path, ctl, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"LD_PRELOAD=" + so, "CLOCKSHIM_FILE=" + path}
}

// masterOffset is how far s's TIME is ahead of the local wall clock.
func masterOffset(t *testing.T, rdb redis.UniversalClient) time.Duration {
	t.Helper()
	before := time.Now()
	tm, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.Sub(before.Add(time.Since(before) / 2))
}

// noKillUser creates, on each master, a user that may do everything but
// CLIENT KILL (a common hardening; managed services often deny it too), and
// returns clients that log in as it through a proxy each, as the README
// advises (ContextTimeoutEnabled).
func noKillUser(t *testing.T, servers []*redistest.Server) ([]redis.UniversalClient, []*redistest.Proxy) {
	t.Helper()
	ctx := context.Background()
	direct := redistest.Clients(t, servers)
	clients := make([]redis.UniversalClient, len(servers))
	proxies := make([]*redistest.Proxy, len(servers))
	for i, s := range servers {
		if err := direct[i].Do(ctx, "acl", "setuser", "locker", "on", ">pw", "~*", "&*", "+@all", "-client|kill").Err(); err != nil {
			t.Fatal(err)
		}
		p, err := redistest.NewProxy(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		rdb := s.Client(func(o *redis.Options) {
			o.Addr = p.Addr()
			o.Username, o.Password = "locker", "pw"
			o.ContextTimeoutEnabled = true
		})
		t.Cleanup(func() { rdb.Close() })
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		clients[i], proxies[i] = rdb, p
	}
	return clients, proxies
}

// TestStragglerWithAClockWithinANodeTimeout: without the CLIENT KILL
// barrier (an ACL that denies it; every Cluster master), transport.go and
// extendScript say order "rests on the client's and the masters' clocks
// agreeing within a node timeout". It rests on much less: the lane holds
// back the next batch until the straggler's late deadline by the client's
// clock, and the master refuses the straggler only once that deadline has
// passed by its own. A master whose clock is behind the client's by less
// than a node timeout runs a straggling shorter Extend after the later,
// successful one: the key expires on that master while A's Validity() says
// seconds, and B takes the lock. Two holders. (In step, the same run is
// safe: the subtest "in step" passes.)
func TestStragglerWithAClockWithinANodeTimeout(t *testing.T) {
	const timeout = 400 * time.Millisecond
	for _, tc := range []struct {
		name string
		lag  time.Duration
	}{{"in step", 0}, {"master 1 380ms behind", 380 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			two := redistest.Start(t, 2)
			lagging := redistest.Start(t, 1, redistest.Options{Env: clockShim(t, -tc.lag)})
			servers := []*redistest.Server{two[0], lagging[0], two[1]}
			direct := redistest.Clients(t, servers)
			if off := masterOffset(t, direct[1]); off > -tc.lag+30*time.Millisecond || off < -tc.lag-30*time.Millisecond {
				t.Fatalf("master 1's clock is %v off, want %v", off, -tc.lag)
			}
			clients, proxies := noKillUser(t, servers)
			a := newClient(t, clients, redlock.WithNodeTimeout(timeout))
			b := newClient(t, direct, redlock.WithNodeTimeout(timeout))
			// A stranger holds master 2 for a while: A's quorum is masters 0 and 1.
			if err := direct[2].Set(ctx, "k", "stranger", 4*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			l, err := a.Obtain(ctx, "k", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Extend(ctx, 10*time.Second); err != nil { // scripts loaded
				t.Fatal(err)
			}
			// A's Extend(2s) reaches master 1 a second late: past its late
			// deadline (start + 2 node timeouts) by the client's clock, not
			// by master 1's. The lane holds its next batch until then, so
			// A's next Extend reaches master 1 first.
			proxies[1].DelayOpen(time.Second, 0)
			if err := l.Extend(ctx, 2*time.Second); err == nil {
				t.Fatal("Extend with master 1 slow succeeded")
			}
			// A retries a little later (its validity is now about 2s); by
			// then the lane no longer holds its batches back.
			time.Sleep(timeout + timeout/8)
			for l.Validity() > 0 {
				if err := l.Extend(ctx, 10*time.Second); err == nil || errors.Is(err, redlock.ErrLockLost) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			bctx, cancel := context.WithTimeout(ctx, 6*time.Second)
			defer cancel()
			bl, err := b.Obtain(bctx, "k", 10*time.Second, redlock.WithRetry(redlock.LinearBackoff(20*time.Millisecond)))
			if err != nil {
				t.Logf("B: %v", err)
				return // A's lock held: fine
			}
			defer bl.Release(ctx)
			if v := l.Validity(); v > 0 {
				t.Fatalf("B obtained the lock while A's Validity() is %v: A's straggling Extend(2s) ran on master 1 (clock %v behind, node timeout %v) after A's Extend(10s)",
					v.Round(time.Millisecond), tc.lag, timeout)
			}
		})
	}
}

// TestExtendOnAMasterWhoseClockIsAhead: the late deadline of an Extend
// without the barrier is start + 2 node timeouts by the client's wall
// clock, checked against the master's (extendScript). A healthy master
// whose clock is ahead by more than that refuses every Extend (-2, "reached
// the master after its deadline"), so every lock on it is lost at its first
// renewal. Redlock itself needs no agreement of absolute clocks (only of
// their rates: the drift factor), and the README's defaults and guarantees
// say nothing of one; before 2d3c695 the same setup renewed fine. Here the
// master is 1s ahead, the client denied CLIENT KILL (on a Cluster master
// the same holds with any user).
func TestExtendOnAMasterWhoseClockIsAhead(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1, redistest.Options{Env: clockShim(t, time.Second)})
	clients, _ := noKillUser(t, servers)
	c, err := redlock.NewSingle(clients[0], redlock.WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Do(ctx, "k", time.Second, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(1500 * time.Millisecond):
			return nil
		}
	})
	if err != nil {
		t.Fatalf("Do for 1.5s under a 1s TTL on a healthy master whose clock is 1s ahead: %v", err)
	}
}

// TestFailedObtainAfterAPauseLeavesNoKey: the barrier that keeps a
// straggling SET from landing after the undo of a failed Obtain needs the
// connection's client ID, which a lane learns from CLIENT INFO in the first
// batch on a connection. A lane gives its connection back after 20ms
// without requests (connIdle) and takes one again for the next batch, so
// the first request after any pause goes out with its ID unknown; when
// that batch times out, drop has no victim to kill, and holds back only
// batches with an Extend (staleAt). The undo's Release goes out at once on
// a fresh connection and overtakes the SET: the failed attempt's key stays
// on the master for its whole TTL, and the caller's own next Obtain says
// ErrTaken ("another owner holds it") for a minute. The same run without
// the pause passes (subtest "pause 0s").
func TestFailedObtainAfterAPauseLeavesNoKey(t *testing.T) {
	for _, pause := range []time.Duration{0, 100 * time.Millisecond} {
		t.Run(fmt.Sprint("pause ", pause), func(t *testing.T) {
			ctx := context.Background()
			servers := redistest.Start(t, 1)
			viaProxy, proxies := proxied(t, servers, true)
			direct := redistest.Clients(t, servers)
			c, err := redlock.NewSingle(viaProxy[0], redlock.WithNodeTimeout(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if l, err := c.Obtain(ctx, "k", time.Minute); err != nil {
				t.Fatal(err)
			} else if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(pause) // after 20ms the lane gives its connection back
			proxies[0].DelayOpen(300*time.Millisecond, 0)
			if _, err := c.Obtain(ctx, "k", time.Minute); !errors.Is(err, redlock.ErrUnavailable) {
				t.Fatalf("Obtain through a connection 300ms slow: %v, want ErrUnavailable", err)
			}
			time.Sleep(time.Second) // the SET has landed; the undo has run
			if v := get(t, direct[0], "k"); v != "" {
				_, err := c.Obtain(ctx, "k", time.Minute)
				t.Fatalf("a second after the failed Obtain, its key %q is on the master for %v more; Obtain now: %v",
					v, direct[0].PTTL(ctx, "k").Val().Round(time.Second), err)
			}
		})
	}
}

// TestLaneTakesRequestsDuringATick: while an idle lane runs a tick (to send
// a kept Release again, or to give its connection back), running is set but
// stalled still holds the stall point of the last batch, long past
// (lane.go work sets only running for a tick). lane.send then takes any
// new request for the overdue batch of a stalled master and fails it at
// once with errStalled. A tick that sends kept Releases waits up to 500ms
// for the master (maxDefaultNodeTimeout, whatever the node timeout), so for
// that long every request to the lane fails at once: here an Obtain with a
// 1s node timeout fails in no time, although the master, frozen for a
// moment, answers 100ms later.
func TestLaneTakesRequestsDuringATick(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
		o.PoolSize = 4 // one lane
	})
	defer rdb.Close()
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(time.Second))
	l, err := c.Obtain(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	defer servers[0].Cont()
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := l.Release(rctx); err == nil { // kept, for the lane's next tick
		t.Fatal("Release on a frozen master succeeded")
	}
	time.Sleep(100 * time.Millisecond) // the tick is sending the kept Release
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		l, err := c.Obtain(ctx, "b", time.Minute)
		if err == nil {
			_ = l.Release(ctx)
		}
		done <- result{err, time.Since(start)}
	}()
	time.Sleep(100 * time.Millisecond)
	if err := servers[0].Cont(); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil {
		t.Fatalf("Obtain with a 1s node timeout on a master that answered 100ms later: failed after %v: %v", r.took.Round(time.Millisecond), r.err)
	}
}

// TestInspectReturnsAtItsNodeTimeout: Inspect's doc says a master that
// does not answer "within the node timeout ... or ctx has its Err set", and
// New's doc that without ContextTimeoutEnabled "calls still return at
// their node timeout". Inspect calls the masters' clients directly
// (inspect.go), not through the lanes: with go-redis's default
// (ContextTimeoutEnabled off) a frozen master holds it for the client's
// ReadTimeout (here 1s; go-redis's default is 3s), past its node timeout
// and past the caller's own context. `redlock status` reads through it.
func TestInspectReturnsAtItsNodeTimeout(t *testing.T) {
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	takeDown(t, "frozen", servers[0])
	start := time.Now()
	s, err := c.Inspect(ctx, "k")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > 300*time.Millisecond {
		t.Fatalf("Inspect with a 100ms node timeout and a 100ms context returned after %v with one master frozen (its answer: %v)", took.Round(time.Millisecond), s.Masters[0].Err)
	}
}

// TestMasterSpecWithoutSchemeLeaksNoPassword: MasterOptions "never repeats
// a password" (its doc). A URL's user part typed without its scheme
// ("user:password@host:port", ":password@host:port", a common slip, and
// what `redlock run --masters` gets from a shell variable gone wrong) is
// taken as a host name: no error, the password in Options.Addr, which the
// Client prints in every NodeError and go-redis in every dial error.
func TestMasterSpecWithoutSchemeLeaksNoPassword(t *testing.T) {
	for _, spec := range []string{"locker:s3cret@127.0.0.1:1", ":s3cret@127.0.0.1:1", ":s3cret@localhost"} {
		o, err := redlock.MasterOptions(spec)
		if err != nil {
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("MasterOptions(%q): %v", spec, err)
			}
			continue
		}
		o.DialTimeout = 100 * time.Millisecond
		rdb := redis.NewClient(o)
		c, err := redlock.NewSingle(rdb)
		if err != nil {
			rdb.Close()
			t.Fatal(err)
		}
		_, err = c.Obtain(context.Background(), "k", time.Second)
		c.Close()
		rdb.Close()
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("MasterOptions(%q) took it as the address %q; Obtain then: %v", spec, o.Addr, err)
		}
	}
}

// refuser is a hook that refuses commands without sending them while
// armed, as a circuit breaker or a rate limiter does (go-redis's own
// Options.Limiter fails commands the same way).
type refuser struct {
	armed  atomic.Bool
	panics bool // panic instead of returning an error
}

func (h *refuser) refuse() error {
	if h.panics {
		panic("hook panics")
	}
	return errRefused
}

var errRefused = errors.New("circuit open")

func (h *refuser) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *refuser) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.CompareAndSwap(true, false) {
			return h.refuse()
		}
		return next(ctx, cmd)
	}
}
func (h *refuser) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.CompareAndSwap(true, false) {
			return h.refuse()
		}
		return next(ctx, cmds)
	}
}

// TestBarrierKillsNoStrangerAfterARefusal: the transport takes any error
// that is not a reply for "the connection may still carry requests" and
// gives the connection up with a barrier to kill it (transport.go send,
// drop). An error from a hook or a limiter that never sent anything leaves
// the connection healthy, and drop hands it back to the pool with
// Conn.Close: the application sharing the client takes it next, and the
// lane's next batch kills it by ID and address, mid-use: the stranger
// TestBarrierKillsNoStranger guards against, reached another way. The
// refusal case is new in 2d3c695 (its parent passes it); a hook that
// panics (transport.go reset) did the same before.
func TestBarrierKillsNoStrangerAfterARefusal(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprint("panics=", panics), func(t *testing.T) {
			ctx := context.Background()
			servers := redistest.Start(t, 1)
			rdb := servers[0].Client(func(o *redis.Options) { o.PoolSize = 4 }) // one lane
			defer rdb.Close()
			hook := &refuser{panics: panics}
			rdb.AddHook(hook)
			c := newClient(t, []redis.UniversalClient{rdb})
			l, err := c.Obtain(ctx, "warm", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			hook.armed.Store(true)
			if err := l.Release(ctx); err == nil {
				t.Fatal("Release through a refusing hook succeeded")
			}
			// The application takes a connection of its client: the one
			// the lane just gave back.
			app := rdb.Conn()
			defer app.Close()
			id, err := app.ClientID(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			l, err = c.Obtain(ctx, "k", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Release(ctx)
			if err := app.Ping(ctx).Err(); err != nil {
				t.Fatalf("the application's connection (client ID %d), which the lane had given back to the pool healthy after its hook refused a batch, was killed by the lane's barrier: %v", id, err)
			}
		})
	}
}

// TestExtendAfterAPauseIsOneRoundTrip: a lane gives its connection back
// after 20ms without requests, and a batch with an Extend on a fresh
// connection first sends CLIENT INFO alone and waits for it
// (transport.go prepare). Every Extend that follows a pause of more than
// 20ms, which is every watchdog renewal (every ttl/3), costs two round
// trips instead of one: on a master 40ms away an Extend takes 80ms, a
// fifth of the default node timeout of a 2s lock gone to the CLIENT INFO.
// (Before 2d3c695: one round trip.)
func TestExtendAfterAPauseIsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	p, err := redistest.NewProxy(servers[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rdb := servers[0].Client(func(o *redis.Options) {
		o.Addr = p.Addr()
		o.PoolSize = 4 // one lane
	})
	defer rdb.Close()
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(time.Second))
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil { // scripts loaded
		t.Fatal(err)
	}
	p.DelayOpen(20*time.Millisecond, 20*time.Millisecond) // a 40ms round trip
	var worst time.Duration
	for range 5 {
		time.Sleep(100 * time.Millisecond) // a pause, as between two renewals
		start := time.Now()
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
	}
	if worst > 70*time.Millisecond {
		t.Fatalf("Extend after a pause on a master 40ms away took up to %v: two round trips", worst.Round(time.Millisecond))
	}
}

// TestFreshConnectionCostsNoPeek: on a RESP3 connection go-redis peeks at
// the socket for push notifications after every command (a recvfrom and
// three allocations) until the connection has been put back in its pool
// once (transport.go connTurn). Before 2d3c695 take put a freshly dialed
// connection back once to stamp it; now a lane's connection pays the peek
// on every batch for its first connTurn (2s), until it turns: an
// Obtain+Release on one master allocates 14 times instead of 9 in that
// time (BenchmarkObtainRelease/N=1: 9 -> 14 allocs/op; under -race 21
// instead of 15).
func TestFreshConnectionCostsNoPeek(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	clients := redistest.Clients(t, servers)
	c := newClient(t, clients)
	i := 0
	cycle := func() {
		i++
		l, err := c.Obtain(ctx, fmt.Sprint("k", i), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		cycle()
	}
	fresh := testing.AllocsPerRun(200, cycle)
	// Keep the lanes busy past their turn: their connections go back to
	// the pool once, and come back stamped.
	for start := time.Now(); time.Since(start) < 2500*time.Millisecond; {
		cycle()
	}
	turned := testing.AllocsPerRun(200, cycle)
	if fresh > turned+1 {
		t.Fatalf("Obtain+Release on one master: %.1f allocations per cycle within 2s of the lanes' first dial, %.1f once their connections turned", fresh, turned)
	}
}

// TestRetriedReleaseIsNoFalseLoss: Release's doc says "After a Release
// that merely failed to reach the masters, another call tries again". A
// Release refused by a stalled lane is kept and sent again by the lane
// once the master answers (lane.go send, transport.go), so the caller's
// retry finds the key already gone and reports ErrLockLost ("work done
// under the lock may have overlapped"), for a lock held to the end and
// released by the library itself.
func TestRetriedReleaseIsNoFalseLoss(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) { o.PoolSize = 4 }) // one lane; reads bounded by ReadTimeout (1s)
	defer rdb.Close()
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(50*time.Millisecond))
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil { // scripts loaded
		t.Fatal(err)
	}
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	defer servers[0].Cont()
	// A batch in flight on the frozen master: the lane stalls.
	go c.Obtain(ctx, "other", time.Minute)
	time.Sleep(150 * time.Millisecond)
	first := l.Release(ctx)
	if first == nil || errors.Is(first, redlock.ErrLockLost) {
		t.Fatalf("Release on a stalled lane: %v, want a failure that is not ErrLockLost", first)
	}
	if err := servers[0].Cont(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the master answers again
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release tried again, as its doc says, once the master answers: %v (the first: %v)", err, first)
	}
}

// TestSporadicLockingCostsLittle: a lane gives its connection back after
// 20ms without requests (transport.go connIdle) and takes one again for
// the next batch, which then carries CLIENT INFO (parsed into a
// *redis.ClientInfo), and, for an Extend, waits for it first. Locks taken
// now and then (every 30ms here; every ttl/3 for a watchdog) pay that on
// every call: an Obtain+Extend+Release over three masters allocates about
// 200 times (13 before 2d3c695) and takes about 1.4x as long.
func TestSporadicLockingCostsLittle(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	i := 0
	cycle := func() {
		time.Sleep(30 * time.Millisecond)
		i++
		l, err := c.Obtain(ctx, fmt.Sprint("k", i), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		cycle()
	}
	if n := testing.AllocsPerRun(40, cycle); n > 40 {
		t.Fatalf("Obtain+Extend+Release over three masters, one every 30ms: %.0f allocations per cycle", n)
	}
}

// TestReleaseHonoursItsContextWhileTheWatchdogRenews: Release and Extend
// take the lock's mutex before anything else (lock.go release, Extend),
// and the watchdog holds that mutex for a whole renewal (watchdog.go run:
// extendLocked under l.mu). A caller that releases while a renewal hangs
// on slow masters waits for the renewal, up to its node timeout, whatever
// its own context says: here a Release with a 50ms context returns after
// about a second. (Also so before 2d3c695.)
func TestReleaseHonoursItsContextWhileTheWatchdogRenews(t *testing.T) {
	ctx := context.Background()
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(time.Second))
	l, err := c.Obtain(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	takeDown(t, "frozen", servers[0], servers[1])
	time.Sleep(150 * time.Millisecond) // a renewal hangs on the frozen majority
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = l.Release(rctx)
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Fatalf("Release with a 50ms context returned after %v: %v", took.Round(time.Millisecond), err)
	}
}

// TestCloseSendsKeptReleases: Close "waits for ... the requests still in
// flight to finish or time out", but a Release the lane kept to send again
// once the master answers (transport.go keepOp) is dropped when the lane
// closes (lane.go work returns once its queue is empty): a service that
// releases its locks and closes its Client on shutdown, during a moment of
// slowness, leaves the released locks' keys for their whole TTL.
func TestCloseSendsKeptReleases(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	rdb := servers[0].Client(func(o *redis.Options) { o.PoolSize = 4 }) // one lane
	defer rdb.Close()
	c, err := redlock.New([]redis.UniversalClient{rdb}, redlock.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	defer servers[0].Cont()
	go c.Obtain(ctx, "other", time.Minute) // in flight on the frozen master: the lane stalls
	time.Sleep(150 * time.Millisecond)
	if err := l.Release(ctx); err == nil {
		t.Fatal("Release on a stalled lane succeeded")
	}
	if err := servers[0].Cont(); err != nil {
		t.Fatal(err)
	}
	c.Close() // shutdown
	if v := get(t, direct[0], "k"); v == l.Token() {
		t.Fatalf("after Close, the released lock's key is on the master for %v more", direct[0].PTTL(ctx, "k").Val().Round(time.Second))
	}
}

// TestClientNameWithAnEqualsSign: go-redis parses CLIENT INFO by splitting
// each field on '=' and fails on a field with two ("name=svc=api"; Redis
// allows '=' in a client name, go-redis's Options.ClientName sets it). That
// parse error is not a reply: go-redis stops reading the pipeline there,
// so the batch sent with the first CLIENT INFO of a connection
// (transport.go send) fails whole, although the master ran it, and the
// connection is dropped as broken, without an ID: the next batch is again
// a first batch. Nothing ever succeeds: every Obtain fails with
// ErrUnavailable on a healthy master (its undo then deletes the key it
// took). Before 2d3c695 (CLIENT ID) the client name did not matter.
func TestClientNameWithAnEqualsSign(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	rdb := servers[0].Client(func(o *redis.Options) { o.ClientName = "svc=api" })
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(200*time.Millisecond))
	for i := range 3 {
		time.Sleep(50 * time.Millisecond) // now and then
		l, err := c.Obtain(ctx, "k", time.Minute)
		if err != nil {
			time.Sleep(500 * time.Millisecond) // the failed attempt's undo has run
			t.Fatalf("Obtain %d on a healthy master: %v; 500ms later the master holds %q", i, err, get(t, direct[0], "k"))
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("Extend %d: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
	}
}

// TestObtainAfterCloseHasAnOutcome: the package doc and ErrNotObtained's
// say every failed Obtain (or Do) matches ErrNotObtained and exactly one
// of ErrTaken or ErrUnavailable, the rule the README's quick start
// branches on. An Obtain or Do on a closed Client returns a bare ErrClosed
// (redlock.go check), which matches none of them: the quick start's
// "else" branch is taken for a shutdown. (Close's own doc says ErrClosed;
// the two docs disagree.)
func TestObtainAfterCloseHasAnOutcome(t *testing.T) {
	_, clients, _ := cluster(t, 1)
	c, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, err = c.Obtain(context.Background(), "k", time.Minute)
	if !errors.Is(err, redlock.ErrNotObtained) || errors.Is(err, redlock.ErrTaken) == errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("Obtain on a closed Client: %v; want ErrNotObtained and exactly one of ErrTaken, ErrUnavailable (and ErrClosed)", err)
	}
}
