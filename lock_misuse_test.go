package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// TestNilLockMethodsReturnAnError: the nil *Lock of a failed Obtain, whose
// Release a caller deferred before checking the error, returns an error
// matching ErrInvalidArgument from Release, Extend, Do and KeepAlive, and
// a Validity of 0, instead of panicking.
func TestNilLockMethodsReturnAnError(t *testing.T) {
	t.Parallel()
	var l *redlock.Lock
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Release": func() error { return l.Release(ctx) },
		"Extend":  func() error { return l.Extend(ctx, time.Minute) },
		"Do":      func() error { return l.Do(ctx, func(context.Context) error { return nil }) },
		"KeepAlive": func() error {
			_, _, err := l.KeepAlive(ctx)
			return err
		},
	} {
		err := call()
		if !errors.Is(err, redlock.ErrInvalidArgument) || !strings.Contains(err.Error(), name+" of a nil *Lock") {
			t.Errorf("%s on a nil *Lock: %v, want ErrInvalidArgument naming it", name, err)
		}
	}
	if v := l.Validity(); v != 0 {
		t.Errorf("Validity of a nil *Lock: %v", v)
	}
}

// TestExtendAfterReleaseSaysReleased: an Extend after Release says the
// lock was released, not that its validity ran out; it matches
// ErrLockLost.
func TestExtendAfterReleaseSaysReleased(t *testing.T) {
	t.Parallel()
	_, _, c := cluster(t, 3)
	l := obtain(t, c, "released", time.Minute)
	ctx := context.Background()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err := l.Extend(ctx, time.Minute)
	if !errors.Is(err, redlock.ErrLockLost) || !strings.Contains(err.Error(), "Release was called before") {
		t.Fatalf("Extend after Release: %v, want ErrLockLost saying it was released", err)
	}
}
