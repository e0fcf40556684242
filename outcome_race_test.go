package redlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The outcome a single attempt's answers decided is its error's only one:
// a cancel or a Close that comes after the masters answered, with no wait
// between attempts to end, adds nothing to it.

// afterAnswer runs do once, after the master has answered the first lock
// request (a SET or a script) sent while armed.
type afterAnswer struct {
	armed atomic.Bool
	do    func()
}

func (h *afterAnswer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *afterAnswer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.fire(cmd)
		return err
	}
}

func (h *afterAnswer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.fire(cmds...)
		return err
	}
}

func (h *afterAnswer) fire(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if n := c.Name(); (n == "set" || n == "evalsha" || n == "eval") && h.armed.CompareAndSwap(true, false) {
			h.do()
			return
		}
	}
}

// TestOneAttemptTakenStaysTakenWhenTheCallerEndsAfterTheAnswer: a
// one-attempt Obtain the master answered "held by another owner" fails
// with ErrTaken only, though its caller's context (a cancel, a cancel
// with a cause) or Close ended right after that answer: there was no wait
// for them to end.
func TestOneAttemptTakenStaysTakenWhenTheCallerEndsAfterTheAnswer(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, 1)[0]
	hook := &afterAnswer{}
	rdb := pinged(t, s, bounded)
	rdb.AddHook(hook)
	c := newSingle(t, rdb, redlock.WithNodeTimeout(time.Second))
	obtain(t, c, "held", time.Minute)
	why := errors.New("shutting down")
	for _, tc := range []struct {
		name string
		end  func(context.CancelCauseFunc)
		not  error
	}{
		{"cancel", func(cancel context.CancelCauseFunc) { cancel(nil) }, context.Canceled},
		{"cancel with a cause", func(cancel context.CancelCauseFunc) { cancel(why) }, why},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		hook.do = func() { tc.end(cancel) }
		hook.armed.Store(true)
		_, err := c.Obtain(ctx, "held", time.Minute)
		if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrTaken) ||
			errors.Is(err, tc.not) || errors.Is(err, redlock.ErrUnavailable) || errors.Is(err, redlock.ErrClosed) {
			t.Errorf("%s after the answer: %v; want ErrTaken only", tc.name, err)
		}
		t.Logf("%s: %v", tc.name, err)
	}

	c2 := newSingle(t, rdb, redlock.WithNodeTimeout(time.Second))
	hook.do = func() {
		go c2.Close()
		<-redlock.Closing(c2) // Close has begun before the Obtain decides
	}
	hook.armed.Store(true)
	_, err := c2.Obtain(context.Background(), "held", time.Minute)
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrTaken) ||
		errors.Is(err, redlock.ErrClosed) || errors.Is(err, redlock.ErrUnavailable) {
		t.Errorf("Close after the answer: %v; want ErrTaken only", err)
	}
	t.Logf("Close: %v", err)
}

// TestCallersDeadlineEndsACallWhoseMastersOweABarrier: masters frozen after
// a request timed out on them owe the barrier (the next connection kills
// the old one first); a call whose caller's deadline is shorter than the
// node timeout (or as long: it began first) ends as the caller's, matching context.DeadlineExceeded, not ErrUnavailable, however
// the wire's failure and the caller's timer fall at that same instant.
func TestCallersDeadlineEndsACallWhoseMastersOweABarrier(t *testing.T) {
	t.Parallel()
	servers, _, c := cluster(t, 3, redlock.WithNodeTimeout(200*time.Millisecond))
	warm(t, c)
	l := obtain(t, c, "held", time.Minute)
	for _, s := range servers[1:] {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		defer s.Cont()
	}
	if _, err := c.Obtain(context.Background(), "k", time.Minute); !errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("Obtain on frozen masters: %v, want ErrUnavailable", err)
	}
	for i := range 6 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := c.Obtain(ctx, "k", time.Minute)
		callerEnded(t, "Obtain", err, context.DeadlineExceeded, "ended by the caller")
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
		xerr := l.Extend(ctx, time.Minute)
		callerEnded(t, "Extend", xerr, context.DeadlineExceeded, "ended by the caller")
		cancel()
		if t.Failed() {
			t.Fatalf("round %d: Obtain: %v; Extend: %v", i+1, err, xerr)
		}
	}
}
