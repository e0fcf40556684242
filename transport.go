package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the transport over go-redis: how a lane's batch reaches one
// master. Its rules, each with the test that fails when it breaks:
//
//   - On a standalone master (a *redis.Client: plain or Sentinel), the lane
//     keeps a connection of its own while it is in use, so a batch pays no
//     pool checkout, and knows its client ID and address on the server: a
//     CLIENT INFO round trip when it takes one. (TestTransportKnowsItsConnection)
//   - Order holds across connections: a connection given up with requests
//     whose fate is unknown (a timeout, a network error, a panic) may still
//     deliver them to the master later, and a later request of the same key
//     on a fresh connection could overtake them (a Release undone by an
//     Extend's late re-take, an acquire that lands after its undo). So the
//     fresh connection's first commands, in the round trip that learns its
//     ID, kill the old one (CLIENT KILL ID ... ADDR ..., both filters, so
//     that a restarted master's new client with a reused ID is spared):
//     once the master has answered it, nothing of the old connection runs
//     any more, and only then does a lock request go out. Until then the
//     old connection stays out of the client's pool, so that the
//     application never gets a connection the lane will kill; a fresh
//     connection whose barrier got no answer carried no lock request and
//     goes back, so a lane holds at most one such connection however long
//     the master stalls, and one whose socket failed goes back at once
//     (go-redis discards it). A fresh connection's round trip is no answer
//     when the master replies BUSY or LOADING: the barrier and the run_id
//     wait for the next. (TestReleaseIsNotUndoneByStraggler,
//     TestBarrierKillsNoStranger, TestBarrierKillsNoStrangerAfterARefusal,
//     TestPausedWritesDoNotDrainThePool,
//     TestVictimOnAPoolOfOneIsKilledAfterTheStall,
//     TestDryPoolGivesTheApplicationNoVictim,
//     TestConnectionTakenWhileBusyKeepsTheBarrier)
//   - Where that barrier is not available (an ACL that denies CLIENT KILL
//     or CLIENT INFO, a Redis before 6.2, a Cluster master), a straggler can
//     still land after a later request: an Extend never shortens a key
//     (extendScript), so it cannot cut a renewed lock, and its re-take is
//     refused past its deadline by the master's clock; a straggling acquire
//     or re-take that lands after a Release keeps the key until its TTL.
//     (TestShorterStragglerCannotShortenAHeldLock)
//   - A batch whose connection was closed (by the master: a restart, a
//     kill; or by go-redis: its Sentinel client's failover) is sent
//     once more on a fresh one, after the barrier (on a Unix socket none is
//     needed: nothing of a closed connection runs later), as requests that
//     are safe to run twice: an acquire that finds its own token holds the
//     lock. A Release is sent as it was: a key found gone may be a restart's
//     loss, which the caller must hear of. (TestExtendRetakesVanishedKey,
//     TestRetryAfterResetDoesNotMisreportObtain, TestReleaseAfterARestartReportsTheLoss,
//     TestConnectionClosedUnderTheLane, TestWaitThroughSentinel)
//   - A Release that could not reach the master (a timeout, a stalled lane,
//     no connection, a master that answers that it ran nothing: BUSY,
//     LOADING) is kept and sent again after the barrier, when the master
//     answers again, and when the Client closes, until its key would have
//     expired anyway: a straggling acquire that lands after a stall must not
//     keep a released lock's key for a whole TTL. (TestReleasedLockLeavesNoKeyAfterAStall,
//     TestCloseSendsKeptReleases, TestReleasedLockLeavesNoKeyAfterABusyScript)
//   - A Release by a handle that did not obtain its lock (Client.Attach)
//     that finds the key absent is kept too, and sent once more when its
//     recheck time comes (a node timeout after it), then no more: the
//     Obtain that took the lock, in another Client, may have a request to
//     this master still on its way, which would land after the Release and
//     keep its key for a whole TTL. Close waits for that time (at most a
//     node timeout) and sends it. It is owner-checked, as every Release.
//     (TestHandOverLeavesNoStrayKey, TestCloseSendsTheHandOverRecheck,
//     TestHandOverRecheckNeverDeletesAnotherOwnersKey)
//   - An Extend's bounds (the validity's end, the re-take deadline:
//     extendScript) reach each master as its own clock reads them: the
//     fresh connection's round trip that learns its ID also measures the
//     master's clock offset (INFO server: server_time_usec; node.sawClock,
//     which says why it may err low only), and the batch built before it
//     is built again with it, so that a master whose clock is ahead of the
//     client's renews, and one behind runs no straggler late. Where none is
//     measured (INFO denied, a Redis without the field, a Cluster master,
//     whose lanes take no connection of their own) the offset is 0: the
//     clocks are assumed to agree. (TestExtendOnAMasterWhoseClockIsAhead,
//     TestClockOffsetIsMeasuredOnEveryFreshConnection,
//     TestExtendBoundsGoOutInTheMastersClock,
//     TestMasterClockBehindRunsNoStragglerPastTheValidity,
//     TestAttachOnAMasterWhoseClockIsAhead)
//   - Scripts are lost whole (a restart, SCRIPT FLUSH), so every script is
//     loaded before the first script request, in the batch's own pipeline,
//     and a NOSCRIPT batch is rerun in order. (TestScriptsLoadedBeforeFirstUse,
//     TestScriptCacheFlushed)
//   - A pipeline that failed leaves no command without an error: go-redis
//     does when it could not set the connection up for a reason the server
//     gave (WRONGPASS). (TestWrongPasswordNeverGrants)
//   - With WithReplicaAcks, a batch with at least one grant (an acquire, a
//     fence raise, an Extend) ends with one WAIT on the same connection, in
//     the same pipeline: WAIT counts the replicas that acknowledged every
//     earlier write of its connection, so one covers the whole batch (and
//     the kept Releases before it), and its answer decides each grant of
//     the batch. It blocks the connection, so its timeout is cut to leave
//     the batch's earliest deadline room for the reply, a late one too
//     (Redis answers a timed-out WAIT on its next cron tick), down to
//     half the time left; it is never 0 (WAIT's "forever"). A
//     batch without a grant, and a Client without the option, send none.
//     (TestReplicaAcksGrant, TestReplicaAcksFrozenReplica,
//     TestReplicaAcksWaitFitsTheDeadline, TestReplicaAcksShareOneWait,
//     TestReplicaAcksCostNothingWithout)
//   - Commands are reused and alias their request's arguments; go-redis is
//     done with a command when Process or Exec returns, and a batch that
//     panicked gives its commands up. (request.command,
//     TestPanickedBatchIsNotResent)

// connTurn is how long a lane keeps its connection in steady use (at
// least turnBatches batches since it took it) before it puts it back in
// the client's pool and takes one again. On a RESP3 connection go-redis
// peeks at the socket for push notifications before every command (a
// recvfrom syscall and three allocations) unless the connection was put
// back in its pool less than 5 seconds ago; a connection never put back
// paid that on every batch. Taking one costs a CLIENT INFO round trip, a
// price worth paying only for a connection in steady use: one that carries
// a batch now and then keeps the peek. Pushes still arrive: go-redis
// handles those that come with a batch's replies.
const (
	connTurn    = 4 * time.Second
	turnBatches = 256
)

// connIdle is how long a lane keeps its connection without using it before
// it gives it back to the client's pool, so that a lock taken now and then
// (a watchdog's renewal every ttl/3, a job every few seconds) pays no CLIENT
// INFO round trip: 15s covers the renewals of a lock of 45s. A master
// restarted meanwhile left the connection dead; the batch that finds it so
// goes again on a fresh one (see exec). Where that retry is not available
// (no barrier), the lane keeps an idle connection for bareIdle only, and the
// pool's health check replaces a dead one. A lane gives its connection back
// at once when the pool has no idle connection left: the application may be
// waiting for it. A variable for the tests.
var connIdle = 15 * time.Second

const bareIdle = time.Second

// tickEvery is how often a lane that holds a connection, or kept Releases,
// looks at them while it has nothing else to do; tickBudget bounds what a
// tick sends, and so does the node timeout when it is shorter (node.budget):
// Close waits for a tick in flight and then sends the kept Releases once
// more, and must stay within a few node timeouts.
const (
	tickEvery  = 50 * time.Millisecond
	tickBudget = 200 * time.Millisecond
)

// maxPending bounds the Releases a lane keeps for a master that does not
// answer; beyond it, the keys expire with their TTL.
const maxPending = 4096

type redisTransport struct {
	rdb   redis.UniversalClient
	std   *redis.Client // rdb when it is standalone, else nil (no connection of our own)
	fresh bool          // every request needs a new command (a sharded client; see request.command)
	node  *node         // the node's state: scripts loaded, the barrier's permission, the run_id
	ctx   deadlineCtx   // the running batch's deadline

	conn    *redis.Conn // the lane's own connection (std only)
	pipe    redis.Pipeliner
	id      int64         // conn's client ID on the master; 0 when unknown
	addr    string        // conn's address as the master sees it
	took    time.Time     // when conn was taken from the pool
	used    time.Time     // when conn last carried a batch
	batches int           // batches conn carried since it was taken
	idle    time.Duration // connIdle when the transport was made
	local   bool          // the master is on a Unix socket: its addresses tell no client apart

	kill    []victim // connections given up with requests of unknown fate
	pending []op     // Releases to send again, after the barrier
	sent    []int    // which of pending this batch's extra commands carry, in order
	cmds    []redis.Cmder
	extra   []*redis.Cmd // this batch's barrier and pending commands

	wait      *redis.Cmd // WithReplicaAcks: the WAIT after a batch with grants, reused
	waitArgv  [3]any     // backs wait's arguments
	waitMs    int64      // the last WAIT timeout, in ms, and its box
	waitMsArg any
}

// A victim is a connection to kill before the next batch. One that failed
// with a network error or a timeout is given back at once (go-redis
// discards it: it never reaches the application); one given up for another
// reason (a hook's error, a panic) stays out of the client's pool until it
// is killed (conn); when the pool runs dry meanwhile, it is killed on a
// connection dialed outside the pool (killOutside).
type victim struct {
	id   int64
	addr string
	conn *redis.Conn // nil once given back
}

// deadlineCtx is the context a batch runs on: a deadline for go-redis's
// socket timeouts without a timer (nothing ever cancels it), and, for a
// batch of one caller's request, that caller's values, so that a go-redis
// hook sees the caller's span as its parent. A batch of several callers'
// requests carries none: a pipeline hook sees one context for the batch.
type deadlineCtx struct {
	at   time.Time
	vals context.Context // nil, or the one caller's context
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.at, true }
func (c *deadlineCtx) Done() <-chan struct{}       { return nil }
func (c *deadlineCtx) Err() error                  { return nil }
func (c *deadlineCtx) Value(key any) any {
	if c.vals == nil {
		return nil
	}
	return c.vals.Value(key)
}

func (t *redisTransport) exec(batch []*request, now time.Time) {
	var at time.Time
	scripts := false
	for _, r := range batch {
		at = later(at, r.deadline)
		scripts = scripts || r.kind != opAcquire
	}
	t.ctx = deadlineCtx{at: at}
	if len(batch) == 1 {
		t.ctx.vals = batch[0].vals
	}
	ctx := &t.ctx // a pointer: no allocation to make it a context.Context
	skew := t.node.clock.Load()
	for _, r := range batch {
		r.skew = skew
		r.build(false, t.fresh)
	}
	t.send(ctx, batch, scripts && !t.node.loaded.Load(), now)
	if again := t.closedConn(batch); len(again) > 0 && time.Now().Before(at) {
		// The master closed the connection: it may have run some of
		// these, so they go again as requests safe to run twice, on a
		// fresh connection, after the barrier.
		for _, r := range again {
			r.again = r.kind != opRelease
			if r.kind == opRelease && now.Before(r.keyEnd) {
				// Its first run may have deleted the key: finding it gone
				// (or another's) is then its own doing, unless the fresh
				// connection finds the master restarted (deletedBefore).
				r.reached |= bit(r.idx)
			}
			r.build(false, t.fresh)
		}
		t.send(ctx, again, !t.node.loaded.Load(), time.Now())
	}
	retry := 0
	for i, r := range batch {
		if noScript(r.cmd.Err()) {
			batch[retry], batch[i] = r, batch[retry]
			retry++
		}
	}
	if retry > 0 {
		// The master lost its script cache. It loses it whole, so the
		// requests that failed are all the batch's script requests, and
		// rerunning them in order keeps the order of one lock's requests
		// (an Extend never runs after the Release that followed it).
		t.node.loaded.Store(false)
		for _, r := range batch[:retry] {
			r.build(false, t.fresh)
		}
		t.send(ctx, batch[:retry], true, now)
		for _, r := range batch[:retry] {
			if noScript(r.cmd.Err()) { // could not load: EVAL, one by one
				r.build(true, t.fresh)
				t.send(ctx, []*request{r}, false, now)
			}
		}
	}
	for _, r := range batch {
		r.val, r.err = r.result(t.node)
		if r.err == nil && t.node.acks > 0 && r.wantsAcks() {
			r.err = r.ackResult(t.node.acks)
		}
		if r.err == errPastValidity && t.conn != nil && t.node.clockKnown.Load() {
			t.giveBack() // the clock offset is stale: the next connection measures it again (node.sawClock)
		}
	}
	t.keep(batch)
}

// closedConn returns the requests of batch that failed because the master
// closed their connection (only where the barrier can make sure the old
// connection runs nothing more, or on a Unix socket: no proxy in between
// that may still hold them).
func (t *redisTransport) closedConn(batch []*request) []*request {
	if t.std == nil || (len(t.kill) == 0 && !t.local) {
		return nil
	}
	var again []*request
	for _, r := range batch {
		if err := r.cmd.Err(); err != nil && !isReply(err) && !r.again && connClosed(err) {
			again = append(again, r)
		}
	}
	return again
}

// keep holds on to the Releases of batch that did not run, to send them
// again after the barrier, and to those of a handle that did not obtain
// its lock that found the key absent, to send them once more at their
// recheck time.
func (t *redisTransport) keep(batch []*request) {
	for _, r := range batch {
		switch {
		case r.kind != opRelease || r.err == nil || r.err == ErrTaken:
		case r.err == errAbsent:
			t.recheck(r.op, time.Now())
		case !answered(r.err):
			t.keepOp(r.op)
		}
	}
}

// recheck keeps o, a Release that found the key absent, to send once more
// at its recheck time: a Release by a handle that did not obtain the lock
// (op.recheck), answered before then. The second sending is the last.
func (t *redisTransport) recheck(o op, now time.Time) {
	if o.recheck.IsZero() || !now.Before(o.recheck) {
		return
	}
	o.notBefore, o.recheck = o.recheck, time.Time{}
	if len(t.pending) >= maxPending/2 {
		return // rechecks leave room for Releases that got no answer (TestHandOverRechecksLeaveRoomForReleasesThatGotNoAnswer)
	}
	t.keepOp(o)
}

// due reports whether a kept Release may go now (a recheck waits for its
// time).
func (t *redisTransport) due(now time.Time) bool {
	for i := range t.pending {
		if !now.Before(t.pending[i].notBefore) {
			return true
		}
	}
	return false
}

// absentAgain reports whether c, a kept Release's command, found the key
// absent (the scripts' -1).
func absentAgain(c *redis.Cmd) bool {
	v, ok := c.Val().(int64)
	return ok && c.Err() == nil && v == -1
}

// keepOp keeps a Release to send again, until its key would have expired.
func (t *redisTransport) keepOp(o op) {
	if len(t.pending) >= maxPending || (!o.stale.IsZero() && time.Now().After(o.stale)) {
		return // the key expires with its TTL
	}
	o.done, o.inline, o.vals = nil, false, nil
	t.pending = append(t.pending, o)
}

// tick is the lane's idle work: give back a connection left unused, or
// one the application may be waiting for, and send the kept Releases
// (bounded by tickBudget). It reports whether it wants another tick.
func (t *redisTransport) tick(now time.Time) bool {
	if t.std == nil {
		t.sendPendingShared(now)
		return len(t.pending) > 0
	}
	if t.conn != nil && (now.Sub(t.used) >= t.idleFor() || t.poolDry()) {
		t.giveBack()
	}
	if t.due(now) || len(t.kill) > 0 {
		t.ctx = deadlineCtx{at: now.Add(t.node.budget)}
		t.send(&t.ctx, nil, false, now)
	}
	return t.conn != nil || len(t.pending) > 0 || len(t.kill) > 0
}

// poolDry reports whether the client's pool has no idle connection left
// while it is full: someone may be waiting for the one the lane holds.
func (t *redisTransport) poolDry() bool {
	s := t.std.PoolStats()
	return s.IdleConns == 0 && int(s.TotalConns) >= t.std.Options().PoolSize
}

// barrier reports whether a connection given up now would be killed before
// the next batch.
func (t *redisTransport) barrier() bool {
	return t.std != nil && t.node.killAllowed() && t.id != 0
}

// idleFor is how long the lane keeps its connection unused.
func (t *redisTransport) idleFor() time.Duration {
	if t.local || t.barrier() {
		return t.idle
	}
	return bareIdle
}

// send sends batch as one pipeline and reads the replies into the requests'
// commands. With load set, it first loads every script, in the same
// pipeline where it can.
func (t *redisTransport) send(ctx context.Context, batch []*request, load bool, now time.Time) {
	if t.std == nil {
		if len(batch) > 0 {
			t.sendShared(ctx, batch, load)
		}
		return
	}
	if t.conn != nil && ((now.Sub(t.took) > connTurn && t.batches >= turnBatches) || now.Sub(t.used) >= t.idleFor()) {
		t.giveBack()
	}
	if t.conn == nil {
		if err := t.take(ctx); err != nil {
			for _, r := range batch {
				r.cmd.SetErr(err)
			}
			return
		}
		t.rebase(batch)
	}
	t.used = now
	t.batches++
	t.extra = t.extra[:0]
	t.pending = slices.DeleteFunc(t.pending, func(o op) bool { return !o.stale.IsZero() && now.After(o.stale) })
	t.sent = t.sent[:0]
	for i := range t.pending {
		if now.Before(t.pending[i].notBefore) {
			continue // a recheck, not due yet
		}
		r := request{op: t.pending[i]}
		r.build(true, true) // EVAL: the master may have lost its scripts since
		t.addExtra(r.cmd)
		t.sent = append(t.sent, i)
	}
	var loads [len(scripts)]*redis.Cmd
	if load {
		for i, s := range scripts {
			loads[i] = redis.NewCmd(ctx, "script", "load", s.srcArg)
			t.cmds = append(t.cmds, loads[i])
		}
	}
	var wait *redis.Cmd
	if t.node.acks > 0 {
		wait = t.waitCmd(batch)
	}
	switch {
	case len(t.cmds) == 0 && len(batch) == 1 && wait == nil:
		_ = t.conn.Process(ctx, batch[0].cmd) // one command: Process spares the pipeline's slice
	case len(t.cmds)+len(batch) > 0:
		for _, r := range batch {
			t.cmds = append(t.cmds, r.cmd)
		}
		if wait != nil {
			t.cmds = append(t.cmds, wait) // last: it covers every write before it
		}
		_ = t.pipe.BatchProcess(ctx, t.cmds...)
		_, err := t.pipe.Exec(ctx)
		stamp(t.cmds, err)
		clear(t.cmds)
		t.cmds = t.cmds[:0]
	}
	broken := t.settle(load, loads[:])
	if wait != nil {
		if err := t.acked(batch, wait); err != nil && broken == nil {
			broken = err
		}
	}
	for _, r := range batch {
		if err := r.cmd.Err(); err != nil && !isReply(err) && broken == nil {
			broken = err
		}
	}
	if broken != nil {
		// A network error or a timeout: the connection may still carry
		// requests the master will run later. Give it up, and have the
		// next connection kill it first.
		t.drop(socketFailed(broken))
	}
}

// socketFailed reports whether err came from the connection's socket (a
// timeout, a reset, a closed connection): go-redis then saw the connection
// fail, and discards it when it is given back. An error a hook returned
// before the connection was used leaves it healthy.
func socketFailed(err error) bool {
	var ne *net.OpError
	return connClosed(err) || errors.As(err, &ne) || errors.Is(err, os.ErrDeadlineExceeded)
}

// connClosed reports whether err says the connection was closed under its
// command: by the master, on the way, or by go-redis itself (its Sentinel
// client closes its connections to the old master at a failover, the one a
// lane keeps included: net.ErrClosed).
func connClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// waitTick is how late Redis may answer a WAIT that timed out: it looks at
// blocked clients' timeouts when its event loop wakes, which an idle
// master does on its cron, 10 times a second at the default hz.
const waitTick = 100 * time.Millisecond

// waitCmd returns the WAIT to send after batch, or nil when no request of
// batch wants acknowledgements. WAIT holds back every reply of the batch,
// and a read past a deadline would break the connection (given up, and
// killed by the next one), so its timeout is the option's, cut so that
// even a late answer (waitTick) arrives before the batch's earliest
// deadline; but never below half the time left, which a healthy replica's
// acknowledgement needs more than the connection does. Never 0, which
// WAIT reads as "forever".
func (t *redisTransport) waitCmd(batch []*request) *redis.Cmd {
	var due time.Time
	want := false
	for _, r := range batch {
		if due.IsZero() || r.deadline.Before(due) {
			due = r.deadline
		}
		want = want || r.wantsAcks()
	}
	if !want {
		return nil
	}
	left := time.Until(due)
	ms := max(1, int64(min(t.node.ackWait, max(left/2, left-left/8-waitTick))/time.Millisecond))
	for _, r := range batch {
		if r.wantsAcks() {
			r.acked, r.ackMs, r.ackErr = 0, ms, errNoWait
		}
	}
	if ms != t.waitMs || t.waitMsArg == nil { // boxing allocates: keep the last box
		t.waitMs, t.waitMsArg = ms, ms
	}
	t.waitArgv = [3]any{"wait", t.node.acksArg, t.waitMsArg}
	if t.wait == nil || t.fresh {
		t.wait = redis.NewCmd(context.Background(), t.waitArgv[:]...)
	} else {
		t.wait.SetErr(nil)
		t.wait.SetVal(nil)
	}
	return t.wait
}

// acked gives the answer of the WAIT sent after batch to the requests of
// batch that want acknowledgements. It returns the WAIT's failure when it
// got no answer: the connection is then broken.
func (t *redisTransport) acked(batch []*request, wait *redis.Cmd) error {
	n, err := wait.Int64()
	for _, r := range batch {
		if r.wantsAcks() {
			if err == nil {
				r.acked, r.ackErr = n, nil
			} else {
				r.ackErr = err
			}
		}
	}
	if err != nil && !isReply(err) {
		return err
	}
	return nil
}

func (t *redisTransport) addExtra(c *redis.Cmd) {
	t.extra = append(t.extra, c)
	t.cmds = append(t.cmds, c)
}

// take takes a connection from the client's pool and learns its client ID
// and address (and, once per master, whether CLIENT KILL is allowed), in
// one round trip, which also kills the connections given up before it
// (the barrier). A connection the pool has just dialed was never put back
// in it, so go-redis would peek for pushes on its every command: it is put
// back once, and taken again.
//
// No lock request goes out before the barrier has run: a fresh connection
// whose barrier got no answer carried nothing but CLIENT commands, so it
// goes back to the pool rather than joining the victims. The lane thus
// holds at most one connection out of the pool, however long the master
// stalls; the application's pool never runs dry on the lane's victims.
//
// ctx's deadline bounds the wait for a connection: go-redis's pool waits
// until its PoolTimeout or ctx's Done, not ctx's deadline.
func (t *redisTransport) take(ctx context.Context) error {
	at, _ := ctx.Deadline()
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), at)
	defer cancel()
	if t.holdsVictims() && t.poolDry() {
		// The pool has no connection to spare for the barrier, and a held
		// victim may be what the application waits for: kill the victims
		// on a connection of our own, outside the pool, then let them go.
		if err := t.killOutside(ctx); err != nil {
			return err
		}
	}
	misses := t.std.PoolStats().Misses
	c := t.std.Conn()
	taken := false
	defer func() {
		if !taken { // failed, or a hook panicked: the pool gets it back
			c.Close()
		}
	}()
	id, addr, run, err := t.identify(ctx, c)
	if err == nil && t.std.PoolStats().Misses != misses {
		c.Close() // dialed: back to the pool once, stamped, and out again
		c = t.std.Conn()
		id, addr, run, err = t.identify(ctx, c)
	}
	if err != nil {
		return err
	}
	t.node.sawRunID(run)
	if strings.HasSuffix(addr, ":0") {
		// A Unix socket: every client's address is the socket's, and a
		// restarted master gives IDs anew, so CLIENT KILL could hit a
		// stranger. No barrier; nothing of a closed connection runs later.
		t.local, id = true, 0
	}
	taken = true
	t.conn, t.pipe, t.took, t.id, t.addr, t.batches = c, c.Pipeline(), time.Now(), id, addr, 0
	t.node.takenOnce.Do(func() { close(t.node.taken) })
	return nil
}

// rebase rebuilds the Extends of batch, built before a fresh connection
// measured the master's clock offset anew (take), with that offset: the
// master behind the connection may have changed (a failover), and the
// first batch on a lane's first connection was built with none.
// (TestAttachOnAMasterWhoseClockIsAhead)
func (t *redisTransport) rebase(batch []*request) {
	skew := t.node.clock.Load()
	for _, r := range batch {
		if r.kind == opExtend && r.skew != skew {
			r.skew = skew
			r.build(r.eval, t.fresh)
		}
	}
}

// holdsVictims reports whether a victim is still held out of the pool.
func (t *redisTransport) holdsVictims() bool {
	for _, v := range t.kill {
		if v.conn != nil {
			return true
		}
	}
	return false
}

// killOutside runs the barrier on a connection dialed for it alone, with
// the client's options but none of its hooks or pool, and gives the
// victims back once the master has killed them: a victim must not reach
// the application alive, since the barrier would kill it under its user.
func (t *redisTransport) killOutside(ctx context.Context) error {
	o := *t.std.Options()
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns = 1, 0, 1, 1
	rdb := redis.NewClient(&o)
	defer rdb.Close()
	kills := t.killCmds(ctx)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range kills {
			_ = p.Process(ctx, k)
		}
		return nil
	})
	if !t.killed(kills) {
		return fmt.Errorf("%w (%w)", errBarrier, err)
	}
	return nil
}

// killCmds returns the barrier: a CLIENT KILL for each victim.
func (t *redisTransport) killCmds(ctx context.Context) []*redis.Cmd {
	kills := make([]*redis.Cmd, len(t.kill))
	for i, v := range t.kill {
		kills[i] = redis.NewCmd(ctx, "client", "kill", "id", v.id, "addr", v.addr)
	}
	return kills
}

// killed reports whether the master ran every kill of the barrier, and if
// so lets the victims go: dead now, the pool's health check discards them.
// go-redis gives a pipeline's network error to all of its commands, those
// answered too: a reply read is in Val.
func (t *redisTransport) killed(kills []*redis.Cmd) bool {
	for _, k := range kills {
		if !replied(k) && !refusedCommand(k.Err()) {
			return false
		}
	}
	for _, v := range t.kill {
		if v.conn != nil {
			v.conn.Close()
		}
	}
	clear(t.kill)
	t.kill = t.kill[:0]
	return true
}

// errBarrier fails a batch whose fresh connection could not kill the
// connections given up before it: the master did not answer.
var errBarrier = fmt.Errorf("%w: the master did not run the barrier before it", errNoReply)

// identify asks c's client ID and address, whether CLIENT KILL is allowed
// if nobody asked yet, and the master's run_id (to see a restart) and
// clock (its offset, node.sawClock: INFO server says both); first of all
// it kills the connections given up before (t.kill), and closes them once
// the master has. An error is a failure to get an answer, or a barrier
// the master did not run; an ACL or a Redis that denies a question leaves
// the ID 0, or the run_id "" and the offset 0.
func (t *redisTransport) identify(ctx context.Context, c *redis.Conn) (int64, string, string, error) {
	kills := t.killCmds(ctx)
	info := redis.NewCmd(ctx, "client", "info") // not ClientInfoCmd: a name with '=' fails its parser
	server := redis.NewCmd(ctx, "info", "server")
	var probe *redis.Cmd
	if t.node.killKnown.Load() == 0 {
		probe = redis.NewCmd(ctx, "client", "kill", "id", int64(math.MaxInt64), "addr", "0.0.0.0:0")
	}
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range kills {
			_ = p.Process(ctx, k)
		}
		_ = p.Process(ctx, info)
		if probe != nil {
			_ = p.Process(ctx, probe)
		}
		_ = p.Process(ctx, server)
		return nil
	})
	replied := time.Now()
	if !t.killed(kills) {
		return 0, "", "", errBarrier
	}
	stamp([]redis.Cmder{info, server}, err)
	for _, c := range []*redis.Cmd{info, server} {
		if err := c.Err(); err != nil && (!isReply(err) || ranNothing(err)) {
			// No answer, or a master that runs nothing now (busy with a
			// script, loading): neither says whether it allows the barrier
			// or whether it restarted. The take fails; the next one asks
			// again.
			return 0, "", "", err
		}
	}
	runID := ""
	var usec int64
	clock := false
	if server.Err() == nil {
		s, _ := server.Val().(string)
		runID = infoField(s, "run_id")
		u, err := strconv.ParseInt(infoField(s, "server_time_usec"), 10, 64)
		usec, clock = u, err == nil && u > 0
	}
	t.node.sawClock(usec, replied, clock)
	if probe != nil {
		switch err := probe.Err(); {
		case err == nil:
			t.node.killKnown.Store(1)
		case refusedCommand(err): // an ACL, or a Redis without the filter
			t.node.killKnown.Store(2)
		}
	}
	if info.Err() != nil {
		return 0, "", runID, nil // denied, or an older Redis: no barrier on this connection
	}
	s, _ := info.Val().(string)
	id, addr := clientIdentity(s)
	return id, addr, runID, nil
}

// infoField returns the value of field in an INFO reply; "" without it.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// refusedCommand reports whether err says the command itself is not
// allowed or not known: NOPERM, or an unknown subcommand or option. Other
// error replies (BUSY, LOADING) say nothing of it.
func refusedCommand(err error) bool {
	if !isReply(err) {
		return false
	}
	s := err.Error()
	return strings.HasPrefix(s, "NOPERM") || strings.Contains(s, "nknown subcommand") || strings.Contains(s, "syntax error") || strings.Contains(s, "nknown command")
}

// clientIdentity reads the ID and the address of a CLIENT INFO line; 0 and
// "" for what it lacks.
func clientIdentity(info string) (id int64, addr string) {
	for _, f := range strings.Fields(info) {
		if v, ok := strings.CutPrefix(f, "id="); ok {
			id, _ = strconv.ParseInt(v, 10, 64)
		} else if v, ok := strings.CutPrefix(f, "addr="); ok {
			addr = v
		}
	}
	if addr == "" {
		id = 0
	}
	return id, addr
}

// settle reads the replies of the commands that went with the batch: the
// kept Releases, the script loads. It reports whether one of them failed
// without an answer, and how (the connection is then broken).
func (t *redisTransport) settle(load bool, loads []*redis.Cmd) (broken error) {
	if len(t.extra) > 0 {
		// The kept Releases went out after the barrier; keep those that
		// did not get an answer, and those not due yet.
		was := t.pending
		t.pending = nil
		for i, j := 0, 0; i < len(was); i++ {
			if j < len(t.sent) && t.sent[j] == i {
				j++
				continue
			}
			t.pending = append(t.pending, was[i])
		}
		now := time.Now()
		for k, c := range t.extra {
			o := was[t.sent[k]]
			switch err := c.Err(); {
			case !answered(err):
				t.keepOp(o)
				if !isReply(err) && broken == nil {
					broken = err
				}
			case absentAgain(c):
				t.recheck(o, now)
			}
		}
	}
	clear(t.extra)
	t.extra = t.extra[:0]
	t.sent = t.sent[:0]
	if load {
		ok := true
		for _, c := range loads {
			ok = ok && c.Err() == nil
		}
		t.node.loaded.Store(ok)
	}
	return broken
}

// drop gives up the lane's connection; failed says go-redis saw its socket
// fail (it then discards it when given back). With the barrier, the next
// connection kills it first, and one that did not fail (a hook's error, a
// panic) stays out of the client's pool until then, so that the
// application never gets a connection the lane will kill; without, it goes
// back.
func (t *redisTransport) drop(failed bool) {
	if t.conn == nil {
		return
	}
	switch {
	case !t.barrier():
		t.conn.Close()
	case failed:
		t.conn.Close()
		t.kill = append(t.kill, victim{t.id, t.addr, nil})
	default:
		t.kill = append(t.kill, victim{t.id, t.addr, t.conn})
	}
	t.conn, t.pipe, t.id = nil, nil, 0
}

// giveBack puts the lane's connection back in the client's pool.
func (t *redisTransport) giveBack() {
	t.conn.Close()
	t.conn, t.pipe, t.id = nil, nil, 0
}

// sendShared sends batch through the client's own pipeline: a Cluster
// picks a pooled connection per shard (no barrier is possible across
// them). Its context is cancelled at the deadline, so that go-redis's
// redirect backoff ends there too.
func (t *redisTransport) sendShared(ctx context.Context, batch []*request, load bool) {
	at, _ := ctx.Deadline()
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), at)
	defer cancel()
	if load {
		t.loadScripts(cctx) // a Cluster: SCRIPT LOAD goes to every shard
	}
	defer t.sawSlots(batch)
	if len(batch) == 1 {
		_ = t.rdb.Process(cctx, batch[0].cmd)
		return
	}
	pipe := t.rdb.Pipeline()
	for _, r := range batch {
		t.cmds = append(t.cmds, r.cmd)
	}
	_ = pipe.BatchProcess(cctx, t.cmds...)
	_, err := pipe.Exec(cctx)
	stamp(t.cmds, err)
	clear(t.cmds)
	t.cmds = t.cmds[:0]
}

// sawSlots notes, on a Cluster master, that go-redis has its slot map once
// a command of batch was answered: the shards' lanes may be used
// (shards.go).
func (t *redisTransport) sawSlots(batch []*request) {
	n := t.node
	if n.cluster == nil || n.slotsKnown.Load() {
		return
	}
	for _, r := range batch {
		if r.cmd != nil && answered(r.cmd.Err()) {
			n.slotsKnown.Store(true)
			return
		}
	}
}

// sendPendingShared sends the kept Releases of a Cluster master through its
// pooled connections (no barrier: they may still run before a straggler),
// and keeps those that get no answer.
func (t *redisTransport) sendPendingShared(now time.Time) {
	if !t.due(now) {
		return
	}
	var sent []op
	kept := t.pending[:0]
	for _, o := range t.pending {
		if now.Before(o.notBefore) { // a recheck, not due yet
			kept = append(kept, o)
		} else {
			sent = append(sent, o)
		}
	}
	clear(t.pending[len(kept):])
	t.pending = kept
	reqs := make([]*request, len(sent))
	for i := range sent {
		reqs[i] = &request{op: sent[i]}
		reqs[i].build(true, true) // EVAL: the master may have lost its scripts since
	}
	t.ctx = deadlineCtx{at: now.Add(t.node.budget)}
	t.sendShared(&t.ctx, reqs, false)
	for i, r := range reqs {
		switch {
		case !answered(r.cmd.Err()):
			t.keepOp(sent[i])
		case absentAgain(r.cmd):
			t.recheck(sent[i], time.Now())
		}
	}
}

// loadScripts loads every script on the master (on every shard of a
// Cluster: go-redis sends SCRIPT LOAD to all of them) before the first
// script request, so that no batch finds some of our scripts loaded and
// others not: a failed EVALSHA rerun after a later request of the same batch
// had run would reorder one lock's requests.
func (t *redisTransport) loadScripts(ctx context.Context) {
	for _, s := range scripts {
		if t.rdb.ScriptLoad(ctx, s.src).Err() != nil {
			return
		}
	}
	t.node.loaded.Store(true)
}

// reset drops the connection after a batch panicked: its state is
// unknown, and so is what the commands of the batch still hold.
func (t *redisTransport) reset([]*request) {
	clear(t.cmds)
	t.cmds = t.cmds[:0]
	clear(t.extra)
	t.extra = t.extra[:0]
	t.sent = t.sent[:0] // what it sent of the kept Releases stays kept
	t.wait = nil        // go-redis may still hold it
	t.drop(false)
}

// close sends the kept Releases one last time, within tickBudget, and
// gives back everything the transport holds. A recheck not due yet is
// waited for (its time is at most a node timeout after the Release that
// kept it), so that Client.Close right after a hand-over's Release still
// sends it in time. (TestCloseSendsTheHandOverRecheck)
func (t *redisTransport) close() {
	var last time.Time
	for i := range t.pending {
		last = later(last, t.pending[i].notBefore)
	}
	if d := time.Until(last); d > 0 {
		time.Sleep(d)
	}
	if t.std == nil {
		t.sendPendingShared(time.Now())
		return
	}
	if len(t.pending) > 0 || len(t.kill) > 0 {
		now := time.Now()
		t.ctx = deadlineCtx{at: now.Add(t.node.budget)}
		t.send(&t.ctx, nil, false, now)
	}
	if t.conn != nil {
		t.giveBack()
	}
	for _, v := range t.kill {
		if v.conn != nil {
			v.conn.Close()
		}
	}
	t.kill = nil
}

// stamp gives err, a pipeline's failure, to its commands that got no reply.
// go-redis leaves them without an error when the connection could not be
// set up for a reason the server gave (a wrong password: WRONGPASS), and a
// command with neither a reply nor an error would read as success.
func stamp(cmds []redis.Cmder, err error) {
	if err == nil {
		return
	}
	for _, c := range cmds {
		if c.Err() == nil && !replied(c) {
			c.SetErr(err)
		}
	}
}

// replied reports whether c holds a reply.
func replied(c redis.Cmder) bool {
	if c, ok := c.(*redis.Cmd); ok {
		return c.Val() != nil
	}
	return true
}

// isReply reports whether err is the master's answer (an error reply, or
// nil) rather than a failure to get one. go-redis returns replies unwrapped.
func isReply(err error) bool {
	_, ok := err.(redis.Error)
	return ok
}

// answered reports whether the master ran the command: it replied, and not
// with an error saying it runs nothing now (busy with a script, loading
// its data, cut off from its own master, a Cluster slot moving or its
// cluster down, a write refused for want of replicas (min-replicas-to-write)
// or of a disk (MISCONF), a replica that takes no write).
func answered(err error) bool {
	return err == nil || (isReply(err) && !ranNothing(err))
}

// ranNothingPrefixes begin the error replies of a master that ran nothing
// of the command and would run it later, or elsewhere after a failover.
var ranNothingPrefixes = [...]string{"BUSY ", "LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS", "MISCONF", "READONLY"}

// ranNothing reports whether err is an error reply of a master that runs
// no command for now: it is as good as down.
func ranNothing(err error) bool {
	if !isReply(err) {
		return false
	}
	s := err.Error()
	for _, p := range ranNothingPrefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
