package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/wake"
)

// The probe: a subscription the master lost without a word (a failover,
// a silent cut) is found through a fresh connection and made again; one
// whose confirmation never comes is made again too.

// TestWatchdogHearsARestartBehindASilentCut: the Client's connections to
// a master go dark (every packet dropped, nothing closed, as behind a
// partition) while the master restarts empty and another Client takes the
// key. The subscription's connection never breaks, so only the probe,
// through a fresh connection, finds it missing on the master; the
// subscription is made again, counts as a reset, and the watchdog renews,
// is refused, and tells the work within a few seconds, not at its next
// renewal 10s later.
func TestWatchdogHearsARestartBehindASilentCut(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 1)
	server := servers[0]
	through, proxies := proxied(t, servers, true)
	proxy := proxies[0]
	a := newClient(t, through, redlock.WithNodeTimeout(200*time.Millisecond))
	direct := clientOf(t, server)
	b := newClient(t, []redis.UniversalClient{direct})
	_, wctx := holdWithWatchdog(t, a, "k")
	subscribed(t, direct)
	proxy.Silence()
	if err := server.Restart(false); err != nil {
		t.Fatal(err)
	}
	lb := obtain(t, b, "k", 30*time.Second)
	t.Cleanup(func() { lb.Release(context.Background()) })
	toldWithin(t, wctx, time.Now(), 3*time.Second)
}

// TestWatchdogHearsARestartWhenTheSubscriptionsConfirmationIsLost: the
// master runs the Client's SUBSCRIBE, and the connection goes dark before
// the Client reads the confirmation (every packet dropped, nothing closed);
// the master then restarts empty and another Client takes the key. The
// probe looks only at confirmed subscriptions, and the read of the
// confirmation would wait on the dark connection until TCP gives up: a
// subscription unconfirmed for its bound (4 probe periods) counts as
// broken instead. It is made again on a fresh connection, its confirmation
// counts as a reset, and the watchdog renews, is refused, and tells the
// work within a few probe periods, not at its next renewal 10s later.
func TestWatchdogHearsARestartWhenTheSubscriptionsConfirmationIsLost(t *testing.T) {
	t.Parallel()
	watchdogHearsALostConfirmation(t, wake.WakeChannel)
}

// TestWatchdogHearsARestartWhenTheProbeChannelsConfirmationIsLost: as
// TestWatchdogHearsARestartWhenTheSubscriptionsConfirmationIsLost, with the
// wake channel's confirmation read and the Client's own channel's lost:
// the subscription is confirmed, but the probe cannot find it (it looks
// for the Client's own channel) and does not look. It is broken too.
func TestWatchdogHearsARestartWhenTheProbeChannelsConfirmationIsLost(t *testing.T) {
	t.Parallel()
	watchdogHearsALostConfirmation(t, wake.WakeChannel+":")
}

// watchdogHearsALostConfirmation holds a lock with a watchdog through a
// proxy that goes dark where the master's answer names channel (the first
// such answer is the subscription's confirmation), restarts the master
// once it holds the subscription, has another Client take the key, and
// checks that the watchdog tells the work within a few probe periods: the
// confirmation's bound (4), a retry, the confirmation again and a renewal
// (1 each), doubled for a loaded machine; its next renewal is 10s away.
func watchdogHearsALostConfirmation(t *testing.T, channel string) {
	t.Helper()
	servers := redistest.Start(t, 1)
	server := servers[0]
	through, proxies := proxied(t, servers, true)
	proxies[0].SilenceAt(channel)
	a := newClient(t, through, redlock.WithNodeTimeout(200*time.Millisecond))
	direct := clientOf(t, server)
	b := newClient(t, []redis.UniversalClient{direct})
	_, wctx := holdWithWatchdog(t, a, "k")
	subscribed(t, direct) // the master ran the SUBSCRIBE; its answer is lost
	if err := server.Restart(false); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	lb := obtain(t, b, "k", 30*time.Second)
	t.Cleanup(func() { lb.Release(context.Background()) })
	toldWithin(t, wctx, restarted, 2*(4+3)*probeEveryForTests)
}

// TestProbeChannelRefusedKeepsWaiting: a user allowed the wake channel but
// not the Client's own channel (an ACL that names channels) keeps its
// subscription and is woken by releases as before; only the probe is off.
func TestProbeChannelRefusedKeepsWaiting(t *testing.T) {
	t.Parallel()
	servers, clients, a := cluster(t, 1)
	ctx := t.Context()
	narrow := aclUser(t, servers[0], "narrow", []string{"~*", "resetchannels", "&redlock:wake", "+@all"}, func(o *redis.Options) { o.ContextTimeoutEnabled = false })
	b := newClient(t, []redis.UniversalClient{narrow})
	held, ch := holdAndWait(t, a, b)
	marked(t, clients[0], "k")
	subscribed(t, clients[0])
	time.Sleep(2 * probeEveryForTests) // probes would have run: they are off
	wakes(t, held, ch, time.Second).Release(ctx)
}

// TestProbeBacksOffWhenTheMasterKeepsAnsweringZero: a master that always
// answers that the subscription is missing does not get it made again at
// every probe (4 a second), nor the watchdogs renewed once a second: the
// probe asks ever less often.
func TestProbeBacksOffWhenTheMasterKeepsAnsweringZero(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 1)
	rdb := clientOf(t, servers[0])
	rdb.AddHook(zeroNumSub{})
	c := newClient(t, []redis.UniversalClient{rdb})
	direct := clientOf(t, servers[0])
	holdWithWatchdog(t, c, "k")
	subscribed(t, direct)
	before := calls(t, direct, "subscribe")
	never(t, 3*time.Second, func() error { // the probes of three seconds
		if n := calls(t, direct, "subscribe") - before; n > 8 { // 2 commands a subscription
			return fmt.Errorf("the subscription was made %d times within 3s (%d SUBSCRIBE), want the probe to back off", n/2, n)
		}
		return nil
	})
}

// TestCloseReturnsWhenAProbeMeetsAPanickingReconnect: a subscription's
// connection breaks and go-redis dials again inside Receive, under the
// PubSub's own mutex; the dial hook is slow, then panics, which leaves that
// mutex locked for good (such a PubSub is dropped, never closed). While
// that dial runs, the subscription is still confirmed, and the probe finds
// the Client's own channel gone from the master (its connection was
// killed): it must not close that PubSub and wait on its mutex for ever,
// holding Close with it. Run in a child process: the Close of that PubSub
// stays blocked on its mutex (the go-redis hook's panic left it locked), a
// goroutine goleak would rightly report.
func TestCloseReturnsWhenAProbeMeetsAPanickingReconnect(t *testing.T) {
	t.Parallel()
	if os.Getenv("REDLOCK_TEST_CHILD") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCloseReturnsWhenAProbeMeetsAPanickingReconnect$", "-test.count=1")
		cmd.Env = append(os.Environ(), "REDLOCK_TEST_CHILD=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("child: %v\n%s", err, out)
		}
		return
	}
	hook := &dialHook{}
	clients, b, ch, cancel := waitingClient(t, hook)
	defer cancel()
	probes := calls(t, clients[0], "pubsub|numsub")
	redistest.Eventually(t, func() error { // the probe has run, its connection is pooled
		if calls(t, clients[0], "pubsub|numsub") == probes {
			return errors.New("no probe yet")
		}
		return nil
	})
	var dials atomic.Int32
	var panicked atomic.Bool
	hook.set(func() {
		if dials.Add(1) == 1 { // the PubSub's dial again, inside Receive
			time.Sleep(4 * probeEveryForTests) // the probe runs meanwhile
			panicked.Store(true)
			dialPanics()
		}
	})
	cutSubscriptions(t, clients[0])
	redistest.Eventually(t, func() error {
		if !panicked.Load() {
			return errors.New("the dial has not panicked yet")
		}
		return nil
	})
	hook.set(nil)
	closed := make(chan struct{})
	go func() {
		b.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<20)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "(*waker)") {
				t.Logf("%s", g)
			}
		}
		t.Fatal("Close hangs: the probe closed a PubSub whose reconnect panicked under its mutex")
	}
	if w := outcome(t, ch, 5*time.Second); !errors.Is(w.err, redlock.ErrClosed) {
		t.Errorf("waiting Obtain after Close: %v, want ErrClosed", w.err)
	}
}
