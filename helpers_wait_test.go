package redlock_test

import (
	"cmp"
	"context"
	"fmt"
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

// Helpers of the waiting tests (WithWait, WaitReleased): waiters in the
// background, the states a waiter leaves on the masters (its mark, its
// Client's place in the turn queue, its subscription), and the setups
// several tests share. The rest of the helpers is in helpers_test.go.

// waited is the outcome of a waiting Obtain, and how long it took.
type waited struct {
	l    *redlock.Lock
	err  error
	took time.Duration
}

// waitFor runs a WithWait Obtain of key in the background; the channel
// gets its outcome.
func waitFor(ctx context.Context, c *redlock.Client, key string, ttl time.Duration) <-chan waited {
	ch := make(chan waited, 1)
	go func() {
		start := time.Now()
		l, err := c.Obtain(ctx, key, ttl, redlock.WithWait())
		ch <- waited{l, err, time.Since(start)}
	}()
	return ch
}

// holdAndWait holds "k" for 20s with a and starts a waiting Obtain of it
// with b.
func holdAndWait(t *testing.T, a, b *redlock.Client) (*redlock.Lock, <-chan waited) {
	t.Helper()
	held := obtain(t, a, "k", 20*time.Second)
	return held, waitFor(t.Context(), b, "k", 20*time.Second)
}

// heldOnAll holds "k" for 20s with a and waits until every master has
// the key (Obtain returns at a quorum). It first waits until no master
// has "k": a Release returns at a quorum too, and an earlier holder's key
// still on a master would refuse the Obtain there, then go, leaving that
// master without the key while the others hold it.
func heldOnAll(t *testing.T, a *redlock.Client, clients []redis.UniversalClient) *redlock.Lock {
	t.Helper()
	redistest.Eventually(t, func() error {
		if hs := holdersOf(t, clients, "k"); slices.ContainsFunc(hs, func(v string) bool { return v != "" }) {
			return fmt.Errorf("an earlier holder's key is still there: %q", hs)
		}
		return nil
	})
	held := obtain(t, a, "k", 20*time.Second)
	onEvery(t, clients, "k", held.Token())
	return held
}

// onEvery waits until every master holds key under token (marked as
// waited for or not): an Obtain returns at a quorum, and a waiter that
// asks a master the holder's grant has not reached yet takes the key
// there, or marks nothing.
func onEvery(t *testing.T, clients []redis.UniversalClient, key, token string) {
	t.Helper()
	redistest.Eventually(t, func() error {
		hs := holdersOf(t, clients, key)
		if slices.ContainsFunc(hs, func(v string) bool { return !strings.HasPrefix(v, token) }) {
			return fmt.Errorf("holders of %s %q, want %s on every master", key, hs, token)
		}
		return nil
	})
}

// heldOnOne starts one master and holds "k" on it for 20s with a Client
// of its own.
func heldOnOne(t *testing.T) ([]redis.UniversalClient, *redlock.Lock) {
	t.Helper()
	_, clients, a := cluster(t, 1)
	return clients, obtain(t, a, "k", 20*time.Second)
}

// marked waits until a waiter has marked key on the master as waited for
// (its value holds the mark "!"), so that its release is announced.
func marked(t *testing.T, rdb redis.UniversalClient, key string) {
	t.Helper()
	redistest.Eventually(t, func() error {
		if v := get(t, rdb, key); !strings.Contains(v, "!") {
			return fmt.Errorf("%s holds %q, not marked as waited for", key, v)
		}
		return nil
	})
}

// subscribed waits until a Client subscribes to the master's wake channel.
func subscribed(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	redistest.Eventually(t, func() error {
		if subscribers(t, rdb, "redlock:wake", false) == 0 {
			return fmt.Errorf("nobody subscribed to redlock:wake")
		}
		return nil
	})
}

// subscribedAll waits until a Client subscribes to every master's wake
// channel, then past a node timeout (500ms in these tests): an ask made
// before the subscription was confirmed is followed by another within one,
// and after that the waiter relies on the wake-up and sleeps on the
// holder's TTL. What the test does next is then heard through the
// subscription, not found by an ask.
func subscribedAll(t *testing.T, clients []redis.UniversalClient) {
	t.Helper()
	for _, c := range clients {
		subscribed(t, c)
	}
	wakeUpOnly()
}

// wakeUpOnly waits past a node timeout (500ms in these tests) after a
// waiter's subscriptions were made: the ask that follows their
// confirmation, within a node timeout, is over, and from then on the waiter
// sleeps until a wake-up (or the holder's TTL).
func wakeUpOnly() {
	time.Sleep(700 * time.Millisecond) // no state shows the waiter's last ask: a node timeout and some
}

// outcome waits, at most within, for a waiting Obtain's outcome.
func outcome(t *testing.T, ch <-chan waited, within time.Duration) waited {
	t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(within):
		t.Fatalf("the waiting Obtain did not return within %v", within)
		return waited{}
	}
}

// wokenBy waits for a waiting Obtain's outcome, which must be a lock
// obtained within bound of since (a release: woken by it, well before the
// holder's TTL), and returns the lock.
func wokenBy(t *testing.T, ch <-chan waited, since time.Time, bound time.Duration) *redlock.Lock {
	t.Helper()
	w := outcome(t, ch, bound+10*time.Second)
	if w.err != nil {
		t.Fatalf("waiting Obtain: %v", w.err)
	}
	if d := time.Since(since); d > bound {
		t.Errorf("obtained %v after the release, want within %v: woken by it, well before the holder's TTL", d, bound)
	}
	return w.l
}

// wakes releases held and returns the lock of the waiting Obtain that
// release must wake: obtained within bound of the release, well before the
// holder's TTL.
func wakes(t *testing.T, held *redlock.Lock, ch <-chan waited, bound time.Duration) *redlock.Lock {
	t.Helper()
	released := time.Now()
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	return wokenBy(t, ch, released, bound)
}

// returned waits, at most within, for a call run in the background, and
// returns its error.
func returned(t *testing.T, done <-chan error, within time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		t.Fatalf("%s did not return within %v", what, within)
		return nil
	}
}

// queueOf returns the turn queue in key's value on the master: the Client
// ids after the mark, 8 characters each.
func queueOf(t *testing.T, rdb redis.UniversalClient, key string) []string {
	t.Helper()
	v := get(t, rdb, key)
	i := strings.IndexByte(v, '!')
	if i < 0 {
		return nil
	}
	var q []string
	for s := v[i+1:]; len(s) >= 8; s = s[8:] {
		q = append(q, s[:8])
	}
	return q
}

// queuedN waits until key's turn queue on the master has n ids, and
// returns them.
func queuedN(t *testing.T, rdb redis.UniversalClient, key string, n int) []string {
	t.Helper()
	var q []string
	redistest.Eventually(t, func() error {
		if q = queueOf(t, rdb, key); len(q) != n {
			return fmt.Errorf("%s's turn queue is %q, want %d ids", key, q, n)
		}
		return nil
	})
	return q
}

// handOver releases l and returns which of the waits obtained the key
// next, with the lock; took is how long after the release it came.
func handOver(t *testing.T, l *redlock.Lock, waits map[string]<-chan waited) (who string, next *redlock.Lock, took time.Duration) {
	t.Helper()
	start := time.Now()
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		for name, ch := range waits {
			select {
			case w := <-ch:
				if w.err != nil {
					t.Fatalf("%s: %v", name, w.err)
				}
				delete(waits, name)
				return name, w.l, time.Since(start)
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatal("no waiter obtained the key within 10s of the release")
		case <-time.After(time.Millisecond):
		}
	}
}

// fairWithin is how long a hand-over may take for the turn to be sure
// to hold: a Client whose turn does not come within turnWait (at least
// 50 ms with the default node timeout) is passed over, so a slower
// hand-over (a loaded machine) proves nothing either way.
const fairWithin = 40 * time.Millisecond

// strayOnGate puts a stray value of key on the master waiters of b ask
// first (a contender that crashed between its SET and its undo, a Release
// that never reached that master), with ttl (0: no expiry), and returns
// that master's position.
func strayOnGate(t *testing.T, b *redlock.Client, clients []redis.UniversalClient, key string, ttl time.Duration) int {
	t.Helper()
	gate := redlock.GateOf(b, key)
	if err := clients[gate].Set(context.Background(), key, "stray-owner", ttl).Err(); err != nil {
		t.Fatal(err)
	}
	return gate
}

// waitingClient starts one master, on which a Client a holds "k" for 20s,
// and a Client b over a fresh client of that master with hook added, and
// starts a waiting Obtain of "k" with b (marked and subscribed). It returns
// the test's clients, b, the waiter's channel and a cancel of its context.
func waitingClient(t *testing.T, hook *dialHook) (clients []redis.UniversalClient, b *redlock.Client, ch <-chan waited, cancel context.CancelFunc) {
	t.Helper()
	servers, clients, a := cluster(t, 1)
	rdb := pinged(t, servers[0]) // go-redis sets its options up at its first connection: see TestWaitSubscriptionSurvivesPanickingHook
	rdb.AddHook(hook)
	b, err := redlock.New([]redis.UniversalClient{rdb}, redlock.WithNodeTimeout(500*time.Millisecond), redlock.AnyClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	obtain(t, a, "k", 20*time.Second)
	wctx, cancel := context.WithCancel(t.Context())
	ch = waitFor(wctx, b, "k", 20*time.Second)
	marked(t, clients[0], "k")
	subscribed(t, clients[0])
	return clients, b, ch, cancel
}

// hookedAndPlain starts one master and returns a pinged client of it
// with the hooks added (a waiter's), and a plain one (the holders' and the
// test's).
func hookedAndPlain(t *testing.T, hooks ...redis.Hook) (hooked, plain *redis.Client) {
	t.Helper()
	servers := redistest.Start(t, 1)
	hooked = pinged(t, servers[0]) // go-redis sets its options up at its first connection
	for _, h := range hooks {
		hooked.AddHook(h)
	}
	return hooked, clientOf(t, servers[0])
}

// A herd is k Clients, each with one waiter of a key held by another.
type herd struct {
	took   time.Duration // from the release (or the holder's expiry) to the last waiter's lock
	asks   int64         // commands the masters ran meanwhile (asksOn)
	fails  int           // waiters that did not get the lock
	undone int           // Releases of tokens that never became a lock: a grant undone, the masters split
}

// drainHerd starts k Clients over 3 masters, each with one waiter of "k"
// held by another Client (for holdTTL; released at once when release is
// set, else left to expire), with, when stray, a key of another owner
// without expiry on the waiters' gate. Each waiter, once it holds the
// lock, releases it after a moment; drainHerd returns when every waiter
// did, or within.
func drainHerd(t *testing.T, k int, stray, release bool, holdTTL, within time.Duration) herd {
	t.Helper()
	servers, clients, a := cluster(t, 3)
	ctx := t.Context()
	gate := redlock.GateOf(a, "k")
	if stray {
		if err := clients[gate].Set(ctx, "k", "stray-owner", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	obtained := time.Now()
	held := obtain(t, a, "k", holdTTL)
	redistest.Eventually(t, func() error { // the holder's key on every master it can have
		for i, c := range clients {
			if (!stray || i != gate) && get(t, c, "k") == "" {
				return fmt.Errorf("master %d lacks the holder's key", i)
			}
		}
		return nil
	})
	// The holder's key expires on every master at one moment: its grants
	// land at different moments, far apart on a loaded machine, and a key
	// still held on one master after it expired on the gate would refuse
	// a waiter there, a split the herd did not make.
	for i, c := range clients {
		if !stray || i != gate {
			if err := c.PExpireAt(ctx, "k", obtained.Add(holdTTL)).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	hook := &releases{}
	var cs []*redlock.Client
	for range k {
		var own []redis.UniversalClient
		for _, s := range servers {
			rdb := clientOf(t, s)
			rdb.AddHook(hook)
			own = append(own, rdb)
		}
		cs = append(cs, newClient(t, own))
	}
	run := waitInHerd(wctx, cs, 10*time.Millisecond)
	for i, c := range clients {
		if !stray || i != gate {
			queuedN(t, c, "k", k)
		}
	}
	subscribedAll(t, clients) // every waiter asked, queued and sleeps
	before := asksOn(t, clients)
	from := obtained.Add(holdTTL)
	if release {
		from = time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fails, undone := run.wait(hook)
	h := herd{asks: asksOn(t, clients) - before, fails: fails, undone: undone}
	if fails < k {
		h.took = run.last.Sub(from)
	}
	return h
}

// A herdRun is a herd's waiters at work (waitInHerd).
type herdRun struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	locks map[string]bool // the tokens of the locks obtained
	fails int             // waiters that did not get the lock
	last  time.Time       // when the last lock was obtained
	at    []time.Time     // when each lock was obtained
}

// waitInHerd starts a waiting Obtain of "k" with each of cs, under ctx;
// each waiter, once it holds the lock, works for hold, then releases it.
func waitInHerd(ctx context.Context, cs []*redlock.Client, hold time.Duration) *herdRun {
	r := &herdRun{locks: map[string]bool{}}
	for _, c := range cs {
		r.wg.Go(func() {
			l, err := c.Obtain(ctx, "k", 20*time.Second, redlock.WithWait())
			r.mu.Lock()
			if err != nil {
				r.fails++
			} else {
				r.last = time.Now()
				r.at = append(r.at, r.last)
				r.locks[l.Token()] = true
			}
			r.mu.Unlock()
			if err == nil {
				work(hold)
				_ = l.Release(context.Background())
			}
		})
	}
	return r
}

// wait waits until every waiter is done, and returns how many did not get
// the lock, and how many of the Releases hook saw were of tokens that
// never became a lock: grants undone, the masters split.
func (r *herdRun) wait(hook *releases) (fails, undone int) {
	r.wg.Wait()
	for _, tok := range hook.get() {
		if !r.locks[tok] {
			undone++
		}
	}
	return r.fails, undone
}

// undoneBy returns how many tokens that never became a lock hook saw
// released: grants undone, on the masters hook watches.
func (r *herdRun) undoneBy(hook *releases) int {
	undone := map[string]bool{}
	for _, tok := range hook.get() {
		if !r.locks[tok] {
			undone[tok] = true
		}
	}
	return len(undone)
}

// timeline tells, from from on, when each lock was obtained and each
// Release of a token that never became a lock was sent.
func (r *herdRun) timeline(hook *releases, from time.Time) string {
	type ev struct {
		at   time.Duration
		what string
	}
	var evs []ev
	for _, at := range r.at {
		evs = append(evs, ev{at.Sub(from), "obtained"})
	}
	hook.mu.Lock()
	for i, tok := range hook.tokens {
		if !r.locks[tok] {
			evs = append(evs, ev{hook.at[i].Sub(from), "undo " + tok[:6]})
		}
	}
	hook.mu.Unlock()
	slices.SortFunc(evs, func(a, b ev) int { return cmp.Compare(a.at, b.at) })
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  %8v %s", e.at.Round(100*time.Microsecond), e.what)
	}
	return b.String()
}

// attachedHandOver is a hand-over on 4 masters: Client A, whose path to
// master 3 delays what it sends by delay, obtains the lock for an hour
// (quorum 3: Obtain returns before its request to master 3 arrives) and
// hands it to Client B, which attaches it for attachTTL. Their node
// timeouts are timeout (0: the default). It returns B, B's handle, the
// masters' direct clients, the lock's keys, and a channel closed once A's
// request to master 3 has been answered, so has landed.
func attachedHandOver(t *testing.T, set bool, delay, timeout, attachTTL time.Duration) (*redlock.Client, *redlock.Lock, []redis.UniversalClient, []string, <-chan struct{}) {
	t.Helper()
	ctx := context.Background()
	servers := redistest.Start(t, 4)
	direct := redistest.Clients(t, servers)
	viaProxy, proxies := proxied(t, servers[3:], true)
	seen := &counts{match: isLockCommand}
	viaProxy[0].AddHook(seen)
	landed := make(chan struct{})
	var armed atomic.Bool
	viaProxy[0].AddHook(cmdHook{after: func(cmds []redis.Cmder) {
		if slices.ContainsFunc(cmds, isLockCommand) && armed.CompareAndSwap(true, false) {
			close(landed) // A's request to master 3 has been answered
		}
	}})
	var opts []redlock.Option
	if timeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(timeout))
	}
	a := newClient(t, append(boundedClients(t, servers[:3]), viaProxy[0]), opts...)
	b := newClient(t, boundedClients(t, servers), opts...)
	// Both Clients hold their connections, scripts loaded: the delay
	// below holds A's connection to master 3 only.
	warm(t, a, b)
	// A's Release of "warm" on master 3 is answered: nothing of A's is in
	// flight there when the delay starts.
	redistest.Eventually(t, func() error {
		if n := seen.answered.Load(); n < 2 { // its SET, and its Release
			return fmt.Errorf("%d of A's requests to master 3 answered, want 2", n)
		}
		return nil
	})
	proxies[0].DelayOpen(delay, 0)
	armed.Store(true)
	keys := []string{"k"}
	var al, bl *redlock.Lock
	var err error
	if set {
		keys = []string{"{k}:a", "{k}:b"}
		al, err = a.ObtainMulti(ctx, keys, time.Hour)
	} else {
		al, err = a.Obtain(ctx, "k", time.Hour)
	}
	if err != nil {
		t.Fatal(err)
	}
	if set {
		bl, err = b.AttachMulti(ctx, keys, al.Token(), attachTTL, 0)
	} else {
		bl, err = b.Attach(ctx, "k", al.Token(), attachTTL, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b, bl, direct, keys, landed
}

// probeEveryForTests is the period of the subscriptions' probe, for waits here.
const probeEveryForTests = 250 * time.Millisecond

// oldWaitScript is the waitScript of the version before turn queues: it
// appends the mark "!" to a held key's value unless the value ends in one.
const oldWaitScript = `local v = redis.call('GET', KEYS[1])
if v == false then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
	return {1, 0}
end
if v == ARGV[1] or v == ARGV[1] .. '!' then
	return {1, 0}
end
if string.byte(v, -1) ~= 33 then
	redis.call('APPEND', KEYS[1], '!')
end
return {0, redis.call('PTTL', KEYS[1])}
`
