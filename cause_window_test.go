package redlock_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// TestAnEarlierRefusalIsNotBlamedOnACallersShortDeadline: a master that
// refused connections a moment ago, is fine again, and then does not
// answer a call whose caller's deadline is shorter than the node timeout
// is not named with that refusal: it was seen before the call's requests
// went out.
func TestAnEarlierRefusalIsNotBlamedOnACallersShortDeadline(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, 1)[0]
	rdb := pinged(t, s, bounded, func(o *redis.Options) { o.DialerRetries = 1 })
	c := newSingle(t, rdb, redlock.WithNodeTimeout(10*time.Second))
	ctx := context.Background()
	obtain(t, c, "warm", time.Minute)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 3 { // the first may meet the closed connection (EOF) instead
		if _, err = c.Obtain(ctx, "refused", time.Minute); errors.Is(err, syscall.ECONNREFUSED) {
			break
		}
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Obtain on a killed master: %v, want a refused connection", err)
	}
	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	obtain(t, c, "fine", time.Minute) // fine again
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	defer s.Cont()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = c.Obtain(short, "frozen", time.Minute)
	callerEnded(t, "Obtain on a frozen master", err, context.DeadlineExceeded, "ended by the caller")
	if errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "refused") {
		t.Fatalf("Obtain on a frozen master: %v; it names the refusal seen before it began", err)
	}
	t.Logf("frozen: %v", err)
}
