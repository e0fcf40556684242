package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// TestDoSaysLostWhenTheValidityEndedAfterClose: Close during Do stops the
// renewals and cancels fn's context (ErrClosed); an fn that goes on past
// the lock's validity (mid-write, or deaf to its context) worked while the
// lock may have been another holder's, and Do's Release begins after the
// validity ended and finds it lost. Do's error must match ErrLockLost
// ("when the lock was lost while fn ran, or Release found it lost"), not
// ErrClosed alone.
func TestDoSaysLostWhenTheValidityEndedAfterClose(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	lock, err := c.Obtain(ctx, "k", 600*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	err = lock.Do(ctx, func(ctx context.Context) error {
		go func() {
			defer close(closed)
			c.Close() // waits for Do
		}()
		<-ctx.Done()
		for lock.Validity() > 0 { // the work goes on past the validity
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		return nil
	})
	<-closed
	if !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("Do after Close: %v, want ErrClosed", err)
	}
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do whose fn ran past the validity after Close: %v, want it to match ErrLockLost too", err)
	}
}
