package main

import (
	"testing"
	"time"
)

// One key: every waiter waits for the other workers' holds, exactly.
func TestFIFOOneKey(t *testing.T) {
	if got, want := fifoP99(16, 1, time.Millisecond), 15*time.Millisecond; got != want {
		t.Errorf("fifoP99(16 workers, 1 key) = %v, want %v", got, want)
	}
}

// As many keys as workers, each worker alone on its key most of the time:
// the tail is a few services, far below one per worker.
func TestFIFOManyKeys(t *testing.T) {
	if got := fifoP99(4, 64, time.Millisecond); got > 3*time.Millisecond {
		t.Errorf("fifoP99(4 workers, 64 keys) = %v, want a few ms at most", got)
	}
}

// Random keys: the queues' lengths wander, so the tail is well above the
// fair share (waiters per key x service) even in first-come order.
func TestFIFORandomKeysTail(t *testing.T) {
	fair := 16 * time.Millisecond // 64 workers over 4 keys, 1ms each
	got := fifoP99(64, 4, time.Millisecond)
	if got < 2*fair || got > 4*fair {
		t.Errorf("fifoP99(64, 4, 1ms) = %v, want 2-4x the fair share %v", got, fair)
	}
	t.Logf("p99 %v: %.1fx the fair share", got, float64(got)/float64(fair))
}
