package redlock

import (
	"context"
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

// TestWatchdogFoldsResetSignals: a subscription that flaps (here about 400
// resets in half a second) renews a watchdog's lock at most once per
// resetGap, the resets in between folded into one renewal at the gap's
// end, not once per reset.
func TestWatchdogFoldsResetSignals(t *testing.T) {
	rdb := redistest.Start(t, 1)[0].Client()
	t.Cleanup(func() { rdb.Close() })
	h := &scriptCounter{}
	rdb.AddHook(h)
	c := newClient(t, []redis.UniversalClient{rdb}, WithNodeTimeout(500*time.Millisecond))
	ctx := t.Context()
	l, err := c.Obtain(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, stop, err := l.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
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
