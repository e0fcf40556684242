package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// Defaults shared by the scenarios.
const (
	nodeTimeout = 50 * time.Millisecond
	// slack is what the scheduler of a busy 2-core machine under -race may
	// add to a bound; every "bounded" check allows it and the table shows
	// the real figure.
	slack = 150 * time.Millisecond
)

// env is one scenario's masters, their network views and clients.
type env struct {
	t       testing.TB
	sub     *subject // the lock under test
	servers []*redistest.Server
	net     *Net
	prefix  string

	mu      sync.Mutex
	proxies map[string][]*Proxy
	rdbs    []*redis.Client
}

// newEnv starts n masters for locks of sub; opt, if given, adjusts master
// i's options.
func newEnv(t testing.TB, sub *subject, n int, opt func(i int, o *redistest.Options)) *env {
	t.Helper()
	redistest.Require(t)
	e := &env{t: t, sub: sub, net: NewNet(), proxies: map[string][]*Proxy{}, prefix: "chaos:"}
	e.servers = make([]*redistest.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		o := redistest.Options{}
		if opt != nil {
			opt(i, &o)
		}
		wg.Go(func() { e.servers[i], errs[i] = redistest.NewServer(o) })
	}
	wg.Wait()
	t.Cleanup(e.close)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) close() {
	e.mu.Lock()
	rdbs := e.rdbs
	e.rdbs = nil
	e.mu.Unlock()
	for _, c := range rdbs {
		c.Close()
	}
	e.net.Close()
	for _, s := range e.servers {
		if s != nil {
			s.Close()
		}
	}
}

// group returns (creating on first use) the proxies of one client group,
// one per master.
func (e *env) group(name string) []*Proxy {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ps, ok := e.proxies[name]; ok {
		return ps
	}
	ps := make([]*Proxy, len(e.servers))
	for i, s := range e.servers {
		p, err := e.net.Proxy(fmt.Sprintf("%s-m%d", name, i), s.Addr())
		if err != nil {
			e.t.Fatal(err)
		}
		ps[i] = p
	}
	e.proxies[name] = ps
	return ps
}

// clientOpts are the suite's go-redis settings: no command retries, one
// dial attempt, socket timeouts a little above the node timeout so the
// library's own bound is the one that shows, context deadlines honoured.
func clientOpts(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           2 * nodeTimeout,
		ReadTimeout:           2 * nodeTimeout,
		WriteTimeout:          2 * nodeTimeout,
		PoolTimeout:           2 * nodeTimeout,
		ContextTimeoutEnabled: true,
		PoolSize:              16,
		Protocol:              2,
		DisableIdentity:       true,
	}
}

func (e *env) client(addr string, adjust func(*redis.Options)) *redis.Client {
	o := clientOpts(addr)
	if adjust != nil {
		adjust(o)
	}
	c := redis.NewClient(o)
	e.mu.Lock()
	e.rdbs = append(e.rdbs, c)
	e.mu.Unlock()
	return c
}

// masters returns one go-redis client per master: through the group's
// proxies, or straight to the servers when group is "".
func (e *env) masters(group string) []redis.UniversalClient { return e.mastersWith(group, nil) }

// mastersWith is masters with the go-redis options adjusted.
func (e *env) mastersWith(group string, adjust func(*redis.Options)) []redis.UniversalClient {
	ms := make([]redis.UniversalClient, len(e.servers))
	if group == "" {
		for i, s := range e.servers {
			ms[i] = e.client(s.Addr(), adjust)
		}
		return ms
	}
	for i, p := range e.group(group) {
		ms[i] = e.client(p.Addr(), adjust)
	}
	return ms
}

// direct is a client per master for inspection (scans), never proxied.
func (e *env) direct() []redis.UniversalClient { return e.masters("") }

// lockClient builds the subject's lock over masters (one master: a
// single-instance lock), closed when the test ends.
func (e *env) lockClient(ms []redis.UniversalClient) Locker {
	return e.locker(ms, LockConfig{})
}

// fencedClient is lockClient with fencing tokens.
func (e *env) fencedClient(ms []redis.UniversalClient) Locker {
	return e.locker(ms, LockConfig{Fencing: true})
}

// locker builds the subject's lock with cfg; the suite's node timeout and
// key prefix apply where cfg leaves them unset.
func (e *env) locker(ms []redis.UniversalClient, cfg LockConfig) Locker {
	e.t.Helper()
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = nodeTimeout
	}
	if cfg.Prefix == "" {
		cfg.Prefix = e.prefix
	}
	c, err := e.sub.locker()(ms, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// warm opens n connections on each client, so toxics added later meet a
// full pool rather than a handshake. Clients are warmed one after another
// and each PING is retried a few times: on a busy machine a dial through
// toxiproxy can miss the suite's short dial timeout.
func warm(t testing.TB, ms []redis.UniversalClient, n int) {
	t.Helper()
	for _, m := range ms {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for j := range n {
			wg.Go(func() {
				for range 5 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					errs[j] = m.Ping(ctx).Err()
					cancel()
					if errs[j] == nil {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("warming pools: %v", err)
		}
	}
}

// settle waits (at most 2.5 s) until every client answers PING again, so
// one variant's fault does not leak into the next through a pool that is
// still failing fast (go-redis re-dials once a second after PoolSize
// failed dials).
func settle(t testing.TB, ms []redis.UniversalClient) time.Duration {
	t.Helper()
	start := time.Now()
	for _, m := range ms {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			err := m.Ping(ctx).Err()
			cancel()
			if err == nil {
				break
			}
			if time.Since(start) > 2500*time.Millisecond {
				t.Fatalf("a master did not answer PING again within 2.5s: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return time.Since(start)
}

// warmLock has the lock send a request to every master and hear back
// before a fault: the library's lane sends lock requests only on a
// connection whose ID it learned in a round trip of its own, so a lane
// that meets a cut link without one sends nothing there, and warming the
// go-redis pools does not give it one. It obtains and releases a
// throwaway key until one lock reached every master (direct: a client per
// master, unproxied), then waits until its release ran everywhere and
// allows the replies a node timeout to come back.
func warmLock(t testing.TB, c Locker, direct []redis.UniversalClient, prefix string) {
	t.Helper()
	on := func(ctx context.Context, token string) (n int) {
		for _, m := range direct {
			if v, _ := m.Get(ctx, prefix+"warm").Result(); v == token {
				n++
			}
		}
		return n
	}
	var err error
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var lock Held
		if lock, err = c.Obtain(ctx, "warm", time.Second); err == nil {
			time.Sleep(nodeTimeout) // the masters after the quorum
			n := on(ctx, lock.Token())
			if err = lock.Release(ctx); err == nil && n < len(direct) {
				err = fmt.Errorf("the lock reached %d of %d masters", n, len(direct))
			}
			for err == nil && ctx.Err() == nil && on(ctx, lock.Token()) > 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
		cancel()
		if err == nil {
			time.Sleep(nodeTimeout)
			return
		}
	}
	t.Fatalf("warming the lock: %v", err)
}

// setCalls is how many SET and SETNX commands the masters ran (INFO
// commandstats; a refused SET NX counts too: it reached the master).
func setCalls(t testing.TB, ms []redis.UniversalClient) (n int) {
	t.Helper()
	for _, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := m.Info(ctx, "commandstats").Result()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			for _, cmd := range []string{"set", "setnx"} {
				if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
					c, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
					n += c
				}
			}
		}
	}
	return n
}

// witness starts a Witness on every master, closed when the test ends.
func (e *env) witness() *Witness {
	e.t.Helper()
	var addrs []string
	for _, s := range e.servers {
		addrs = append(addrs, s.Addr())
	}
	w, err := NewWitness(addrs, e.prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(w.Close)
	return w
}

// syncWitness waits until w has read everything the masters ran so far,
// sending its marks straight to each master (again until ctx ends, should
// a master be slow to answer).
func (e *env) syncWitness(ctx context.Context, w *Witness) error {
	direct := e.direct()
	return w.Sync(ctx, func(ctx context.Context, m int, msg string) error {
		for {
			err := direct[m].Echo(ctx, msg).Err()
			if err == nil || ctx.Err() != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// residual scans every master for lock keys (the suite's prefix).
func (e *env) residual() Residual {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return ScanResidual(ctx, e.direct(), e.prefix+"*")
}

// each runs f on masters idx in parallel and fails the test on error.
func (e *env) each(idx []int, f func(s *redistest.Server) error) {
	e.t.Helper()
	errs := make([]error, len(idx))
	var wg sync.WaitGroup
	for k, i := range idx {
		wg.Go(func() { errs[k] = f(e.servers[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) kill(idx ...int) { e.each(idx, (*redistest.Server).Kill) }
func (e *env) stop(idx ...int) { e.each(idx, (*redistest.Server).Stop) }
func (e *env) cont(idx ...int) { e.each(idx, (*redistest.Server).Cont) }
func (e *env) restart(persist bool, idx ...int) {
	e.each(idx, func(s *redistest.Server) error { return s.Restart(persist) })
}

// shim is the clock shim built by TestMain, or why it is missing.
var shim struct {
	so   string
	skip string
}

// newClock gives one master a controllable wall clock; the test skips
// when the shim could not be built.
func newClock(t testing.TB) *Clock {
	t.Helper()
	if shim.so == "" {
		t.Skipf("clock shim unavailable: %s", shim.skip)
	}
	c, err := NewClock(shim.so, filepath.Join(t.TempDir(), "clock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func buildShim() (dir string) {
	dir, err := os.MkdirTemp("", "chaos-shim-*")
	if err != nil {
		shim.skip = err.Error()
		return ""
	}
	so, err := BuildShim(dir)
	if err != nil {
		shim.skip = err.Error()
		return dir
	}
	shim.so = so
	return dir
}

// mostly reports whether ok of total is a pass for a liveness check:
// at least 90%. The in-process toxiproxy on a busy 2-core machine under
// -race sometimes delays even healthy masters' replies past a 50 ms node
// timeout ("0 of 5 agreed"); a library that did not tolerate the fault
// would fail far more often. Safety checks never get a tolerance.
func mostly(ok, total int) bool { return 10*ok >= 9*total }
