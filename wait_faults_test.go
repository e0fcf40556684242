package redlock_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// dialPanics is a go-redis hook whose dial panics once armed.
type dialPanics struct{ armed atomic.Bool }

func (h *dialPanics) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.armed.Load() {
			panic("dial hook panics")
		}
		return next(ctx, network, addr)
	}
}
func (h *dialPanics) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *dialPanics) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestWaitSurvivesAPanickingDialHook: a go-redis hook that
// panics while the library sends fails its requests and nothing else
// (TestPanickingHookFailsItsBatchOnly, TestLaneSurvivesTransportPanic,
// TestPanickingHookOnAColdClusterDoesNotPanicTheCaller). The subscription
// of a waiting Obtain dials on its own goroutine (waker.run: PubSub
// Subscribe/Receive, through the client's dial hook); a panic there is
// recovered and counts as a lost subscription, never as the end of the
// process. Run in a child process: an unrecovered panic would take the
// test binary with it.
func TestWaitSurvivesAPanickingDialHook(t *testing.T) {
	if os.Getenv("REDLOCK_TEST_CHILD") == "1" {
		panickingDialHookChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWaitSurvivesAPanickingDialHook$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REDLOCK_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tail := out
		if len(tail) > 1500 {
			tail = tail[:1500]
		}
		t.Errorf("a waiting Obtain through a panicking dial hook crashed the process (%v):\n%s", err, tail)
	}
}

func panickingDialHookChild(t *testing.T) {
	servers := redistest.Start(t, 1)
	holder := servers[0].Client()
	defer holder.Close()
	rdb := servers[0].Client()
	defer rdb.Close()
	hook := &dialPanics{}
	rdb.AddHook(hook)
	a, err := redlock.NewSingle(holder)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redlock.NewSingle(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if _, err := a.Obtain(ctx, "k", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	hook.armed.Store(true)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("Obtain panicked: %v", p)
			}
		}()
		_, err = b.Obtain(wctx, "k", 5*time.Second, redlock.WithWait())
	}()
	if err == nil || !errors.Is(err, redlock.ErrNotObtained) {
		t.Logf("waiting Obtain: %v", err)
	}
	hook.armed.Store(false)
}

// TestWaitReleasedWaitsOutAHoldAtLeast: WaitReleased returns once the key
// is free on a quorum. keepScript (the early Release of a WithHoldAtLeast
// lock) announces the release of a marked key but keeps the key for the
// rest of the minimum hold; a wait that trusted the announcement would
// return while the key is still held on every master, and an Obtain made
// right after it would be refused for the rest of the hold. Every wake-up
// is followed by a look at the key.
func TestWaitReleasedWaitsOutAHoldAtLeast(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	l, err := a.Obtain(ctx, "k", 20*time.Second, redlock.WithHoldAtLeast(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	watch := make(chan error, 1)
	go func() { watch <- b.WaitReleased(ctx, "k") }()
	marked(t, clients[0], "k")
	subscribed(t, clients[0])
	time.Sleep(100 * time.Millisecond) // the subscription confirmed
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-watch:
		if err != nil {
			t.Fatalf("WaitReleased: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitReleased did not return")
	}
	st, err := b.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if tok, n := st.Holder(); n >= st.Quorum {
		t.Errorf("WaitReleased returned nil while %q still holds k on %d of %d masters for %v", tok, n, len(st.Masters), st.Masters[0].TTL)
	}
	if l2, err := b.Obtain(ctx, "k", time.Second); err == nil {
		l2.Release(ctx)
	} else {
		t.Errorf("Obtain right after WaitReleased returned: %v", err)
	}
}

// TestAttachRefusesAMarkedToken: Attach confirms a lock held under token.
// Every ownership script takes a key whose value is ARGV[1] or ARGV[1].."!"
// as ours, so once a waiter marked the key (value T!), a handle attached
// with T+"!" would match the value itself: its Release would delete the key
// without the announcement (the waiter that marked it sleeps to the
// holder's TTL), and a key it re-took would read "T!", which the real
// holder's handle matches as marked. A token with the mark is refused.
func TestAttachRefusesAMarkedToken(t *testing.T) {
	_, clients, a := cluster(t, 1)
	b := newClient(t, clients)
	ctx := t.Context()
	l, err := a.Obtain(ctx, "k", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := waitFor(wctx, b, "k", 20*time.Second)
	marked(t, clients[0], "k")
	bogus, err := a.Attach(ctx, "k", l.Token()+"!", 20*time.Second, 0)
	if err == nil {
		t.Errorf("Attach with token %q (the holder's is %q) confirmed the lock", bogus.Token(), l.Token())
		start := time.Now()
		if err := bogus.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case w := <-ch:
			if w.err == nil {
				w.l.Release(ctx)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("the bogus handle's Release deleted k unannounced: the waiter still sleeps %v later", time.Since(start).Round(time.Millisecond))
		}
	} else if !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("Attach with the marked value as token: %v, want ErrLockLost", err)
	}
	cancel()
	<-ch
}
