package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redistest"
)

// The rule of a master not answering (internal/wire/lane.go), on real servers:
// a master that answers late, or a call whose timeout is shorter than the
// master's round trip, must not make a healthy master refuse the calls that
// follow.

// TestSlowBatchDoesNotFailTheNextObtainAtOnce: writes to three masters
// are slowed (500ms, over twice the 200ms node timeout) for one Extend and
// one Release, which both time out; the Release waits in each lane behind
// the Extend. Right after, on connections fast again, an Obtain with a 60s
// context finds each lane still waiting for the Extend's answer, past
// twice its timeout. The answer comes before the Obtain's own deadline:
// the Obtain waits for it and is granted, rather than failing at once on
// every master; and the Release that could not be sent in time is kept
// and sent, not lost.
func TestSlowBatchDoesNotFailTheNextObtainAtOnce(t *testing.T) {
	const (
		timeout = 200 * time.Millisecond
		delay   = 500 * time.Millisecond // between twice and three times the timeout
	)
	ctx := context.Background()
	proxies, clients := proxied(t, 3)
	c := newClient(t, clients, WithNodeTimeout(timeout))
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil { // scripts loaded
		t.Fatal(err)
	}
	for _, p := range proxies {
		p.DelayOpen(delay, 0)
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Extend with writes slowed past its node timeout: %v, want ErrUnavailable", err)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Release with writes slowed past its node timeout: %v, want ErrUnavailable", err)
	}
	for _, p := range proxies {
		p.DelayOpen(0, 0)
	}
	octx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	start := time.Now()
	l2, err := c.Obtain(octx, "k2", time.Minute)
	if err != nil {
		t.Fatalf("Obtain with a 60s context, on masters that answer the batch before them within its node timeout: failed after %v: %v",
			time.Since(start).Round(time.Millisecond), err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		for i, rdb := range clients {
			if v := rdb.Get(ctx, "k").Val(); v != "" {
				return fmt.Errorf("master %d still holds the released lock's key: the Release kept for it was not sent", i)
			}
		}
		return nil
	})
}

// TestShortTimeoutCallDoesNotMarkAHealthyMaster: a call with a 23ms TTL
// (node timeout 20ms, the floor) on a master 100ms away times out long before its
// request is answered. That master is healthy: a WaitReleased right after
// (its node timeout 500ms) waits for the lane and gets its answer, rather
// than being told at once that the master does not answer; and one whose
// context was cancelled reports the cancellation, not a timeout.
func TestShortTimeoutCallDoesNotMarkAHealthyMaster(t *testing.T) {
	ctx := context.Background()
	proxies, clients := proxied(t, 1)
	c := newClient(t, clients)
	l, err := c.Obtain(ctx, "warm", time.Minute) // the lane has its connection
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReleased(ctx, "warm"); err != nil { // the waker has its subscriptions
		t.Fatal(err)
	}
	proxies[0].DelayOpen(100*time.Millisecond, 0)
	if _, err := c.Obtain(ctx, "k", 23*time.Millisecond); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Obtain with a 23ms TTL on a master 100ms away: %v, want ErrUnavailable", err)
	}
	time.Sleep(45 * time.Millisecond) // its request is out for more than twice its 20ms
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.WaitReleased(cctx, "k"); !errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReleased with a cancelled context: %v, want an error matching context.Canceled and not DeadlineExceeded", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.WaitReleased(wctx, "k"); err != nil {
		t.Fatalf("WaitReleased on a healthy master 100ms away, after a call with a 20ms timeout: failed after %v: %v",
			time.Since(start).Round(time.Millisecond), err)
	}
}
