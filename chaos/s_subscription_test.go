package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

// A holdProxy forwards TCP between clients and one master. Hold stops
// everything (nothing passes, nothing closes) until Release. A connection
// whose master side closes stays open on the client's side, a black hole:
// what the client sends goes nowhere and nothing comes back. So a client
// behind it does not see its master restart: each of its connections, a
// subscription among them, is cut silently, and new ones reach the master
// (toxiproxy closes a stalled connection when the stall ends, and passes a
// master's close on).
type holdProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	cond   sync.Cond
	held   bool
	closed bool
	conns  []net.Conn
}

func newHoldProxy(target string) (*holdProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &holdProxy{ln: ln, target: target}
	p.cond.L = &p.mu
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is where clients connect.
func (p *holdProxy) Addr() string { return p.ln.Addr().String() }

// Hold stops every byte, both ways, on every connection, new ones too.
func (p *holdProxy) Hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Release lets the bytes go again; it closes nothing.
func (p *holdProxy) Release() {
	p.mu.Lock()
	p.held = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Close closes the listener and every connection, and waits for its
// goroutines.
func (p *holdProxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// pass waits while the proxy holds; false once it is closed.
func (p *holdProxy) pass() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.held && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}

// track keeps c for Close; false (and c closed) once the proxy is closed.
func (p *holdProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *holdProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *holdProxy) serve(c net.Conn) {
	if !p.pass() {
		return
	}
	u, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		c.Close() // the master is down: refused, as without the proxy
		return
	}
	if !p.track(u) {
		return
	}
	p.wg.Go(func() { p.pipe(u, c, true) })
	p.pipe(c, u, false)
}

// pipe copies src to dst while the proxy lets it. Toward the master
// (up): when the client closes, the master's side is closed; when the
// master's side is gone, what the client sends is dropped. Toward the
// client: when the master's side closes, the client's stays open.
func (p *holdProxy) pipe(dst, src net.Conn, up bool) {
	buf := make([]byte, 32<<10)
	dead := false
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if !dead {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					dead = true // the master is gone: a black hole from now on
				}
			}
		}
		if err != nil {
			if up {
				dst.Close() // the client left
			}
			return
		}
	}
}

// S23: a Client's connections to its master, its wake subscription among
// them, are cut silently: they stall (nothing passes, nothing closes)
// while the master restarts empty, and the stall heals without closing
// anything. Another Client then takes the key. The holder's watchdog must
// hear that its subscription is not on the master its requests reach, and
// renew at once (its work told, the key being another's), within
// heardBound of the heal: not at its next renewal, a third of the TTL later.
func TestS23PartitionedSubscription(t *testing.T) {
	admit(t, light)
	partitionedSubscription(t, library)
}

func partitionedSubscription(t *testing.T, sub *subject) {
	const ttl, every = 30 * time.Second, 9 * time.Second
	r := newRow(t, sub, "S23 partitioned-subscription", "MUST",
		fmt.Sprintf("one master; A holds (TTL %v) under KeepAlive renewing every %v; A's connections stall (nothing passes, nothing closes), the master restarts empty, the stall heals closing nothing (A's subscription cut silently); B takes the key", ttl, every),
		fmt.Sprintf("A's work told (ErrLockLost) within %v of the heal", heardBound))
	e := newEnv(t, sub, 1, nil)
	p, err := newHoldProxy(e.servers[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	am := e.client(p.Addr(), nil)
	warm(t, []redis.UniversalClient{am}, 2)
	a := e.locker([]redis.UniversalClient{am}, LockConfig{})
	ctx := context.Background()
	lock, err := a.Obtain(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop, err := lock.KeepAlive(ctx, RenewEvery(every))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	direct := e.direct()
	numsub := func() int64 {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		n, _ := direct[0].PubSubNumSub(ctx, "redlock:wake").Result()
		return n["redlock:wake"]
	}
	if sub.mutant == "" {
		deadline := time.Now().Add(5 * time.Second)
		for numsub() < 1 {
			if time.Now().After(deadline) {
				t.Fatal("A's watchdog never subscribed to the master")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	p.Hold()
	heldAt := time.Now()
	e.restart(false, 0)
	settle(t, direct)
	b := e.locker(e.direct(), LockConfig{})
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	lockB, err := b.Obtain(bctx, "k", ttl, RetryEvery(5*time.Millisecond))
	cancel()
	if err != nil {
		t.Fatalf("B could not take the key of the restarted master: %v", err)
	}
	healAt := time.Now()
	p.Release()
	r.set("stalled", healAt.Sub(heldAt))

	deadline := healAt.Add(heardBound + slack)
	var told time.Time
	subs := int64(-1)
	for watchEnd := deadline.Add(*flagObserve); time.Now().Before(watchEnd); time.Sleep(5 * time.Millisecond) {
		if wctx.Err() != nil {
			told = time.Now()
			break
		}
		if subs < 0 && time.Now().After(deadline) {
			subs = numsub()
		}
	}
	if subs < 0 {
		subs = numsub()
	}
	r.set("wake_subscribers_after_heal", subs)
	toldAfter := any(fmt.Sprintf("never (watched %v)", time.Since(healAt).Round(time.Millisecond)))
	if !told.IsZero() {
		toldAfter = told.Sub(healAt)
		r.note("A's work told: %v", context.Cause(wctx))
	}
	r.set("told_after_heal", toldAfter)
	r.must(!told.IsZero() && told.Before(deadline) && errors.Is(context.Cause(wctx), redlock.ErrLockLost),
		"A's work was not told within %v of the heal that B holds the key (told after: %v, cause %v; wake subscribers on the restarted master: %d)",
		heardBound, toldAfter, context.Cause(wctx), subs)
	stop()
	lockB.Release(ctx)
}
