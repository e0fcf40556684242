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

// Fourth adversarial review: each test here fails on the code it was
// written against (24c2a55), and its doc says what the defect is.

// TestRetriedReleaseAfterTheValidityIsNoFalseLoss: a Release that got no
// answer from two frozen masters marks them reached; they resume and run it
// (the lane's kept copy too), and the key is gone from every master well
// before its TTL. The caller tries Release again, as its doc invites, but
// only after the validity the lock had when the first Release began
// (request.go deletedBefore compares the time of the retry, time.Now(),
// with keyEnd): the retry finds no key on the two masters, counts that as a
// lapse, and returns ErrLockLost ("work done under it may have
// overlapped"). Nobody else ever held the lock, and the work ended while
// the lock was valid. The same faults with a retry a second sooner say nil.
//
// What decides whether a key found gone can be the earlier Release's doing
// is when that Release was sent (before keyEnd: the key could still live
// then, so whatever removed it afterwards came after the work), not when
// the retry runs. Suggested fix: set the reached bit only for a Release
// sent before keyEnd (in releaseLocked and releaseBehind, compare the send
// time with keyEnd there) and drop the time.Now() test from deletedBefore.
func TestRetriedReleaseAfterTheValidityIsNoFalseLoss(t *testing.T) {
	ctx := context.Background()
	servers, clients, a := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	const ttl = 2 * time.Second
	start := time.Now()
	l, err := a.Obtain(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	takeDown(t, "frozen", servers[1], servers[2])
	first := l.Release(ctx)
	if first == nil || errors.Is(first, redlock.ErrLockLost) {
		t.Fatalf("A's Release with two masters frozen: %v, want a failure that is not ErrLockLost", first)
	}
	for _, s := range servers[1:] {
		if err := s.Cont(); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, func() error { // the first Release lands
		if vs := holdersOf(t, clients, "k"); count(vs, l.Token()) > 0 {
			return errors.New("the key is still held")
		}
		return nil
	})
	if gone := time.Since(start); gone > ttl-300*time.Millisecond {
		t.Skipf("too slow: the key was gone only %v after Obtain, near its TTL", gone)
	}
	time.Sleep(time.Until(start.Add(ttl + 100*time.Millisecond))) // the caller retries a little later
	if err := l.Release(ctx); errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("A's Release tried again after its first one deleted the key on every master (before its TTL), nobody else near the lock: %v (the first Release: %v)", err, first)
	}
}

// TestVictimOnAPoolOfOneIsKilledAfterTheStall: a lane gives a connection
// whose request timed out the barrier's treatment: it stays out of the
// client's pool until a fresh connection has killed it on the master
// (transport.go drop, take, identify). The fresh connection comes from the
// same pool. With PoolSize 1 (a client kept for locks only) the victim is
// that pool's only connection: take waits for a free one until its
// deadline, every time, so the victim is never killed nor given back. One
// timeout (here a CLIENT PAUSE WRITE of 300ms) and the master is
// unavailable to the Client for good, and to the application, whose own
// commands on the same pool time out too, long after the master answers
// again.
//
// Suggested fix: when the pool has no connection to spare for the barrier
// (poolDry, or take failing with a pool timeout while victims are held),
// give the victims back (go-redis discards a connection that timed out) and
// go on without the barrier, as the lane does where CLIENT KILL is denied;
// or run the barrier on a connection dialled outside the pool.
func TestVictimOnAPoolOfOneIsKilledAfterTheStall(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	admin := redistest.Clients(t, servers)[0]
	rdb := servers[0].Client(func(o *redis.Options) {
		o.PoolSize = 1
		o.PoolTimeout = 200 * time.Millisecond
		o.ContextTimeoutEnabled = true
	})
	defer rdb.Close()
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(100*time.Millisecond))
	if l, err := c.Obtain(ctx, "warm", time.Minute); err != nil {
		t.Fatal(err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	const pause = 300 * time.Millisecond
	if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	if _, err := c.Obtain(ctx, "k", time.Minute); err == nil {
		t.Fatal("obtained a lock while the master ran no write")
	}
	time.Sleep(time.Until(pausedAt.Add(pause + 50*time.Millisecond)))
	deadline := time.Now().Add(3 * time.Second)
	for {
		l, err := c.Obtain(ctx, "after", time.Minute)
		if err == nil {
			l.Release(ctx)
			break
		}
		if time.Now().After(deadline) {
			pingErr := rdb.Ping(ctx).Err()
			t.Fatalf("3s after a pause of %v ended, Obtain still fails: %v; the application's PING: %v (pool %+v)", pause, err, pingErr, *rdb.PoolStats())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReleasedLockLeavesNoKeyAfterNoReplicas: a Release the master refused
// to run is kept and sent again once the master runs writes again
// (transport.go: "a master that answers that it ran nothing: BUSY,
// LOADING"; TestReleasedLockLeavesNoKeyAfterABusyScript). A master that
// lost its replicas with min-replicas-to-write set (NOREPLICAS), or that
// stopped writes after a failed snapshot (MISCONF), or a replica promoted
// away (READONLY), also runs no write, but transport.go ranNothing knows
// only BUSY, LOADING, MASTERDOWN and TRYAGAIN: the refusal counts as an
// answer, the Release is not kept, and the released lock's key stays on
// that master for its whole TTL after its replicas are back.
//
// Suggested fix: count NOREPLICAS, MISCONF and READONLY (and CLUSTERDOWN)
// as "ran nothing" too.
func TestReleasedLockLeavesNoKeyAfterNoReplicas(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	c := newClient(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(500*time.Millisecond))
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := direct[2].ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil { // master 2 lost its replica
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with two of three masters answering: %v", err)
	}
	if err := direct[2].ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil { // the replica is back
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if vs := holdersOf(t, direct, "k"); count(vs, l.Token()) > 0 {
		t.Fatalf("a second after master 2 took writes again, the masters hold %q (TTL on master 2: %v)", vs, direct[2].PTTL(ctx, "k").Val().Round(time.Second))
	}
}

// TestLockRefusedToItsOwnExtendIsRefused: LostReason's doc: Refused is "a
// renewal was refused: another owner, or the key gone from too many
// masters"; RanOut is "renewals failed (or none completed) until the
// validity ran out". When the caller's own Extend is the one refused (here
// another owner holds the key on two masters), Extend sets the validity to
// 0 and the watchdog, woken by the change, finds Validity 0 and reports
// RanOut, with the cause "the validity ran out before a renewal completed
// (was the process paused?)" (watchdog.go run: both Validity() == 0
// branches). Metrics and logs then blame a pause or an outage for a lock
// another owner took.
//
// Suggested fix: keep why the validity was zeroed (a refusal, a Release, a
// run-out) next to until, and let the watchdog report that reason and the
// Extend's error as the cause.
func TestLockRefusedToItsOwnExtendIsRefused(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	_, clients, c := cluster(t, 3, redlock.WithObserver(rec))
	l, err := c.Obtain(ctx, "job", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop, err := l.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, m := range clients[1:] { // the key went to another owner on two masters
		if err := m.Set(ctx, "job", "another-owner", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Extend(ctx, 3*time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend with another owner on two of three masters: %v, want ErrLockLost", err)
	}
	select {
	case <-lctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the watchdog's context is not done after Extend found the lock refused")
	}
	stop()
	lost := all[*redlock.LostEvent](rec)
	if len(lost) != 1 || lost[0].Reason != redlock.Refused {
		for _, e := range lost {
			t.Logf("lost: %s: %v", e.Reason, e.Cause)
		}
		t.Fatalf("another owner holds the key on two of three masters: %d lost events, want one with reason %q", len(lost), redlock.Refused)
	}
}

// TestReleaseUnansweredAfterARestartReportsTheLoss: masters 1 and 2
// restart without persistence while A holds the lock, and B obtains and
// releases it: the two holders overlapped. A's Release then finds its
// lane's connections closed, and the fresh ones get no answer (the two
// masters are frozen a moment): ErrUnavailable, and the two masters are
// marked reached (lock.go releaseLocked), though the transport saw their
// connections closed and had not confirmed the run_id. A second Release, as
// Release's doc invites, finds no key there, counts the restart's loss as
// the first Release's doing (request.go deletedBefore), and returns nil:
// the overlap is never reported, where a single Release on answering
// masters says ErrLockLost (TestReleaseAfterARestartReportsTheLoss).
//
// The key vanished before the first Release was sent, so that Release
// never "reached that master while the key could still live". Suggested
// fix: record with the lock each master's run_id when it was obtained
// (identify can ask INFO server on every fresh connection, in the same
// round trip) and count a reached master only while its run_id is
// unchanged; a Release that could not learn it counts nothing as its own.
func TestReleaseUnansweredAfterARestartReportsTheLoss(t *testing.T) {
	ctx := context.Background()
	servers, _, a := cluster(t, 3, redlock.WithNodeTimeout(200*time.Millisecond))
	l, err := a.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[1:] {
		if err := s.Restart(false); err != nil { // A's key is lost on two masters
			t.Fatal(err)
		}
	}
	b := newClient(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(500*time.Millisecond))
	lb, err := b.Obtain(ctx, "k", time.Minute) // B holds the lock while A does
	if err != nil {
		t.Fatalf("B's Obtain after the restarts: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	takeDown(t, "frozen", servers[1], servers[2]) // a moment of slowness
	first := l.Release(ctx)
	if first == nil || errors.Is(first, redlock.ErrLockLost) {
		t.Fatalf("A's Release with two masters frozen: %v, want a failure that is not ErrLockLost", first)
	}
	for _, s := range servers[1:] {
		if err := s.Cont(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("A's Release tried again: %v; want ErrLockLost: two masters lost A's key to a restart and B held the lock while A did (the first Release: %v)", err, first)
	}
}

// TestReleaseAfterAReleaseIsNilWhileAnExtendHoldsTheMutex: Release's doc:
// "Once a Release has returned nil or ErrLockLost, later calls return nil
// at once: a deferred Release after an explicit one is no alarm". Since
// 24c2a55 a Release that cannot take the lock's mutex before its context
// ends sends its Releases in the background and returns ErrUnavailable
// (lock.go release, releaseBehind), without looking at released first. A
// deferred Release with the request's context, done by then, that meets
// an Extend of another goroutine (which returns ErrLockLost at once on a
// released lock, but holds the mutex meanwhile) reports the lock
// unavailable, and sends a Release round to every master again.
//
// Suggested fix: return nil when released is set, before lockFor (and in
// releaseBehind).
func TestReleaseAfterAReleaseIsNilWhileAnExtendHoldsTheMutex(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel() // the request's context, ended by the time the deferred Release runs
	stop := make(chan struct{})
	extended := make(chan struct{})
	go func() {
		defer close(extended)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = l.Extend(ctx, time.Minute) // ErrLockLost at once, the mutex held meanwhile
		}
	}()
	defer func() { close(stop); <-extended }()
	for i := 0; i < 20000; i++ {
		if err := l.Release(done); err != nil {
			t.Fatalf("Release #%d after a Release that returned nil: %v", i+2, err)
		}
	}
}

// TestReleaseThatGaveUpIsNotUndoneByTheExtendItWaitedFor: a Release whose
// context ends while the caller's Extend holds the lock's mutex "still goes
// out behind that Extend" (Release's doc; lock.go releaseBehind). It goes
// out at once, and the Extend may not have sent its requests yet: it took
// the mutex and read the validity before the Release cleared it, and its
// fanout comes a few microseconds later. The Release then reaches every
// master's lane first: the masters delete the key, then run the Extend,
// which finds the key gone before its re-take deadline and takes it again
// for a whole TTL (extendScript). Extend returns ErrLockLost ("released
// while Extend ran"), Release ErrUnavailable, and the key the caller
// released stays on every master for the Extend's TTL: nobody can take the
// lock for a minute here, and nothing sends a Release again (the one sent
// got its answer). Here an Extend and a Release with an ended context (a
// deferred Release) start together; a few percent of the runs leave the
// key.
//
// Suggested fix: let a Release stop the Extend requests not sent yet rather
// than race them: give Extend's requests a channel that release closes when
// it sets releasing, and have the lane drop a request whose channel is
// closed, as it drops one whose caller gave up (request.dropped).
func TestReleaseThatGaveUpIsNotUndoneByTheExtendItWaitedFor(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	done, cancel := context.WithCancel(ctx)
	cancel() // the deferred Release's context has ended
	spin := 0
	for i := range 150 { // a few percent of the runs failed before the fix
		key := fmt.Sprintf("k%d", i)
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		extended := make(chan error, 1)
		started := make(chan struct{})
		go func() { close(started); extended <- l.Extend(ctx, time.Minute) }()
		<-started
		for j := range (i % 30) * 20 { // start the two at varying offsets
			spin += j
		}
		rerr := l.Release(done)
		eerr := <-extended
		if count(holdersOf(t, clients, key), l.Token()) == 0 {
			continue
		}
		time.Sleep(500 * time.Millisecond) // a Release still in flight lands
		if vs := holdersOf(t, clients, key); count(vs, l.Token()) > 0 {
			var left time.Duration
			for _, m := range clients {
				left = max(left, m.PTTL(ctx, key).Val())
			}
			t.Fatalf("run %d: after Release (%v) and the Extend it waited for (%v), %d masters hold the released lock's key, for up to %v more",
				i, rerr, eerr, count(vs, l.Token()), left.Round(time.Second))
		}
	}
	t.Logf("spin %d", spin)
}

// TestMasterOptionsNeverRepeatsAPasswordHoldingAnAt: MasterOptions' doc:
// "An error never repeats a password: it names the master by its host and
// port (or socket path) alone". safeName (master.go) takes what follows the
// last '@' of the spec for the host. A password passed as a query parameter
// (refused by go-redis: "unexpected option") that holds an '@' puts its own
// tail there: the error names the master "s3cretpw".
//
// Suggested fix: find the host in the authority only (before the first
// '/', '?' or '#' that follows the last '@' of the authority), and when the
// spec is ambiguous (an '@' after a '?', '#' or '/'), name the master by its
// position instead of by anything taken from the spec.
func TestMasterOptionsNeverRepeatsAPasswordHoldingAnAt(t *testing.T) {
	for _, spec := range []string{
		"redis://cache.internal:6379/0?password=abc@s3cretpw",
		"redis://cache.internal:6379?password=s3c@retpw",
	} {
		_, err := redlock.MasterOptions(spec)
		if err == nil {
			t.Errorf("MasterOptions(%q) accepted it", spec)
			continue
		}
		if strings.Contains(err.Error(), "s3cretpw") || strings.Contains(err.Error(), "retpw") {
			t.Errorf("MasterOptions(%q): the error repeats the password: %v", spec, err)
		}
	}
}
