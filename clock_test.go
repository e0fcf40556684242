package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Masters whose wall clocks read off the client's (the clock shim: clockShim,
// setClock, setClockRate): an Extend's bounds reach each master in its own
// clock, measured on every fresh connection, so only the clocks' rates must
// agree, within the drift factor.

// TestMasterClockBehindRunsNoStragglerPastTheValidity: the revival of
// TestExtendHeldUpByAFrozenMasterDoesNotReviveALapsedLock on a master 0
// whose clock is 3s behind the client's, more than the validity: an
// Extend held up in its socket until the validity has ended reaches it
// when its clock still reads before the validity's end as the client
// counts it. The bound must come in master 0's own clock: the held-up
// Extend does nothing there, and the key expires when the renewal master
// 0 ran before it froze says.
func TestMasterClockBehindRunsNoStragglerPastTheValidity(t *testing.T) {
	ctx := context.Background()
	const lag = 3 * time.Second
	servers := append(redistest.Start(t, 1, redistest.Options{Env: clockShim(t, -lag)}), redistest.Start(t, 2)...)
	direct := redistest.Clients(t, servers)
	if off := masterOffset(t, direct[0]); off > -lag+100*time.Millisecond || off < -lag-100*time.Millisecond {
		t.Fatalf("setup: master 0's clock is %v off, want %v", off, -lag)
	}
	c := newClient(t, boundedClients(t, servers), redlock.WithNodeTimeout(200*time.Millisecond))
	const ttl = 1500 * time.Millisecond
	lock := obtain(t, c, "k", ttl)
	ran := heldUpExtend(t, lock, servers, direct[0], "k", ttl)
	after := direct[0].PTTL(ctx, "k").Val()
	left := time.Until(ran.Add(ttl))
	if after > left+100*time.Millisecond {
		t.Fatalf("master 0 (clock %v behind) had %v left on the key after it resumed, past the %v its last renewal before the freeze left: a held-up Extend revived the lapsed lock", lag, after.Round(time.Millisecond), left.Round(time.Millisecond))
	}
	if err := lock.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release of the lapsed lock: %v, want ErrLockLost", err)
	}
}

// TestExtendOnAMasterWhoseClockIsAhead: Redlock needs no agreement of
// absolute clocks (only of their rates: the drift factor): a healthy master
// whose clock is ahead of the client's by more than an Extend's late
// deadline (start + 2 node timeouts, without the barrier) renews every
// lock. Here the master is 1s ahead, the client denied CLIENT KILL (on a
// Cluster master the same holds with any user).
func TestExtendOnAMasterWhoseClockIsAhead(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1, redistest.Options{Env: clockShim(t, time.Second)})
	clients, _ := noKillUser(t, servers)
	c := newSingle(t, clients[0], redlock.WithNodeTimeout(100*time.Millisecond))
	err := c.Do(ctx, "k", time.Second, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(1500 * time.Millisecond): // the work outlasts the TTL
			return nil
		}
	})
	if err != nil {
		t.Fatalf("Do for 1.5s under a 1s TTL on a healthy master whose clock is 1s ahead: %v", err)
	}
}

// TestAttachOnAMasterWhoseClockIsAhead: a Client's first request to a
// master may be an Extend (Attach's confirmation), built before its lane's
// first connection measured the master's clock: it goes out with the
// offset that connection measured. Here the master is 5s ahead, more than
// the lock's TTL.
func TestAttachOnAMasterWhoseClockIsAhead(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1, redistest.Options{Env: clockShim(t, 5*time.Second)})
	clients := boundedClients(t, servers)
	a := newSingle(t, clients[0], redlock.WithNodeTimeout(200*time.Millisecond))
	l := obtain(t, a, "job", 2*time.Second)
	b := newSingle(t, clients[0], redlock.WithNodeTimeout(200*time.Millisecond)) // another process
	h, err := b.Attach(ctx, "job", l.Token(), 2*time.Second, 0)
	if err != nil {
		t.Fatalf("Attach on a healthy master whose clock is 5s ahead: %v", err)
	}
	if err := h.Extend(ctx, 2*time.Second); err != nil {
		t.Fatalf("Extend of the attached lock: %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release of the attached lock: %v", err)
	}
}

// TestStaleClockOffsetFailsThatMasterOnly: a master's clock that jumps
// ahead after its offset was measured makes the bounds it gets early, until
// the lane's next fresh connection: that master answers its renewals with
// a refusal of its clock (nothing done), which counts as its failure,
// never as a loss. Over three masters the lock renews on the other two;
// over that master alone, Extend fails (ErrUnavailable) and the lock stays
// valid until its validity runs out; once the lane takes a fresh
// connection, the master renews again.
func TestStaleClockOffsetFailsThatMasterOnly(t *testing.T) {
	ctx := context.Background()
	env := clockShim(t, 0)
	servers := append(redistest.Start(t, 1, redistest.Options{Env: env}), redistest.Start(t, 2)...)
	direct := redistest.Clients(t, servers)
	clients := boundedClients(t, servers)
	three := newClient(t, clients, redlock.WithNodeTimeout(200*time.Millisecond))
	one := newSingle(t, clients[0], redlock.WithNodeTimeout(200*time.Millisecond))
	l3, l1 := obtain(t, three, "k3", time.Minute), obtain(t, one, "k1", time.Minute)
	// Obtain returns at a quorum: master 0's grant may still be on its way.
	held(t, direct, "k3", l3.Token(), 3)
	// A shorter validity (the keys keep their minute: Extend never
	// shortens one), which master 0's jump will pass.
	for _, l := range []*redlock.Lock{l3, l1} {
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	setClock(t, env, 20*time.Second)
	if off := masterOffset(t, direct[0]); off < 19*time.Second {
		t.Fatalf("setup: master 0's clock is %v ahead after the jump, want 20s", off)
	}
	// Master 0's answer may come after the quorum's: the lock on master 0
	// alone shows it.
	if err := l3.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend over three masters, master 0's clock jumped 20s ahead: %v, want the other two's quorum", err)
	}
	err := l1.Extend(ctx, 5*time.Second)
	if !errors.Is(err, redlock.ErrUnavailable) || errors.Is(err, redlock.ErrLockLost) || !pastValidity(err) {
		t.Fatalf("Extend on master 0 alone after its clock jumped: %v, want ErrUnavailable for the master's clock refusal, not ErrLockLost", err)
	}
	if l1.Validity() <= 0 || l3.Validity() <= 0 {
		t.Fatalf("validity %v over master 0 alone, %v over three: a renewal refused by a master's clock lost a lock", l1.Validity(), l3.Validity())
	}
	if n := count(holdersOf(t, direct, "k3"), l3.Token()); n != 3 {
		t.Fatalf("%d masters hold the lock's key, want 3", n)
	}
	// The lane's next fresh connection measures the jumped clock.
	if err := direct[0].Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Within(t, time.Second, func() error {
		if err := l1.Extend(ctx, 5*time.Second); err != nil {
			return fmt.Errorf("Extend on master 0 after its lane's connection was closed: %v, want it renewed with the offset a fresh connection measured", err)
		}
		return nil
	})
}

// TestPastValidityAnswerIsNoMasterDown: a master that answers an Extend
// that it ran past the lock's validity end, by its clock, answered: the
// Observer hears that it answers again, never that it stopped. Here the
// client may not read the master's clock (INFO denied: offset 0) and the
// master's is 20s ahead, more than the lock's TTL.
func TestPastValidityAnswerIsNoMasterDown(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1, redistest.Options{Env: clockShim(t, 20*time.Second)})
	rdb := noInfoUser(t, servers[0])
	seen := &recorder{}
	c := newSingle(t, rdb, redlock.WithNodeTimeout(200*time.Millisecond), redlock.WithObserver(seen))
	l := obtain(t, c, "k", 10*time.Second)
	takeDown(t, "frozen", servers[0])
	if err := l.Extend(ctx, 10*time.Second); err == nil {
		t.Fatal("Extend on a frozen master succeeded")
	}
	if ms := all[*redlock.MasterEvent](seen); len(ms) != 1 || ms[0].Up {
		t.Fatalf("MasterEvents after an Extend on the frozen master: %+v, want one that says it stopped answering", ms)
	}
	resume(t, servers[0])
	var err2 error
	redistest.Eventually(t, func() error {
		err2 = l.Extend(ctx, 10*time.Second)
		if !pastValidity(err2) {
			return err2
		}
		return nil
	})
	if errors.Is(err2, redlock.ErrLockLost) {
		t.Fatalf("Extend answered past the validity by the master's clock: %v, want no loss", err2)
	}
	if ms := all[*redlock.MasterEvent](seen); len(ms) != 2 || !ms[1].Up {
		t.Fatalf("MasterEvents after the master answered the Extend: %+v, want it back up", ms)
	}
}

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
	t.Parallel()
	ctx := context.Background()
	env := clockShim(t, 0)
	servers := redistest.Start(t, 1, redistest.Options{Env: env})
	clients := boundedClients(t, servers)
	direct := redistest.Clients(t, servers)
	c := newSingle(t, clients[0], redlock.WithNodeTimeout(200*time.Millisecond))
	const ttl = 1500 * time.Millisecond
	first := obtain(t, c, "k", ttl)
	scripts := scriptsRun(t, direct...)
	work, stop, err := first.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	redistest.Eventually(t, func() error { // a renewal on the measured offset
		if scriptsRun(t, direct...) == scripts {
			return errors.New("no renewal yet")
		}
		return nil
	})
	setClock(t, env, 10*time.Second)
	select { // the step expired its key: the watchdog says so
	case <-work.Done():
	case <-time.After(3 * ttl):
		t.Fatal("setup: the lock whose key the step expired was never counted lost")
	}
	stop()
	_ = first.Release(ctx)

	second := obtain(t, c, "k2", ttl)
	work2, stop2, err := second.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	select {
	case <-work2.Done():
		t.Fatalf("a lock obtained after the master's clock stepped 10s forward was lost within %v, the master answering every request: %v",
			3*ttl, context.Cause(work2))
	case <-time.After(3 * ttl): // renewals on the stepped clock
	}
	if err := second.Release(ctx); err != nil && !errors.Is(err, redlock.ErrLockLost) {
		t.Fatal(err)
	}
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
	t.Parallel()
	ctx := context.Background()
	env := clockShim(t, 0)
	servers := redistest.Start(t, 1, redistest.Options{Env: env})
	clients := boundedClients(t, servers)
	c := newSingle(t, clients[0], redlock.WithNodeTimeout(200*time.Millisecond), redlock.WithDriftFactor(0.3))
	const ttl = 1500 * time.Millisecond
	lock := obtain(t, c, "k", ttl)
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
	case <-time.After(4 * ttl): // the offset a connection measured grows stale
	}
}
