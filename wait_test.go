package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// waitFor runs a WithWait Obtain of key in the background; the channel
// gets its outcome and how long it took.
type waited struct {
	l    *redlock.Lock
	err  error
	took time.Duration
}

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
	held, err := a.Obtain(t.Context(), "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return held, waitFor(t.Context(), b, "k", 20*time.Second)
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

// heldOnAll holds "k" for 20s with a and waits until every master has
// the key (Obtain returns at a quorum).
func heldOnAll(t *testing.T, a *redlock.Client, clients []redis.UniversalClient) *redlock.Lock {
	t.Helper()
	held, err := a.Obtain(t.Context(), "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		if hs := holdersOf(t, clients, "k"); slices.Contains(hs, "") {
			return fmt.Errorf("holders %q", hs)
		}
		return nil
	})
	return held
}

// scriptsRun counts the scripts the masters ran (EVALSHA and EVAL): a
// waiting Obtain's asks and the releases.
func scriptsRun(t *testing.T, masters ...redis.UniversalClient) (n int64) {
	t.Helper()
	for _, m := range masters {
		n += calls(t, m, "evalsha") + calls(t, m, "eval")
	}
	return n
}

// subscribed waits until a Client subscribes to the master's wake channel.
func subscribed(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	redistest.Eventually(t, func() error {
		n, err := rdb.PubSubNumSub(context.Background(), "redlock:wake").Result()
		if err != nil || n["redlock:wake"] == 0 {
			return fmt.Errorf("nobody subscribed to redlock:wake (%v)", err)
		}
		return nil
	})
}

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

// TestWaitWokenByRelease: a waiter is woken by the release, not by its
// timer (the holder's TTL is 20s), over one master and over three.
func TestWaitWokenByRelease(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(map[int]string{1: "one master", 3: "three masters"}[n], func(t *testing.T) {
			_, clients, a := cluster(t, n)
			b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
			ctx := t.Context()
			held, ch := holdAndWait(t, a, b)
			marked(t, clients[0], "k")
			released := time.Now()
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			w := outcome(t, ch, 5*time.Second)
			if w.err != nil {
				t.Fatalf("waiting Obtain: %v", w.err)
			}
			if d := time.Since(released); d > time.Second {
				t.Errorf("obtained %v after the release, want it woken at once", d)
			}
			if err := w.l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWaitLostNotification: a key deleted behind the library's back (no
// release, so no wake-up) costs a waiter at most the key's remaining TTL.
func TestWaitLostNotification(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	if _, err := a.Obtain(ctx, "k", 800*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ch := waitFor(ctx, b, "k", time.Second)
	marked(t, clients[0], "k")
	clients[0].Del(ctx, "k") // gone without a word
	w := outcome(t, ch, 5*time.Second)
	if w.err != nil {
		t.Fatalf("waiting Obtain: %v", w.err)
	}
	if w.took > 1500*time.Millisecond {
		t.Errorf("obtained after %v, want within the holder's TTL (800ms) and a little", w.took)
	}
}

// TestWaitSubscriptionKilled: the subscription connection killed while a
// waiter waits; the release right after is published to nobody. The
// re-established subscription makes the waiter ask again, long before the
// holder's 20s TTL.
func TestWaitSubscriptionKilled(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	held, ch := holdAndWait(t, a, b)
	marked(t, clients[0], "k")
	subscribed(t, clients[0])
	// An ask made before the subscription was confirmed is followed by
	// another within a node timeout (500ms here); after that one the
	// waiter relies on the wake-up and sleeps on the 20s TTL.
	time.Sleep(700 * time.Millisecond)
	if err := clients[0].ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := outcome(t, ch, 10*time.Second)
	if w.err != nil {
		t.Fatalf("waiting Obtain: %v", w.err)
	}
	if w.took > 3*time.Second {
		t.Errorf("obtained after %v, want soon after the subscription came back", w.took)
	}
}

// TestWaitSubscriptionSurvivesPanickingHook: a go-redis dial hook that
// panics while the subscription is made is a lost subscription, not a
// crash: once the hook stops panicking, the subscription is made again
// within its bounded retry delay, and the release wakes the waiter long
// before the holder's 20s TTL.
func TestWaitSubscriptionSurvivesPanickingHook(t *testing.T) {
	servers, clients, a := cluster(t, 1)
	rdb := servers[0].Client()
	t.Cleanup(func() { rdb.Close() })
	// A first connection before the hook panics: go-redis's first one
	// turns its maintenance notifications off (Redis < 8) under a lock
	// its PubSub's option clone does not take, a race of go-redis's own.
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	hook := &dialPanics{}
	rdb.AddHook(hook)
	hook.armed.Store(true)
	b := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(200*time.Millisecond))
	ctx := t.Context()
	held, ch := holdAndWait(t, a, b)
	time.Sleep(600 * time.Millisecond) // several subscriptions panic meanwhile
	hook.armed.Store(false)
	marked(t, clients[0], "k")
	subscribed(t, clients[0])
	time.Sleep(700 * time.Millisecond) // the waiter relies on the wake-up
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wokenBy(t, ch, released, 3*time.Second).Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWaitFirstComeFirstServedInClient: the waiters of one Client get the
// lock in the order they began to wait.
func TestWaitFirstComeFirstServedInClient(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
	ctx := t.Context()
	held, err := a.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			l, err := b.Obtain(ctx, "k", 20*time.Second, redlock.WithWait())
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		})
		if i == 0 {
			marked(t, clients[0], "k")
		}
		time.Sleep(20 * time.Millisecond) // in the queue before the next
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !slices.Equal(order, []int{0, 1, 2, 3, 4}) {
		t.Errorf("obtained in order %v, want [0 1 2 3 4]", order)
	}
}

// TestWaitNothingReserved: a release keeps nothing for the waiters. A
// waiter marks the key, then its Client closes; a try-once Obtain is
// refused while the key is held and takes it at once after the release.
func TestWaitNothingReserved(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	held, ch := holdAndWait(t, a, b)
	marked(t, clients[0], "k")
	if _, err := a.Obtain(ctx, "k", time.Second); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("try-once Obtain of a held key waited for: %v, want ErrTaken", err)
	}
	b.Close()
	if w := outcome(t, ch, 5*time.Second); !errors.Is(w.err, redlock.ErrClosed) {
		t.Fatalf("waiter after Close: %v, want ErrClosed", w.err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Obtain(ctx, "k", time.Second); err != nil {
		t.Fatalf("try-once Obtain right after the release: %v, want the lock", err)
	}
}

// TestWaitUncontendedReleaseIsBare: a lock nobody waited for is released
// with the same commands as without waiting (GET and DEL in the script,
// no PUBLISH), and its key holds the bare token; a lock waited for is
// announced once.
func TestWaitUncontendedReleaseIsBare(t *testing.T) {
	_, clients, a := cluster(t, 1)
	ctx := t.Context()
	pubs := func() int64 { return calls(t, clients[0], "publish") }
	before := pubs()
	l, err := a.Obtain(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, clients[0], "k"); got != l.Token() {
		t.Errorf("an uncontended key holds %q, want the bare token %q", got, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := pubs() - before; n != 0 {
		t.Errorf("an uncontended release published %d times, want 0", n)
	}
	held, err := a.Obtain(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b := newClient(t, clients)
	ch := waitFor(ctx, b, "k", 10*time.Second)
	marked(t, clients[0], "k")
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if w := outcome(t, ch, 5*time.Second); w.err != nil {
		t.Fatal(w.err)
	}
	if n := pubs() - before; n != 1 {
		t.Errorf("a release waited for published %d times, want 1", n)
	}
}

// TestWaitQuorumOfWakes: over three masters, a waiter refused by all three
// asks again only once two of them announced a release (one more refusal
// would rule out the quorum), not at the first announcement.
func TestWaitQuorumOfWakes(t *testing.T) {
	_, clients, a := cluster(t, 3)
	b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
	ctx := t.Context()
	held := heldOnAll(t, a, clients)
	ch := waitFor(ctx, b, "k", 20*time.Second)
	for _, m := range clients {
		marked(t, m, "k")
		subscribed(t, m)
	}
	time.Sleep(100 * time.Millisecond) // the ask at the subscriptions' confirmation
	asks := func() int64 { return scriptsRun(t, clients...) }
	before := asks()
	// A master other than the gate announces a release (the key stays held
	// on the other two): a waiter refused at the gate alone, at the ask
	// that followed its subscriptions' confirmation, rightly asks again at
	// the gate's announcement.
	other := (redlock.GateOf(b, "k") + 1) % len(clients)
	if err := clients[other].Publish(ctx, "redlock:wake", "k").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := asks() - before; n != 0 {
		t.Fatalf("the waiter asked the masters %d times after one announcement of three", n)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := outcome(t, ch, 5*time.Second)
	if w.err != nil {
		t.Fatal(w.err)
	}
	w.l.Release(ctx)
}

// TestWaitClose: Close ends a wait at once with ErrClosed (and TestMain's
// goleak finds no goroutine left).
func TestWaitClose(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := a.Obtain(ctx, "k", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ch := waitFor(ctx, b, "k", 20*time.Second)
	watch := make(chan error, 1)
	go func() { watch <- b.WaitReleased(ctx, "k") }()
	marked(t, clients[0], "k")
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	w := outcome(t, ch, 5*time.Second)
	if !errors.Is(w.err, redlock.ErrClosed) {
		t.Errorf("waiting Obtain after Close: %v, want ErrClosed", w.err)
	}
	if err := <-watch; !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("WaitReleased after Close: %v, want ErrClosed", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v with waiters", d)
	}
}

// TestWaitReleased: it returns at once for a free key, at the release for
// a held one (not at its 20s TTL), and with ctx's cause when ctx ends.
func TestWaitReleased(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	if err := b.WaitReleased(ctx, "free"); err != nil {
		t.Fatalf("free key: %v", err)
	}
	held, err := a.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := b.WaitReleased(short, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held key, short ctx: %v, want DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() { done <- b.WaitReleased(ctx, "k") }()
	marked(t, clients[0], "k")
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("WaitReleased returned %v while the key is held", err)
	default:
	}
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(released); d > time.Second {
			t.Errorf("returned %v after the release", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitReleased did not return after the release")
	}
}

// TestWaitReleasedOnAFreeKeyAtEveryMasterCount: WaitReleased of a key no
// master holds returns nil at once whatever the number of masters; at an
// even count a round stops at N - quorum + 1 "absent" answers, one short
// of the quorum WaitReleased needs, and must hear the rest.
func TestWaitReleasedOnAFreeKeyAtEveryMasterCount(t *testing.T) {
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			_, _, c := cluster(t, n)
			for range 5 {
				if err := c.WaitReleased(t.Context(), "free"); err != nil {
					t.Fatalf("free key: %v", err)
				}
			}
		})
	}
}

// TestWaitNoHerd: 24 waiters of one key over 3 Clients, each holding 1ms:
// a release gives the turn to one Client, whose waiter alone asks, so the
// masters see about two requests per hand-over, the release and one
// acquire (a herd would send one per waiter; one per Client, without turns,
// was over four).
func TestWaitNoHerd(t *testing.T) {
	_, clients, _ := cluster(t, 1)
	ctx := t.Context()
	var cs []*redlock.Client
	for range 3 {
		cs = append(cs, newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond)))
	}
	// Warm the subscriptions, so the first attempts already queue.
	for _, c := range cs {
		l, err := c.Obtain(ctx, "k", 10*time.Second, redlock.WithWait())
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
	}
	// Queued attempts and releases are scripts; a SET would count the
	// scripts' own SETs too.
	requests := func() int64 { return scriptsRun(t, clients[0]) }
	before := requests()
	const waiters = 24
	var wg sync.WaitGroup
	for i := range waiters {
		c := cs[i%len(cs)]
		wg.Go(func() {
			l, err := c.Obtain(ctx, "k", 10*time.Second, redlock.WithWait())
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
			l.Release(ctx)
		})
	}
	wg.Wait()
	n := requests() - before
	// Per hand-over: the release, one ask per Client woken (3), and the
	// ask of the winner's next waiter, which finds the key held.
	if per := float64(n) / waiters; per > 3 {
		t.Errorf("%d scripts run for %d hand-overs: %.1f each, want at most 3", n, waiters, per)
	}
}

func TestWaitOptionChecks(t *testing.T) {
	_, _, c := cluster(t, 1)
	ctx := t.Context()
	if _, err := c.Obtain(ctx, "k", time.Second, redlock.WithWait(), redlock.WithRetry(redlock.LinearBackoff(time.Millisecond))); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("WithWait and WithRetry: %v, want ErrInvalidArgument", err)
	}
	l, err := c.Obtain(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.KeepAlive(ctx, redlock.WithWait()); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("KeepAlive WithWait: %v, want ErrInvalidArgument", err)
	}
}

// TestWaitOnRedisCluster: on a Redis Cluster master a waiter marks the
// key, and the release announces it on the key's own sharded channel
// (SPUBLISH, in the key's slot); the waiter is woken by it, not by the
// holder's 20s TTL, for keys on every shard, and for a key of a set.
func TestWaitOnRedisCluster(t *testing.T) {
	rc := startCluster(t, 3)
	ctx := t.Context()
	var cs []*redlock.Client
	for range 2 {
		cc := rc.Client()
		t.Cleanup(func() { cc.Close() })
		c, err := redlock.NewSingle(cc, redlock.WithKeyPrefix("lock:"), redlock.WithNodeTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	// woken checks that a waiter of key k marks it, and that release,
	// once the waiter is subscribed, wakes it.
	woken := func(k string, release func(context.Context) error) {
		t.Helper()
		ch := waitFor(ctx, cs[1], k, 20*time.Second)
		cc := rc.Client()
		defer cc.Close()
		redistest.Eventually(t, func() error {
			if v := get(t, cc, "lock:"+k); !strings.Contains(v, "!") {
				return fmt.Errorf("%s holds %q, not marked", k, v)
			}
			n, err := cc.PubSubShardNumSub(ctx, "lock:"+k).Result()
			if err != nil || n["lock:"+k] == 0 {
				return fmt.Errorf("nobody subscribed to %s (%v)", k, err)
			}
			return nil
		})
		released := time.Now()
		if err := release(ctx); err != nil {
			t.Fatalf("%s: release of a marked key: %v", k, err)
		}
		wokenBy(t, ch, released, time.Second).Release(ctx)
	}
	for _, k := range []string{"a", "b", "c", "user:{42}"} {
		held, err := cs[0].Obtain(ctx, k, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		woken(k, held.Release)
	}
	// A key held by a set (one slot: one hash tag) is announced the same
	// way by the set's Release.
	set, err := cs[0].ObtainMulti(ctx, []string{"{s}:a", "{s}:b"}, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	woken("{s}:b", set.Release)
}
