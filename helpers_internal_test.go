package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/scripts"
)

// Helpers of the root package's own tests (package redlock): in-process
// masters, Clients over them, faults, hooks.

// minis starts n in-process masters and returns them with their clients.
func minis(t *testing.T, n int) ([]*miniredis.Miniredis, []redis.UniversalClient) {
	t.Helper()
	ms := make([]*miniredis.Miniredis, n)
	cs := make([]redis.UniversalClient, n)
	for i := range n {
		ms[i] = miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: ms[i].Addr(), MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return ms, cs
}

// newClient is New over masters, closed when the test ends. It takes any
// client settings (AnyClientOptions), as the external tests' newClient.
func newClient(t *testing.T, masters []redis.UniversalClient, opts ...Option) *Client {
	t.Helper()
	c, err := New(masters, append([]Option{AnyClientOptions()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// proxied starts n servers, each behind a proxy, and returns the proxies
// and go-redis clients that reach the servers through them, with go-redis's
// defaults for the read timeouts (ContextTimeoutEnabled off: a read is
// bounded by ReadTimeout, not by the request's deadline), as a newcomer's
// clients would be.
func proxied(t *testing.T, n int) ([]*redistest.Proxy, []redis.UniversalClient) {
	t.Helper()
	servers := redistest.Start(t, n)
	proxies := make([]*redistest.Proxy, n)
	clients := make([]redis.UniversalClient, n)
	for i, s := range servers {
		p, err := redistest.NewProxy(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		rdb := s.Client(func(o *redis.Options) { o.Addr = p.Addr() })
		t.Cleanup(func() { rdb.Close() })
		proxies[i], clients[i] = p, rdb
	}
	return proxies, clients
}

// busyMaster keeps s busy in a script that never ends (every command but a
// few gets -BUSY) until stop is called, which kills the script.
func busyMaster(t *testing.T, s *redistest.Server) (stop func()) {
	t.Helper()
	ctx := context.Background()
	script := s.Client(func(o *redis.Options) { o.ReadTimeout = 30 * time.Second })
	probe := s.Client()
	done := make(chan error, 1)
	go func() { done <- script.Eval(ctx, "while true do end", nil).Err() }()
	redistest.Eventually(t, func() error {
		if err := probe.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "BUSY") {
			return fmt.Errorf("PING while the script runs: %v", err)
		}
		return nil
	})
	return func() {
		defer script.Close()
		defer probe.Close()
		if err := probe.Do(ctx, "script", "kill").Err(); err != nil {
			t.Errorf("SCRIPT KILL: %v", err)
		}
		<-done
	}
}

// laneIdle waits until the lanes of rdb's master gave their connections
// back to its pool.
func laneIdle(t *testing.T, rdb *redis.Client) {
	t.Helper()
	redistest.Eventually(t, func() error {
		if s := rdb.PoolStats(); s.IdleConns != s.TotalConns {
			return fmt.Errorf("the lanes still hold %d connections", s.TotalConns-s.IdleConns)
		}
		return nil
	})
}

// workerSeen is a go-redis hook that records whether a command ran on a
// lane's worker goroutine.
type workerSeen struct {
	mu     sync.Mutex
	worker []bool
}

func (h *workerSeen) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *workerSeen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.see(cmd.Name())
		return next(ctx, cmd)
	}
}

func (h *workerSeen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.see("pipeline")
		return next(ctx, cmds)
	}
}

func (h *workerSeen) see(string) {
	buf := make([]byte, 64<<10)
	buf = buf[:runtime.Stack(buf, false)]
	h.mu.Lock()
	h.worker = append(h.worker, strings.Contains(string(buf), "(*lane).work"))
	h.mu.Unlock()
}

// scriptCounter counts the scripts a client sends (EVALSHA and EVAL), and
// those the master ran: answered with a reply, not an error (BUSY,
// NOSCRIPT, a timeout).
type scriptCounter struct{ n, ran atomic.Int64 }

// isScript matches the lock scripts (EVALSHA, EVAL).
func isScript(c redis.Cmder) bool { n := c.Name(); return n == "evalsha" || n == "eval" }

func (h *scriptCounter) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if isScript(c) {
			h.n.Add(1)
		}
	}
}

func (h *scriptCounter) answered(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if err := c.Err(); isScript(c) && (err == nil || err == redis.Nil) {
			h.ran.Add(1)
		}
	}
}

// past waits until the master has run more than n of the client's
// scripts (h.ran).
func (h *scriptCounter) past(t *testing.T, n int64) {
	t.Helper()
	redistest.Eventually(t, func() error {
		if got := h.ran.Load(); got <= n {
			return fmt.Errorf("the master ran %d scripts of the client, want more than %d", got, n)
		}
		return nil
	})
}

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		err := next(ctx, cmd)
		h.answered(cmd)
		return err
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		err := next(ctx, cmds)
		h.answered(cmds...)
		return err
	}
}

// onSend is a hook that calls itself with the commands of each call,
// before they are sent.
type onSend func(cmds ...redis.Cmder)

func (f onSend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f onSend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f(cmd)
		return next(ctx, cmd)
	}
}

func (f onSend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		f(cmds...)
		return next(ctx, cmds)
	}
}

// A sentConn is one end of an in-memory connection (net.Pipe) whose
// writes return at once: a writer goroutine of its own, which ends with
// the connection, passes them on in order. A net.Pipe's Write waits for
// the other end to read it all, and miniredis answers a pipeline's first
// command before it reads the rest: a batch longer than its read buffer
// (a script's source) would wait on its own replies.
type sentConn struct {
	net.Conn
	mu     sync.Mutex
	closed bool
	out    chan []byte
}

// writeAhead returns c, its writes passed on by a goroutine of its own.
func writeAhead(c net.Conn) net.Conn {
	s := &sentConn{Conn: c, out: make(chan []byte, 256)}
	go func() {
		for b := range s.out {
			if _, err := c.Write(b); err != nil {
				c.Close()
			}
		}
	}()
	return s
}

func (s *sentConn) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, net.ErrClosed
	}
	s.out <- slices.Clone(b)
	return len(b), nil
}

func (s *sentConn) Close() error {
	err := s.Conn.Close() // first: a write the writer is stuck in fails
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.out)
	}
	s.mu.Unlock()
	return err
}

// watched holds "k" for ttl on one in-memory master (inMemory), whose
// client has hook, under a watchdog that runs until the test ends.
func watched(t *testing.T, hook redis.Hook, ttl, nodeTimeout time.Duration) (*Client, *Lock) {
	t.Helper()
	c := inMemory(t, hook, WithNodeTimeout(nodeTimeout))
	return c, keptAlive(t, c, "k", ttl)
}

// inMemory returns a Client of one in-memory master (miniredis over
// net.Pipe: no socket, so a synctest bubble runs it in virtual time),
// whose client has hook.
func inMemory(t *testing.T, hook redis.Hook, opts ...Option) *Client {
	t.Helper()
	m := miniredis.NewMiniRedis()
	t.Cleanup(m.Close)
	rdb := redis.NewClient(&redis.Options{
		Addr:       "127.0.0.1:0",
		MaxRetries: -1,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			c, err := m.Dial()
			if err != nil {
				return nil, err
			}
			return writeAhead(c), nil
		},
	})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(hook)
	return newClient(t, []redis.UniversalClient{rdb}, opts...)
}

// keptAlive obtains key for ttl on c and keeps it alive until the test
// ends.
func keptAlive(t *testing.T, c *Client, key string, ttl time.Duration) *Lock {
	t.Helper()
	l, err := c.Obtain(t.Context(), key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	_, stop, err := l.KeepAlive(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return l
}

// failHook fails every script while on, and counts the attempts.
type failHook struct {
	on atomic.Bool
	n  atomic.Int64
}

func (h *failHook) fail(cmds ...redis.Cmder) bool {
	if !h.on.Load() {
		return false
	}
	for _, c := range cmds {
		if isScript(c) {
			h.n.Add(1)
			return true
		}
	}
	return false
}

var errInjected = errors.New("injected: master unreachable")

func (h *failHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fail(cmd) {
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}
}

func (h *failHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.fail(cmds...) {
			for _, c := range cmds {
				c.SetErr(errInjected)
			}
			return errInjected
		}
		return next(ctx, cmds)
	}
}

// oneOutcome checks the rule of a failed operation's outcome (errors.go):
// err matches at most one of ErrTaken and ErrUnavailable, and its headline
// (the text before the masters' answers) names the one it matches.
func oneOutcome(t *testing.T, what string, err error) (taken, unavailable bool) {
	t.Helper()
	taken, unavailable = errors.Is(err, ErrTaken), errors.Is(err, ErrUnavailable)
	if taken && unavailable {
		t.Fatalf("%s: %v matches both ErrTaken and ErrUnavailable", what, err)
	}
	head, _, _ := strings.Cut(err.Error(), " (")
	if strings.Contains(head, "held by another owner") != taken || strings.Contains(head, "masters unavailable") != unavailable {
		t.Fatalf("%s: %q says otherwise than it matches (taken %v, unavailable %v)", what, head, taken, unavailable)
	}
	return taken, unavailable
}

// overlappingSets are the sets the contention tests take: each key is in
// several, in both orders, beside a set of one key and a set of three.
var overlappingSets = [][]string{
	{"k0", "k1"}, {"k1", "k0"}, {"k1", "k2"}, {"k2", "k3", "k4"},
	{"k4", "k0"}, {"k3", "k1"}, {"k2"}, {"k0", "k2", "k4"},
}

// A contention is what contend saw: per key, how often a holder found
// another holder of that key (a ledger of holders per key: it must stay at
// one); the workers that did not get through all their rounds (no
// progress: a deadlock, or keys left behind); and the holds made.
type contention struct {
	overlaps map[string]int
	stuck    []string
	holds    int
}

// contend runs one worker per set of sets on c, each taking its set rounds
// times (a jittered retry, each Obtain bounded by wait) and holding it a
// moment.
func contend(t *testing.T, c *Client, sets [][]string, rounds int, ttl, wait time.Duration) contention {
	t.Helper()
	var mu sync.Mutex
	res := contention{overlaps: map[string]int{}}
	holders := map[string]*atomic.Int32{}
	for _, set := range sets {
		for _, k := range set {
			holders[k] = new(atomic.Int32)
		}
	}
	var wg sync.WaitGroup
	for w, set := range sets {
		wg.Go(func() {
			for r := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				l, err := c.ObtainMulti(ctx, set, ttl, WithRetry(LinearBackoff(2*time.Millisecond)))
				cancel()
				if err != nil {
					mu.Lock()
					res.stuck = append(res.stuck, fmt.Sprintf("worker %d %q, round %d: %v", w, set, r, err))
					mu.Unlock()
					return
				}
				var seen []string
				for _, k := range set {
					if holders[k].Add(1) > 1 {
						seen = append(seen, k)
					}
				}
				time.Sleep(300 * time.Microsecond)
				for _, k := range set {
					holders[k].Add(-1)
				}
				mu.Lock()
				res.holds++
				for _, k := range seen {
					res.overlaps[k]++
				}
				mu.Unlock()
				l.Release(context.Background())
			}
		})
	}
	wg.Wait()
	return res
}

// brokenScript is a script of src with its digest.
func brokenScript(src string) scripts.Script {
	r := redis.NewScript(src)
	return scripts.New("broken.lua", src, r.Hash())
}

// setClient starts n masters and a Client over them.
func setClient(t *testing.T, n int) *Client {
	t.Helper()
	c, err := New(redistest.Clients(t, redistest.Start(t, n)), WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// onEvery waits until every master's value of key begins with token: an
// Obtain returns at a quorum, and a waiter that asks a master the holder's
// grant has not reached yet takes the key there instead.
func onEvery(t *testing.T, clients []redis.UniversalClient, key, token string) {
	t.Helper()
	redistest.Eventually(t, func() error {
		for i, rdb := range clients {
			if v, _ := rdb.Get(context.Background(), key).Result(); !strings.HasPrefix(v, token) {
				return fmt.Errorf("master %d holds %s = %q, want %s", i, key, v, token)
			}
		}
		return nil
	})
}
