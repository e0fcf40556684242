package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Kept Releases: a Release that could not reach a master, or that a master
// refused to run, is sent again once the master answers, also at Close, so
// a released lock leaves no key behind.

// TestKeptReleaseSurvivesARestart: a Release kept for a master that was
// down reaches it once it is back, although the restarted master has lost
// the scripts (NOSCRIPT is no answer to a kept Release: the scripts are
// loaded before it runs). With AOF (the README's advice for masters), the
// released lock's key is back on that master after the restart, and must
// go within a second, not stay for its whole TTL.
func TestKeptReleaseSurvivesARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Start(t, 3, redistest.Options{Persist: true})
	clients := redistest.Clients(t, servers)
	direct := redistest.Clients(t, servers)
	c := newClient(t, clients, redlock.WithNodeTimeout(200*time.Millisecond))
	l := obtain(t, c, "k", time.Minute)
	if err := l.Extend(ctx, time.Minute); err != nil { // every master has our scripts
		t.Fatal(err)
	}
	// Obtain returns at a quorum: master 2 holds the key before it is killed.
	onEvery(t, direct, "k", l.Token())
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with two of three masters up: %v", err)
	}
	if err := servers[2].Restart(true); err != nil { // AOF: the key is back
		t.Fatal(err)
	}
	// The kept Release goes out at the lane's next tick (20ms) once the
	// master answers again.
	redistest.Within(t, time.Second, func() error {
		if v := get(t, direct[2], "k"); v == l.Token() {
			info, _ := direct[2].Info(ctx, "commandstats", "errorstats").Result()
			return fmt.Errorf("master 2, back, still holds the released lock's key for %v: the kept Release was dropped. Its stats:\n%s",
				direct[2].PTTL(ctx, "k").Val().Round(time.Second), info)
		}
		return nil
	})
}

// TestReleasedLockLeavesNoKeyAfterAStall: no key is left on any master
// after a successful Release once the faults stop (the chaos checker's own
// rule). Master 2 of 3 stalls; Obtain takes masters 0 and 1, and Release
// deletes there and returns nil; master 2's SET, already in its socket
// buffer, runs when the stall ends, after the Release to it gave up: the
// Release is kept and sent again.
func TestReleasedLockLeavesNoKeyAfterAStall(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	c := newClient(t, boundedClients(t, servers), redlock.WithNodeTimeout(100*time.Millisecond))
	warm(t, c)
	takeDown(t, "frozen", servers[2])
	l := obtain(t, c, "k", time.Minute)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with two of three masters up: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // the stall outlasts the Release's node timeout (100ms) on master 2
	resume(t, servers[2])
	redistest.Within(t, 500*time.Millisecond, func() error {
		landed(t, direct[2], "k") // master 2 has run what its socket held
		if vs := holdersOf(t, direct, "k"); count(vs, l.Token()) > 0 {
			return fmt.Errorf("after a Release that returned nil and the stall's end, the masters hold %q (TTL on master 2: %v)", vs, direct[2].PTTL(ctx, "k").Val().Round(time.Second))
		}
		return nil
	})
}

// TestReleasedLockLeavesNoKeyAfterABusyScript: a master busy with a slow
// script (or loading its AOF after a restart) answers every command with
// an error reply, BUSY (or LOADING): it ran nothing, and a Release it
// refused so is kept and sent again once it runs commands, as one that got
// no answer: a released lock leaves no key behind once the faults stop.
func TestReleasedLockLeavesNoKeyAfterABusyScript(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Start(t, 3, redistest.Options{Args: []string{"--lua-time-limit", "50"}})
	direct := redistest.Clients(t, servers)
	c := newClient(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(500*time.Millisecond))
	l := obtain(t, c, "k", time.Minute)
	busy := clientOf(t, servers[2])
	done := make(chan error, 1)
	go func() { done <- busy.Eval(ctx, "while true do end", nil).Err() }()
	redistest.Eventually(t, func() error { // master 2 is busy
		if err := direct[2].Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "BUSY") {
			return fmt.Errorf("PING on master 2: %v", err)
		}
		return nil
	})
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with two of three masters answering: %v", err)
	}
	if err := direct[2].Do(ctx, "script", "kill").Err(); err != nil {
		t.Fatal(err)
	}
	<-done
	freed(t, time.Second, direct, "k", l.Token()) // within a second of the script's end
}

// TestReleasedLockLeavesNoKeyAfterNoReplicas: a master that lost its
// replicas with min-replicas-to-write set (NOREPLICAS) runs no write, as
// one that stopped writes after a failed snapshot (MISCONF) or a replica
// promoted away (READONLY): a Release it refused so is kept and sent again
// once it runs writes, as for BUSY (TestReleasedLockLeavesNoKeyAfterABusyScript).
func TestReleasedLockLeavesNoKeyAfterNoReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	c := newClient(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(500*time.Millisecond))
	l := obtain(t, c, "k", time.Minute)
	if err := direct[2].ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil { // master 2 lost its replica
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with two of three masters answering: %v", err)
	}
	if err := direct[2].ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil { // the replica is back
		t.Fatal(err)
	}
	freed(t, time.Second, direct, "k", l.Token()) // within a second of master 2 taking writes again
}

// TestCloseSendsKeptReleases: Close "waits for ... the requests still in
// flight to finish or time out", the Releases a lane keeps to send again
// included: a service that releases its locks and closes its Client on
// shutdown, during a moment of slowness, leaves no key behind.
func TestCloseSendsKeptReleases(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	rdb := clientOf(t, servers[0], oneLane) // reads bounded by ReadTimeout (1s)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(50*time.Millisecond))
	l := obtain(t, c, "k", time.Minute)
	stalledLane(t, servers[0], func() { c.Obtain(ctx, "other", time.Minute) })
	if err := l.Release(ctx); err == nil {
		t.Fatal("Release on a stalled lane succeeded")
	}
	resume(t, servers[0])
	c.Close() // shutdown
	if v := get(t, direct[0], "k"); v == l.Token() {
		t.Fatalf("after Close, the released lock's key is on the master for %v more", direct[0].PTTL(ctx, "k").Val().Round(time.Second))
	}
}

// TestCloseDuringAStallSendsKeptReleases: a Release refused by a stalled
// lane is kept, and sent when the master answers again, also when Close
// came first, while the master was still frozen (a shutdown during an
// outage), before the lane ran another batch or tick.
func TestCloseDuringAStallSendsKeptReleases(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	rdb := clientOf(t, servers[0], oneLane) // reads bounded by ReadTimeout (1s)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(50*time.Millisecond))
	l := obtain(t, c, "k", time.Minute)
	other := obtain(t, c, "other", time.Minute)
	stalledLane(t, servers[0], func() { other.Extend(ctx, time.Minute) })
	if err := l.Release(ctx); err == nil {
		t.Fatal("Release on a stalled lane succeeded")
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }() // shutdown, during the outage
	redistest.Eventually(t, func() error {   // Close has begun: a call now says ErrClosed
		if _, err := c.Obtain(ctx, "probe", time.Minute); !errors.Is(err, redlock.ErrClosed) {
			return fmt.Errorf("Obtain during Close: %v", err)
		}
		return nil
	})
	resume(t, servers[0])
	<-closed
	if v := get(t, direct[0], "k"); v == l.Token() {
		t.Fatalf("after Close, the released lock's key is on the master for %v more", direct[0].PTTL(ctx, "k").Val().Round(time.Second))
	}
}

// TestLaneTakesRequestsDuringATick: a lane that is running a tick (sending
// a kept Release again, waiting for a frozen master) takes new requests and
// sends them in their own time, instead of failing them at once as a
// stalled lane's: an Obtain with a 1s node timeout succeeds on a master
// that, frozen for a moment, answers 100ms later.
func TestLaneTakesRequestsDuringATick(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	var w written
	rdb := clientOf(t, servers[0], bounded, oneLane, w.dialer)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(time.Second))
	l := obtain(t, c, "a", time.Minute)
	takeDown(t, "frozen", servers[0])
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := l.Release(rctx); err == nil { // kept, for the lane's next tick
		t.Fatal("Release on a frozen master succeeded")
	}
	w.past(t, w.n.Load()) // the lane's tick (every 20ms) is sending the kept Release
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	sent := w.n.Load()
	go func() {
		start := time.Now()
		l, err := c.Obtain(ctx, "b", time.Minute)
		if err == nil {
			_ = l.Release(ctx)
		}
		done <- result{err, time.Since(start)}
	}()
	w.past(t, sent) // the lane took the Obtain and sent it, to the master still frozen
	resume(t, servers[0])
	if r := <-done; r.err != nil {
		t.Fatalf("Obtain with a 1s node timeout on a master that answered 100ms later: failed after %v: %v", r.took.Round(time.Millisecond), r.err)
	}
}
