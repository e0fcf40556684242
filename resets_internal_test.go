package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// scriptCounter counts the scripts a client sends (EVALSHA and EVAL).
type scriptCounter struct{ n atomic.Int64 }

func (h *scriptCounter) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if n := c.Name(); n == "evalsha" || n == "eval" {
			h.n.Add(1)
		}
	}
}

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// watched holds "k" for ttl on one master, whose client has hook, under a
// watchdog that runs until the test ends.
func watched(t *testing.T, hook redis.Hook, ttl, nodeTimeout time.Duration) (*Client, *Lock) {
	t.Helper()
	rdb := redistest.Start(t, 1)[0].Client()
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(hook)
	c := newClient(t, []redis.UniversalClient{rdb}, WithNodeTimeout(nodeTimeout))
	l, err := c.Obtain(t.Context(), "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	_, stop, err := l.KeepAlive(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return c, l
}

// TestWatchdogFoldsResetSignals: a subscription that flaps (here about 400
// resets in half a second) renews a watchdog's lock at most once per
// resetGap, the resets in between folded into one renewal at the gap's
// end, not once per reset.
func TestWatchdogFoldsResetSignals(t *testing.T) {
	h := &scriptCounter{}
	c, l := watched(t, h, 30*time.Second, 500*time.Millisecond)
	before := h.n.Load()
	start := time.Now()
	for time.Since(start) < 10*resetGap {
		c.masterReset()
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	time.Sleep(3 * resetGap) // the renewal folded into the last gap's end
	n := h.n.Load() - before
	if most := int64(elapsed/resetGap) + 2; n < 2 || n > most {
		t.Errorf("%d renewals over %v of resets, want from 2 to %d: one per %v, not one per reset",
			n, elapsed.Round(time.Millisecond), most, resetGap)
	}
	if v := l.Validity(); v < 25*time.Second {
		t.Errorf("validity %v after the renewals, want them to have renewed the 30s TTL", v)
	}
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
		if n := c.Name(); n == "evalsha" || n == "eval" {
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

// TestWatchdogResetRetryNoSlowerThanARenewalsRetry: a renewal
// owed to a reset that fails is retried within 4 x resetGap (200ms); a
// renewal that fails otherwise is retried every/4 later. With a short TTL
// (600ms, renewals every 200ms: retries every 51ms) the reset's retries
// must not be slower than the watchdog's own: fewer would fit before the
// validity ends, and the reset would make the watchdog worse at keeping
// the lock through a short outage.
func TestWatchdogResetRetryNoSlowerThanARenewalsRetry(t *testing.T) {
	h := &failHook{}
	c, _ := watched(t, h, 600*time.Millisecond, 100*time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	h.on.Store(true)
	c.masterReset()
	time.Sleep(300 * time.Millisecond)
	h.on.Store(false)
	if n := h.n.Load(); n < 4 {
		t.Errorf("%d renewal attempts in the 300ms after a reset whose renewal failed, want at least 4 (a failed renewal's retry is every/4 = 51ms; the reset's, 200ms)", n)
	}
}
