package redlock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// These tests step a master's wall clock (the clock shim, clockShim and
// setClock) after its lane measured its offset, on a master that stays
// healthy, and check that a step alone does not keep a lock from being
// renewed once it is over.

// TestLockObtainedAfterAMasterClockStepIsRenewed: a master's wall clock
// steps forward (an NTP step, a VM's clock catching up) by more than a
// renewal's validity, after the lane's connection measured its offset.
// The keys then held expire with the step (Redis expires by its wall
// clock): that lock may be lost. But a lock obtained after the step, on a
// master that answers every request, must be renewed by its watchdog: the
// offset the lane measured is stale, and every renewal that reaches the
// master with bounds its clock reads as past (errPastValidity) says so.
// Here over a single master (NewSingle), where a renewal that fails on the
// one master loses the lock.
func TestLockObtainedAfterAMasterClockStepIsRenewed(t *testing.T) {
	ctx := context.Background()
	env := clockShim(t, 0)
	servers := redistest.Start(t, 1, redistest.Options{Env: env})
	clients := boundedClients(t, servers)
	c, err := redlock.NewSingle(clients[0], redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const ttl = 1500 * time.Millisecond
	first, err := c.Obtain(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	work, stop, err := first.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	time.Sleep(ttl / 2) // a renewal on the measured offset
	setClock(t, env, 10*time.Second)
	select { // the step expired its key: the watchdog says so
	case <-work.Done():
	case <-time.After(3 * ttl):
		t.Fatal("setup: the lock whose key the step expired was never counted lost")
	}
	stop()
	_ = first.Release(ctx)

	second, err := c.Obtain(ctx, "k2", ttl)
	if err != nil {
		t.Fatalf("Obtain after the step: %v", err)
	}
	work2, stop2, err := second.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	select {
	case <-work2.Done():
		t.Fatalf("a lock obtained after the master's clock stepped 10s forward was lost within %v, the master answering every request: %v",
			3*ttl, context.Cause(work2))
	case <-time.After(3 * ttl):
	}
	if err := second.Release(ctx); err != nil && !errors.Is(err, redlock.ErrLockLost) {
		t.Fatal(err)
	}
}

// setClockRate makes the wall clock of the redis-server run with env
// (from clockShim) run at rate times the real speed from now on, keeping
// its reading now.
func setClockRate(t *testing.T, env []string, rate float64) {
	t.Helper()
	var path string
	for _, e := range env {
		if p, ok := strings.CutPrefix(e, "CLOCKSHIM_FILE="); ok {
			path = p
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0) // never truncated: the server maps it
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		t.Fatal(err)
	}
	seq := binary.LittleEndian.Uint64(b[:])
	put := func(at int64, v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		if _, err := f.WriteAt(b[:], at); err != nil {
			t.Fatal(err)
		}
	}
	put(0, seq+1) // odd: the reader waits
	put(16, uint64(int64(rate*1e6)))
	put(24, uint64(time.Now().UnixNano()))
	put(0, seq+2)
}

// TestMasterClockRunningFastWithinTheDriftLosesNoWatchedLock: Redlock
// allows the masters' clocks to run at another rate than the client's, up
// to the drift factor (here 0.3 of the TTL: a master 20% fast expires a
// key of 1.5s 250ms early, within the 450ms allowed). The offset a lane
// measured when it took its connection then grows stale by 20% of the
// connection's age, and the watchdog's renewals keep that connection for
// far longer than a TTL (connTurn needs 256 batches): the bounds reach the
// master earlier and earlier, until every renewal is refused by its clock
// (errPastValidity) while the master answers them all. Over a single
// master, a watched lock must not be lost to a rate the drift factor
// covers: the clocks must agree in rate within a TTL, not over a
// connection's life.
func TestMasterClockRunningFastWithinTheDriftLosesNoWatchedLock(t *testing.T) {
	ctx := context.Background()
	env := clockShim(t, 0)
	servers := redistest.Start(t, 1, redistest.Options{Env: env})
	clients := boundedClients(t, servers)
	c, err := redlock.NewSingle(clients[0], redlock.WithNodeTimeout(200*time.Millisecond), redlock.WithDriftFactor(0.3))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const ttl = 1500 * time.Millisecond
	lock, err := c.Obtain(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	setClockRate(t, env, 1.2)
	work, stop, err := lock.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	start := time.Now()
	select {
	case <-work.Done():
		t.Fatalf("a watched lock on a master whose clock runs 20%% fast (drift factor 0.3) was lost after %v: %v",
			time.Since(start).Round(100*time.Millisecond), context.Cause(work))
	case <-time.After(4 * ttl):
	}
}
