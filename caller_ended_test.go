package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// A call its caller's context or Close ended is not an outage: it matches
// ErrNotObtained (an Obtain) and what ended it, never ErrUnavailable, which
// says the masters failed to answer.

// callerEnded checks err is a call that its caller ended with want.
func callerEnded(t *testing.T, what string, err, want error, text string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if !errors.Is(err, want) || errors.Is(err, redlock.ErrUnavailable) || errors.Is(err, redlock.ErrTaken) {
		t.Errorf("%s: %v; want it to match %v, not ErrUnavailable, not ErrTaken", what, err, want)
	}
	if !strings.Contains(err.Error(), text) {
		t.Errorf("%s: %q does not say %q", what, err, text)
	}
}

// TestCancelledObtainIsNotAnOutage: Obtain, Do, WithWait, Extend, Release
// and WaitReleased with a cancelled context say the caller ended them, and
// match its cause and context.Canceled, not ErrUnavailable.
func TestCancelledObtainIsNotAnOutage(t *testing.T) {
	t.Parallel()
	_, _, c := cluster(t, 3)
	held := obtain(t, c, "held", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Obtain(ctx, "k", time.Minute)
	callerEnded(t, "Obtain", err, context.Canceled, "ended by the caller: context canceled")
	if !errors.Is(err, redlock.ErrNotObtained) {
		t.Errorf("Obtain: %v, want ErrNotObtained", err)
	}
	t.Logf("Obtain: %v", err)
	err = c.Do(ctx, "k", time.Minute, func(context.Context) error { return nil })
	callerEnded(t, "Do", err, context.Canceled, "ended by the caller")
	_, err = c.Obtain(ctx, "k", time.Minute, redlock.WithWait())
	callerEnded(t, "Obtain WithWait", err, context.Canceled, "context canceled")
	err = held.Extend(ctx, time.Minute)
	callerEnded(t, "Extend", err, context.Canceled, "ended by the caller")
	err = c.WaitReleased(ctx, "held")
	callerEnded(t, "WaitReleased", err, context.Canceled, "context canceled")
	err = held.Release(ctx)
	callerEnded(t, "Release", err, context.Canceled, "ended by the caller")

	why := errors.New("shutting down")
	cctx, ccancel := context.WithCancelCause(context.Background())
	ccancel(why)
	_, err = c.Obtain(cctx, "k", time.Minute)
	callerEnded(t, "Obtain with a cause", err, why, "ended by the caller: shutting down")
	callerEnded(t, "Obtain with a cause", err, context.Canceled, "shutting down")
}

// TestCallerDeadlineShorterThanTheNodeTimeoutIsTheCallers: a caller's
// deadline that ends before the node timeout while masters are silent
// (frozen) or refuse connections ends the call as the caller's, not as an
// outage; the refused masters are still named with their cause.
func TestCallerDeadlineShorterThanTheNodeTimeoutIsTheCallers(t *testing.T) {
	t.Parallel()
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(2*time.Second))
	warm(t, c)
	if err := servers[1].Stop(); err != nil {
		t.Fatal(err)
	}
	if err := servers[2].Stop(); err != nil {
		t.Fatal(err)
	}
	defer servers[1].Cont()
	defer servers[2].Cont()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Obtain(ctx, "frozen", time.Minute)
	callerEnded(t, "Obtain, frozen masters", err, context.DeadlineExceeded, "ended by the caller: context deadline exceeded")
	t.Logf("frozen: %v", err)

	s := redistest.Start(t, 1)[0]
	down1, down2 := refusedAddr(t), refusedAddr(t)
	r := newClient(t, []redis.UniversalClient{pinged(t, s, bounded), refusedClient(t, s, down1), refusedClient(t, s, down2)},
		redlock.WithNodeTimeout(2*time.Second))
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		_, err = r.Obtain(ctx, "refused", time.Minute)
		cancel()
		callerEnded(t, "Obtain, refused masters", err, context.DeadlineExceeded, "ended by the caller")
		t.Logf("refused %d: %v", i+1, err)
	}
}

// TestClosedObtainIsNotAnOutage: Obtain, Do and WaitReleased after Close,
// and a Release after Close, say the client closed: ErrClosed, not
// ErrUnavailable.
func TestClosedObtainIsNotAnOutage(t *testing.T) {
	t.Parallel()
	_, clients, _ := cluster(t, 3)
	c, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	ctx := context.Background()
	_, err = c.Obtain(ctx, "k", time.Minute)
	callerEnded(t, "Obtain", err, redlock.ErrClosed, "client closed")
	if !errors.Is(err, redlock.ErrNotObtained) {
		t.Errorf("Obtain: %v, want ErrNotObtained", err)
	}
	t.Logf("Obtain: %v", err)
	err = c.Do(ctx, "k", time.Minute, func(context.Context) error { return nil })
	callerEnded(t, "Do", err, redlock.ErrClosed, "client closed")
	_, err = c.Obtain(ctx, "k", time.Minute, redlock.WithWait())
	callerEnded(t, "Obtain WithWait", err, redlock.ErrClosed, "client closed")
}
