package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Third adversarial review: each test here fails on the code it was
// written against (9db8361), and names the defect it shows.

// TestRetriedReleaseAfterALapseReportsTheLoss: A's work overran its TTL
// and B held the lock in between, so A's work may have overlapped with
// B's: A's Release must report the loss, even when the masters cannot
// tell (a Release after one that got no answer counts a key found gone as
// its own doing). A Release that begins after the validity ended returns
// ErrLockLost saying so, whatever the masters answer (here two of them are
// frozen: a moment of slowness), and a Release after it returns nil: the
// overlap is reported once, never lost to a retry.
func TestRetriedReleaseAfterALapseReportsTheLoss(t *testing.T) {
	ctx := context.Background()
	servers, clients, a := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newClient(t, clients, redlock.WithNodeTimeout(100*time.Millisecond))
	l, err := a.Obtain(ctx, "k", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // A's work overruns its TTL
	lb, err := b.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("B's Obtain after A's lock lapsed: %v", err)
	}
	if err := lb.Release(ctx); err != nil { // B's work is done
		t.Fatal(err)
	}
	takeDown(t, "frozen", servers[1], servers[2]) // a moment of slowness
	first := l.Release(ctx)
	if !errors.Is(first, redlock.ErrLockLost) || !strings.Contains(first.Error(), "the validity had ended before Release began") {
		t.Fatalf("A's Release of its lapsed lock with two masters frozen: %v; want ErrLockLost saying the validity had ended: A's lock lapsed and B held it while A's work ran", first)
	}
	for _, s := range servers[1:] {
		if err := s.Cont(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("A's Release after the one that reported the loss: %v, want nil (the first: %v)", err, first)
	}
}

// TestReleaseAfterARestartReportsTheLoss: masters 0 and 1 restart without
// persistence while A holds the lock; B obtains it (A's key is gone from a
// majority) and releases it. A's Release then finds no key on those two
// masters: ErrLockLost, as Release's doc says, when the lane's connection
// was given back meanwhile. But a lane keeps its connection while idle for
// a while (transport.go connIdle), so a Release then goes out on the
// connection the restart closed, fails with EOF, and was sent "again"
// (transport.go exec, closedConn), where no key counted as done (request.go
// result): Release returned nil, and the two holders were never reported.
// The same faults gave a different answer depending on how long ago the
// lane last sent something. (The test skips if the machine is so slow that
// the lane gave its connection back before A's Release.)
func TestReleaseAfterARestartReportsTheLoss(t *testing.T) {
	ctx := context.Background()
	servers, _, a := cluster(t, 3)
	l, err := a.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { errs[i] = servers[i].Restart(false) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	b := newClient(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(500*time.Millisecond))
	lb, err := b.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("B's Obtain after the restarts: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err = l.Release(ctx)
	took := time.Since(start)
	if took > 10*time.Second {
		t.Skipf("too slow to stay within the lane's idle time (%v): %v", took, err)
	}
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("A's Release %v after two of three masters restarted (and B held the lock in between): %v; want ErrLockLost", took.Round(time.Millisecond), err)
	}
}

// TestRetriedReleaseAfterAnotherTookItIsNoFalseLoss: the other side of the
// same ambiguity. A's first Release reaches one master in time; the two
// frozen ones run it when they resume (or the lane sends it again, kept):
// the lock is free, and B takes it. A's second Release, as Release's doc
// invites after a failure to reach the masters, finds B's token everywhere
// and reports ErrLockLost ("work done under it may have overlapped"),
// although A's work ended before its first Release and B took the lock
// only after A's own Release freed it. TestRetriedReleaseIsNoFalseLoss
// (timing2_test.go) pinned this false alarm for a key found absent only.
func TestRetriedReleaseAfterAnotherTookItIsNoFalseLoss(t *testing.T) {
	ctx := context.Background()
	servers, clients, a := cluster(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	b := newClient(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
	l, err := a.Obtain(ctx, "k", time.Minute)
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
	var lb *redlock.Lock
	redistest.Eventually(t, func() error { // A's first Release lands: the lock is free
		lb, err = b.Obtain(ctx, "k", time.Minute)
		return err
	})
	defer lb.Release(ctx)
	if err := l.Release(ctx); errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("A's Release tried again after its first freed the lock and B took it: %v; A's work never overlapped B's (the first Release: %v)", err, first)
	}
}

// TestReleaseThatGaveUpWaitingStillReleases: Release's doc: "otherwise an
// error matching ErrUnavailable ... Validity is 0 after Release, whatever
// it returns", and KeepAlive's: "a Release while the watchdog runs also
// ends it". Since 29b15ce a Release waits for the lock's mutex no longer
// than its context (lock.go lockFor); when the caller's own Extend holds
// it (a slow master), Release returns the bare context error (matching
// neither ErrUnavailable nor ErrLockLost), sends nothing, leaves Validity
// as it was, and the watchdog goes on renewing the lock the caller
// released: its key never expires.
func TestReleaseThatGaveUpWaitingStillReleases(t *testing.T) {
	ctx := context.Background()
	servers, clients, c := cluster(t, 3, redlock.WithNodeTimeout(time.Second))
	l, err := c.Obtain(ctx, "k", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop, err := l.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	takeDown(t, "frozen", servers[1], servers[2])
	go l.Extend(ctx, 3*time.Second) // the caller's own Extend, on the frozen majority
	time.Sleep(50 * time.Millisecond)
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = l.Release(rctx)
	if !errors.Is(err, redlock.ErrUnavailable) && !errors.Is(err, redlock.ErrLockLost) && err != nil {
		t.Errorf("Release behind an Extend in flight: %v; want nil, ErrLockLost or ErrUnavailable", err)
	}
	if v := l.Validity(); v != 0 {
		t.Errorf("Validity after Release: %v, want 0", v)
	}
	for _, s := range servers[1:] {
		if err := s.Cont(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-wctx.Done():
	case <-time.After(4 * time.Second):
		t.Errorf("4s after Release (TTL 3s), the watchdog still renews the lock: masters hold %q", holdersOf(t, clients, "k"))
	}
}

// TestMasterOptionsNeverRepeatsAPassword: MasterOptions' doc: "An error
// never repeats a password". A URL without a user part but with the
// password where several other clients take it, as a query parameter, is
// refused by go-redis ("unexpected option: password") and the error quotes
// the whole spec (master.go parseMaster); a password holding "://" (a
// spec without a scheme) is taken for one, and redactURL keeps what comes
// before it.
func TestMasterOptionsNeverRepeatsAPassword(t *testing.T) {
	for _, spec := range []string{
		"redis://cache.internal:6379/0?password=s3cretpw",
		"rediss://cache.internal:6380?password=s3cretpw&db=1",
		"admin:s3cretpw://x@cache.internal:6379",
	} {
		_, err := redlock.MasterOptions(spec)
		if err == nil {
			t.Errorf("MasterOptions(%q) accepted it", spec)
			continue
		}
		if strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("MasterOptions(%q): the error repeats the password: %v", spec, err)
		}
	}
}

// TestObtainOnABusyPoolReturnsAtItsNodeTimeout: New's doc: with
// ContextTimeoutEnabled "calls still return at their node timeout". Since
// 29b15ce a lane gives its connection back "at once when the pool has no
// idle connection left" (transport.go tick, poolDry), and takes one again
// for its next batch. A batch runs on a context with a deadline but no Done
// channel (transport.go deadlineCtx), and go-redis's pool waits for a free
// connection until ctx.Done or its PoolTimeout, never the deadline: while
// the application holds every connection, a single master's Obtain (sent
// inline on the caller's goroutine, the caller having no context of its
// own to honour) blocks for the whole PoolTimeout (ReadTimeout + 1s by
// default), ten times its node timeout here.
func TestObtainOnABusyPoolReturnsAtItsNodeTimeout(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
		o.PoolSize = 4 // one lane
		o.PoolTimeout = 2 * time.Second
	})
	defer rdb.Close()
	c, err := redlock.NewSingle(rdb, redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Obtain(ctx, "warm", time.Minute) // the lane holds a connection
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The application pins the rest of the pool, then the one the lane
	// gives back when it sees the pool dry.
	var pinned []*redis.Conn
	defer func() {
		for _, cn := range pinned {
			cn.Close()
		}
	}()
	for range 4 {
		cn := rdb.Conn()
		if err := cn.Ping(ctx).Err(); err != nil {
			t.Fatalf("the application's connection %d: %v", len(pinned), err)
		}
		pinned = append(pinned, cn)
	}
	start := time.Now()
	_, err = c.Obtain(ctx, "k", time.Minute)
	if took := time.Since(start); took > 600*time.Millisecond {
		t.Fatalf("Obtain with a 200ms node timeout on a pool the application holds returned after %v: %v", took.Round(time.Millisecond), err)
	}
}

// TestCloseDuringAStallSendsKeptReleases: a Release refused by a stalled
// lane is kept in the lane (lane.go send: l.kept) and handed to the
// transport only when the lane runs its next batch or tick. When Close
// comes before that, the worker exits with its queue empty (lane.go work)
// and closes the transport, which sends the Releases it holds
// (transport.go close), not the lane's: the released lock's key stays for
// its whole TTL. TestCloseSendsKeptReleases passes when a tick happens to
// run between the master's answer and Close; here Close is called while
// the master is still frozen, as a shutdown during an outage would.
func TestCloseDuringAStallSendsKeptReleases(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	direct := redistest.Clients(t, servers)
	rdb := servers[0].Client(func(o *redis.Options) { o.PoolSize = 4 }) // one lane; reads bounded by ReadTimeout (1s)
	defer rdb.Close()
	c, err := redlock.New([]redis.UniversalClient{rdb}, redlock.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Obtain(ctx, "other", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	defer servers[0].Cont()
	go other.Extend(ctx, time.Minute) // in flight on the frozen master: the lane stalls
	time.Sleep(150 * time.Millisecond)
	if err := l.Release(ctx); err == nil {
		t.Fatal("Release on a stalled lane succeeded")
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }() // shutdown, during the outage
	time.Sleep(100 * time.Millisecond)
	if err := servers[0].Cont(); err != nil {
		t.Fatal(err)
	}
	<-closed
	if v := get(t, direct[0], "k"); v == l.Token() {
		t.Fatalf("after Close, the released lock's key is on the master for %v more", direct[0].PTTL(ctx, "k").Val().Round(time.Second))
	}
}

// lateSpanHook is a go-redis hook that panics after the pipeline has run
// (ending a span, say), on the lane's CLIENT INFO pipeline, while left > 0.
type lateSpanHook struct{ left atomic.Int32 }

func (h *lateSpanHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *lateSpanHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *lateSpanHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) > 0 && len(cmds[0].Args()) > 1 && cmds[0].Args()[0] == "client" && cmds[0].Args()[1] == "info" && h.left.Add(-1) >= 0 {
			panic("hook panics after the pipeline ran")
		}
		return err
	}
}

// TestPanicWhileTakingAConnectionLeaksNone: the library survives a hook's
// panic (TestPanickingHookFailsItsBatchOnly). But a panic while a lane
// takes its connection (transport.go take: t.std.Conn(), then identify's
// CLIENT INFO pipeline) leaves that *redis.Conn unclosed: it holds its pool
// connection for good. Four such panics on a pool of four and the
// application's own commands wait out PoolTimeout, and every lock fails,
// long after the hook stopped panicking.
func TestPanicWhileTakingAConnectionLeaksNone(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) {
		o.PoolSize = 4 // one lane
		o.PoolTimeout = 300 * time.Millisecond
	})
	defer rdb.Close()
	h := &lateSpanHook{}
	rdb.AddHook(h)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(200*time.Millisecond))
	h.left.Store(1 << 20) // every take panics, the background ones (an undo, a tick) too
	for i := range 4 {
		if _, err := c.Obtain(ctx, "k", time.Minute); err == nil {
			t.Fatalf("Obtain %d succeeded while the hook panics", i)
		}
	}
	h.left.Store(0) // The hook panics no more.
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("the application's PING after the hook's panics: %v (pool: %+v)", err, *rdb.PoolStats())
	}
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("Obtain after the hook's panics: %v (pool: %+v)", err, *rdb.PoolStats())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOutageIsNoRefusal: LostReason's doc: Refused is "a renewal was
// refused: another owner, or the key gone from too many masters"; RanOut
// is "renewals failed (or none completed) until the validity ran out". A
// renewal runs on a context that ends at the validity's end (watchdog.go
// run), and one still waiting on frozen masters then returns ErrLockLost,
// "the validity ran out before a quorum confirmed" (lock.go
// extendQuorum); the watchdog labels every ErrLockLost from a renewal
// Refused. An outage of a majority is reported to metrics and logs as
// another owner taking the lock.
func TestOutageIsNoRefusal(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	servers, _, c := cluster(t, 3, redlock.WithObserver(rec), redlock.WithNodeTimeout(300*time.Millisecond))
	l, err := c.Obtain(ctx, "job", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop, err := l.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	takeDown(t, "frozen", servers[:2]...)
	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock was never declared lost")
	}
	stop()
	lost := all[*redlock.LostEvent](rec)
	if len(lost) != 1 || lost[0].Reason != redlock.RanOut {
		for _, e := range lost {
			t.Logf("lost: %s: %v", e.Reason, e.Cause)
		}
		t.Fatalf("a majority frozen, nobody else near the lock: %d lost events, want one with reason %q", len(lost), redlock.RanOut)
	}
}

// TestBarrierSparesStrangersOnAUnixSocket: the barrier kills a connection
// given up by "CLIENT KILL ID ... ADDR ..., both filters, so that a
// restarted master's new client with a reused ID is spared" (transport.go).
// On a Unix socket (MasterOptions takes unix:// URLs) every client's addr
// is the socket's path and ":0": the address tells no one apart. After a
// restart, client IDs start again from 1, and the lane's first batch kills
// whichever new client got the ID its old connection had: here the
// application's own connection.
func TestBarrierSparesStrangersOnAUnixSocket(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "rl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "r.sock")
	servers := redistest.Start(t, 1, redistest.Options{Args: []string{"--unixsocket", sock, "--unixsocketperm", "700"}})
	opts, err := redlock.MasterOptions("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	opts.PoolSize, opts.ReadTimeout = 4, time.Second // one lane
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(500*time.Millisecond))
	l, err := c.Obtain(ctx, "warm", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	direct := redistest.Clients(t, servers)
	var laneID int64
	for _, line := range strings.Split(direct[0].ClientList(ctx).Val(), "\n") {
		if strings.Contains(line, "cmd=evalsha") || strings.Contains(line, "cmd=set") {
			fmt.Sscanf(line[strings.Index(line, "id="):], "id=%d", &laneID)
		}
	}
	if laneID == 0 {
		t.Fatalf("no lane connection in CLIENT LIST:\n%s", direct[0].ClientList(ctx).Val())
	}
	if err := servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	// The application reconnects: one of its connections gets the lane's old ID.
	app := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, MaxRetries: -1, PoolSize: 1})
	defer app.Close()
	var pinned []*redis.Conn
	defer func() {
		for _, cn := range pinned {
			cn.Close()
		}
	}()
	var stranger *redis.Conn
	for stranger == nil {
		cn := app.Conn()
		id, err := cn.ClientID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if id > laneID {
			t.Skipf("the restarted master gave IDs past %d", laneID)
		}
		if id == laneID {
			stranger = cn
		} else {
			pinned = append(pinned, cn)
			app = redis.NewClient(&redis.Options{Network: "unix", Addr: sock, MaxRetries: -1, PoolSize: 1})
			defer app.Close()
		}
	}
	defer stranger.Close()
	if err := stranger.Ping(ctx).Err(); err != nil {
		t.Fatalf("the application's connection before the lane's first batch: %v", err)
	}
	if _, err := c.Obtain(ctx, "k", time.Minute); err != nil {
		t.Fatalf("Obtain after the restart: %v", err)
	}
	if err := stranger.Ping(ctx).Err(); err != nil {
		t.Fatalf("the application's connection (ID %d, the lane's before the restart) after the lane's first batch: %v", laneID, err)
	}
}

// TestReleasedLockLeavesNoKeyAfterABusyScript: a Release that could not
// reach a master is kept and sent again "when the master answers again",
// so that a released lock leaves no key behind once the faults stop (the
// chaos checker's rule; TestReleasedLockLeavesNoKeyAfterAStall). A master
// busy with a slow script (or loading its AOF after a restart) answers
// every command with an error reply, BUSY (or LOADING): the Release did not
// run, but an error reply counts as an answer (transport.go keep: isReply),
// so it is not kept. Release returns nil with the other two masters, and
// the key stays on the busy one for its whole TTL after the script ends.
func TestReleasedLockLeavesNoKeyAfterABusyScript(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3, redistest.Options{Args: []string{"--lua-time-limit", "50"}})
	direct := redistest.Clients(t, servers)
	c := newClient(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(500*time.Millisecond))
	l, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	busy := servers[2].Client()
	defer busy.Close()
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
	time.Sleep(time.Second) // the master answers again
	if vs := holdersOf(t, direct, "k"); count(vs, l.Token()) > 0 {
		t.Fatalf("a second after the script ended, the masters hold %q (TTL on master 2: %v)", vs, direct[2].PTTL(ctx, "k").Val().Round(time.Second))
	}
}

// TestRenewalAfterItsPauseIsOneRoundTrip: TestExtendAfterAPauseIsOneRoundTrip
// pinned "every Extend that follows a pause of more than 20ms, which is
// every watchdog renewal (every ttl/3), costs two round trips instead of
// one", with a pause of 100ms. 29b15ce made a lane keep its connection
// for 1s of idleness (transport.go connIdle): a renewal every ttl/3 of a
// lock of 3s or more still finds it given back, and pays a CLIENT INFO
// round trip before its Extend (transport.go take). Here a lock of 6s,
// renewed every 2s as by default, on a master 40ms away: 85ms a renewal.
// At a7b7acd (before 29b15ce) the CLIENT INFO went out in the batch's own
// pipeline, and this test passes there. The same holds for any lock taken
// after a second of idleness: TestSporadicObtainIsOneRoundTrip.
func TestRenewalAfterItsPauseIsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	p, err := redistest.NewProxy(servers[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rdb := servers[0].Client(func(o *redis.Options) {
		o.Addr = p.Addr()
		o.PoolSize = 4 // one lane
	})
	defer rdb.Close()
	rec := &recorder{}
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(time.Second), redlock.WithObserver(rec))
	l, err := c.Obtain(ctx, "k", 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 6*time.Second); err != nil { // scripts loaded
		t.Fatal(err)
	}
	p.DelayOpen(20*time.Millisecond, 20*time.Millisecond) // a 40ms round trip
	_, stop, err := l.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4500 * time.Millisecond) // two renewals
	stop()
	var worst time.Duration
	n := 0
	for _, e := range all[*redlock.ExtendEvent](rec) {
		if e.Renewal {
			n++
			worst = max(worst, e.Latency)
		}
	}
	if n == 0 {
		t.Fatal("no renewal")
	}
	if worst > 70*time.Millisecond {
		t.Fatalf("%d renewals every 2s on a master 40ms away took up to %v: two round trips", n, worst.Round(time.Millisecond))
	}
}

// TestReleaseDuringARenewalLogsNoFailure: since 29b15ce a Release cancels
// the watchdog's renewal in flight (lock.go lockFor). That renewal is
// reported as an ExtendEvent with Renewal set and Outcome Cancelled, and
// SlogObserver logs every renewal whose outcome is not Extended at Warn,
// "redlock: renewal failed": a clean Release on a slow network logs a
// failure that never happened, the one a user's alert would watch.
func TestReleaseDuringARenewalLogsNoFailure(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	clients, proxies := proxied(t, servers, true)
	h := &capture{}
	c := newClient(t, clients, redlock.WithNodeTimeout(time.Second), redlock.WithObserver(redlock.SlogObserver(slog.New(h))))
	l, err := c.Obtain(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil { // scripts loaded
		t.Fatal(err)
	}
	for _, p := range proxies {
		p.DelayOpen(100*time.Millisecond, 100*time.Millisecond) // slow, not down
	}
	_, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	time.Sleep(400 * time.Millisecond) // a renewal in flight (it takes 200ms)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Level >= slog.LevelWarn {
			r.Attrs(func(a slog.Attr) bool { t.Logf("  %s=%v", a.Key, a.Value); return true })
			t.Errorf("a Release that succeeded, on masters that all answered, logged %q at %v", r.Message, r.Level)
		}
	}
}

// TestInspectReadsEveryKeyObtainTakes: Inspect reads the lock key and its
// fence counter in one script (inspect.go), and on a Redis Cluster both
// must share a slot. counterKey gives them one only when the key has a hash
// tag or no '}' at all; Client.check refuses the others only WithFencing.
// A Client without fencing takes the lock on "job}1" on a Cluster master,
// and Inspect never reads it: CROSSSLOT, on every call.
func TestInspectReadsEveryKeyObtainTakes(t *testing.T) {
	ctx := context.Background()
	rc := redistest.StartCluster(t, 3)
	cc := rc.Client(func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
	defer cc.Close()
	c, err := redlock.NewSingle(cc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Obtain(ctx, "job}1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	s, err := c.Inspect(ctx, "job}1")
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Masters[0]; m.Err != nil || m.Token != l.Token() {
		t.Fatalf("Inspect of a lock Obtain took: %+v", m)
	}
}

// TestSporadicObtainIsOneRoundTrip: a lock taken now and then (here every
// 1.2s) on masters 40ms away. Since 29b15ce a lane that was idle for 1s
// takes a connection with a CLIENT INFO round trip of its own before the
// batch (transport.go take, identify): Obtain takes 84ms, where at a7b7acd
// it took 42ms (the CLIENT INFO rode in the batch's pipeline).
func TestSporadicObtainIsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	clients, proxies := proxied(t, servers, true)
	c := newClient(t, clients, redlock.WithNodeTimeout(time.Second))
	l, err := c.Obtain(ctx, "warm", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil { // scripts loaded
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		p.DelayOpen(20*time.Millisecond, 20*time.Millisecond) // a 40ms round trip
	}
	var best time.Duration = time.Hour
	for range 3 {
		time.Sleep(1200 * time.Millisecond) // now and then
		start := time.Now()
		l, err := c.Obtain(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		best = min(best, time.Since(start))
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if best > 70*time.Millisecond {
		t.Fatalf("an Obtain every 1.2s on masters 40ms away took at best %v: two round trips", best.Round(time.Millisecond))
	}
}

// TestPausedWritesDoNotDrainThePool: a master that reads but runs no write
// (CLIENT PAUSE WRITE) made every batch time out on a fresh connection.
// Each such connection became one more connection to kill, held out of the
// client's pool, and go-redis stamps a pipeline's timeout on every command
// of it, the answered CLIENT KILL too, so none was ever let go: within a
// second the lanes held the whole pool. The application's own commands
// then failed with a pool timeout, and after the pause every lock request
// did too, for good (the lanes could take no connection to run the barrier
// on). The subtest "sigstop" passed before the fix too: a stopped master
// answers no barrier, and a fresh connection whose barrier went unanswered
// must go back to the pool, not join the connections to kill.
func TestPausedWritesDoNotDrainThePool(t *testing.T) {
	for _, stall := range []string{"client pause write", "sigstop"} {
		t.Run(stall, func(t *testing.T) {
			ctx := context.Background()
			servers := redistest.Start(t, 1)
			admin := redistest.Clients(t, servers)[0]
			rdb := redis.NewClient(&redis.Options{
				Addr: servers[0].Addr(), PoolSize: 8, PoolTimeout: 200 * time.Millisecond,
				ContextTimeoutEnabled: true, MaxRetries: -1, Protocol: 2,
			})
			defer rdb.Close()
			c, err := redlock.NewSingle(rdb, redlock.WithNodeTimeout(30*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if l, err := c.Obtain(ctx, "warm", time.Second); err != nil {
				t.Fatal(err)
			} else if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			const pause = 1200 * time.Millisecond
			if stall == "sigstop" {
				if err := servers[0].Stop(); err != nil {
					t.Fatal(err)
				}
				time.AfterFunc(pause, func() { servers[0].Cont() })
			} else if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			pausedAt := time.Now()
			var wg sync.WaitGroup
			for w := range 4 { // keys on every lane
				wg.Go(func() {
					for i := 0; time.Since(pausedAt) < pause-200*time.Millisecond; i++ {
						if l, err := c.Obtain(ctx, fmt.Sprintf("k%d-%d", w, i), time.Second); err == nil {
							l.Release(ctx)
							t.Errorf("obtained a lock while the master ran no write")
						}
					}
				})
			}
			wg.Wait()
			if stall != "sigstop" {
				// Still paused: the application's own read goes through its pool.
				if err := rdb.Ping(ctx).Err(); err != nil {
					t.Errorf("the application's PING while the master is paused: %v (pool %+v)", err, *rdb.PoolStats())
				}
			}
			time.Sleep(time.Until(pausedAt.Add(pause + 50*time.Millisecond)))
			deadline := time.Now().Add(2 * time.Second)
			for {
				l, err := c.Obtain(ctx, "after", time.Second)
				if err == nil {
					l.Release(ctx)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("2s after the stall ended, Obtain still fails: %v (pool %+v)", err, *rdb.PoolStats())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
