package wire

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/scripts"
)

// This file is the transport over go-redis: how a lane's batch reaches one
// master. Its concerns each have a file: the lane's own connection, with
// its client ID, the master's run_id and clock offset (conn.go); the
// barrier that keeps order across connections (barrier.go); the Releases
// kept for a master that did not answer (kept.go); replica acks (acks.go);
// a Cluster master's shared sending (shared.go). The rules of the sending
// itself, each with the test that fails when it breaks:
//
//   - A batch whose connection was closed (by the master: a restart, a
//     kill; or by go-redis: its Sentinel client's failover) is sent
//     once more on a fresh one, after the barrier (on a Unix socket none is
//     needed: nothing of a closed connection runs later), as requests that
//     are safe to run twice: an acquire that finds its own token holds the
//     lock. A Release is sent as it was: a key found gone may be a restart's
//     loss, which the caller must hear of. (TestExtendRetakesVanishedKey,
//     TestRetryAfterResetDoesNotMisreportObtain, TestReleaseAfterARestartReportsTheLoss,
//     TestConnectionClosedUnderTheLane, TestWaitThroughSentinel)
//   - Scripts are lost whole (a restart, SCRIPT FLUSH), so every script is
//     loaded before the first script request, in the batch's own pipeline,
//     and a NOSCRIPT batch is rerun in order. (TestScriptsLoadedBeforeFirstUse,
//     TestScriptCacheFlushed)
//   - A pipeline that failed leaves no command without an error: go-redis
//     does when it could not set the connection up for a reason the server
//     gave (WRONGPASS). (TestWrongPasswordNeverGrants)
//   - Commands are reused and alias their request's arguments; go-redis is
//     done with a command when Process or Exec returns, and a batch that
//     panicked gives its commands up. (request.command,
//     TestPanickedBatchIsNotResent)

// tickEvery is how often a lane that holds a connection, or kept Releases,
// looks at them while it has nothing else to do; tickBudget bounds what a
// tick sends, and so does the node timeout when it is shorter (Master.budget):
// Close waits for a tick in flight and then sends the kept Releases once
// more, and must stay within a few node timeouts.
const (
	tickEvery  = 50 * time.Millisecond
	tickBudget = 200 * time.Millisecond
)

// A redisTransport is the transport over go-redis of one lane.
type redisTransport struct {
	rdb   redis.UniversalClient
	std   *redis.Client // rdb when it is standalone, else nil (no connection of our own)
	fresh bool          // every request needs a new command (a sharded client; see request.command)
	// st is what the master's transports learn of it and share: scripts
	// loaded, the barrier's permission, the run_id, the clock offset.
	st      *state
	cluster bool        // the master is a Redis Cluster: a kept Release announces on its key's sharded channel
	ctx     deadlineCtx // the running batch's deadline

	// Replica acks: how many (0: no WAIT), boxed, and how long the master
	// waits for them (acks.go).
	acks    int
	acksArg any
	ackWait time.Duration
	budget  time.Duration // what a tick (and close) may take

	conn    *redis.Conn // the lane's own connection (std only)
	pipe    redis.Pipeliner
	id      int64         // conn's client ID on the master; 0 when unknown
	addr    string        // conn's address as the master sees it
	took    time.Time     // when conn was taken from the pool
	used    time.Time     // when conn last carried a batch
	batches int           // batches conn carried since it was taken
	idle    time.Duration // Config.ConnIdle
	local   bool          // the master is on a Unix socket: its addresses tell no client apart

	kill     []victim      // connections given up with requests of unknown fate
	pending  []keptRelease // Releases to send again, after the barrier
	sent     []int         // which of pending this batch's extra commands carry, in order
	cmds     []redis.Cmder
	extra    []*redis.Cmd // this batch's barrier and pending commands
	joins    []join       // this batch's runs of Extends, each one command (joined.go)
	joinArgv [][]any      // backs the joins' arguments

	wait      *redis.Cmd // replica acks: the WAIT after a batch with grants, reused
	waitArgv  [3]any     // backs wait's arguments
	waitMs    int64      // the last WAIT timeout, in ms, and its box
	waitMsArg any
}

// deadlineCtx is the context a batch runs on: a deadline for go-redis's
// socket timeouts without a timer (nothing ever cancels it), and, for a
// batch of one caller's requests, that caller's values, so that a go-redis
// hook sees the caller's span as its parent (a Release's last request and
// the same caller's next call can share a batch). A batch of several
// callers' requests carries none: a pipeline hook sees one context for the
// batch. (TestBatchCarriesItsOneCallersValues)
type deadlineCtx struct {
	at   time.Time
	vals context.Context // nil, or the one caller's context
}

// oneCaller returns the context every request of batch carries, or nil
// when they carry different ones (or a context of a type == cannot
// compare).
func oneCaller(batch []*request) (vals context.Context) {
	defer func() {
		if recover() != nil {
			vals = nil
		}
	}()
	vals = batch[0].op.Vals
	for _, r := range batch[1:] {
		if r.op.Vals != vals {
			return nil
		}
	}
	return vals
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
		at = later(at, r.op.Deadline)
		scripts = scripts || r.kind() != KindAcquire
	}
	t.ctx = deadlineCtx{at: at, vals: oneCaller(batch)}
	ctx := &t.ctx // a pointer: no allocation to make it a context.Context
	skew := t.st.clock.Load()
	for _, r := range batch {
		r.skew = skew
		r.build(false, t.fresh)
	}
	t.send(ctx, batch, scripts && !t.st.loaded.Load(), now)
	if again := t.closedConn(batch); len(again) > 0 && time.Now().Before(at) {
		// The master closed the connection: it may have run some of
		// these, so they go again as requests safe to run twice, on a
		// fresh connection, after the barrier.
		for _, r := range again {
			r.again = r.kind() != KindRelease
			if r.kind() == KindRelease && now.Before(r.op.release.KeyEnd) {
				// Its first run may have deleted the key: finding it gone
				// (or another's) is then its own doing, unless the fresh
				// connection finds the master restarted (deletedBefore).
				r.op.release.Reached |= Bit(r.idx)
			}
			r.build(false, t.fresh)
		}
		t.send(ctx, again, !t.st.loaded.Load(), time.Now())
	}
	retry := 0
	for i, r := range batch {
		if noScript(r.cmd.Err()) {
			batch[retry], batch[i] = r, batch[retry]
			retry++
		}
	}
	if retry > 0 {
		t.st.loaded.Store(false)
	}
	if retry > 0 && retry < scriptRequests(batch) {
		// Some of the batch's scripts ran where others were missing:
		// another process loaded its own scripts only, after the master
		// lost its cache. Were they rerun, the missing ones could run after
		// a later request of the same lock that ran: they fail on this
		// master, and the next batch loads every script first.
		// (TestAJoinThatFindsItsScriptMissingIsNotRunAfterALaterRelease)
		retry = 0
	}
	if retry > 0 {
		// The master lost its script cache whole, so the requests that
		// failed are all the batch's script requests, and rerunning them
		// in order keeps the order of one lock's requests (an Extend never
		// runs after the Release that followed it).
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
		r.val, r.err = r.result(t.st)
		if r.err != nil && r.err != ErrTaken && r.err != ErrAbsent && r.err != ErrPastValidity {
			t.failed(r)
		}
		if r.err == ErrPastValidity && t.conn != nil && t.st.clockKnown.Load() {
			t.giveBack() // the clock offset is stale: the next connection measures it again (state.sawClock)
		}
	}
	t.keep(batch)
}

// scriptRequests counts the requests of batch sent as scripts: all but
// the plain SETs of acquires.
func scriptRequests(batch []*request) (n int) {
	for _, r := range batch {
		if r.cmd.Name() != "set" {
			n++
		}
	}
	return n
}

// failed notes r's failure as the master's last when it says why
// (state.sawFailure): the root names it in the error of a request of the
// master's that timed out (Master.WithCause).
// (TestRefusedMastersNameTheirCause, TestWireKeepsTheLastCauseOfAFailure)
func (t *redisTransport) failed(r *request) {
	t.st.sawFailure(r.err)
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
		t.ctx = deadlineCtx{at: now.Add(t.budget)}
		t.send(&t.ctx, nil, false, now)
	}
	return t.conn != nil || len(t.pending) > 0 || len(t.kill) > 0
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
	t.pending = slices.DeleteFunc(t.pending, func(k keptRelease) bool { return k.stale(now) })
	t.sent = t.sent[:0]
	for i := range t.pending {
		if now.Before(t.pending[i].notBefore) {
			continue // a recheck, not due yet
		}
		var r request
		t.buildKept(&r, &t.pending[i])
		t.addExtra(r.cmd)
		t.sent = append(t.sent, i)
	}
	var loads [len(scripts.All)]*redis.Cmd
	if load {
		for i, s := range scripts.All {
			loads[i] = redis.NewCmd(ctx, "script", "load", s.SrcArg)
			t.cmds = append(t.cmds, loads[i])
		}
	}
	var wait *redis.Cmd
	if t.acks > 0 {
		wait = t.waitCmd(batch)
	}
	switch {
	case len(t.cmds) == 0 && len(batch) == 1 && wait == nil:
		_ = t.conn.Process(ctx, batch[0].cmd) // one command: Process spares the pipeline's slice
	case len(t.cmds)+len(batch) > 0:
		t.appendCmds(ctx, batch)
		if wait != nil {
			t.cmds = append(t.cmds, wait) // last: it covers every write before it
		}
		_ = t.pipe.BatchProcess(ctx, t.cmds...)
		_, err := t.pipe.Exec(ctx)
		stamp(t.cmds, err)
		t.split()
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
			case !Answered(err):
				t.keepAgain(o)
				if !isReply(err) && broken == nil {
					broken = err
				}
			case absentAgain(c):
				t.recheck(o.op, now)
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
		t.st.loaded.Store(ok)
	}
	return broken
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

// reset drops the connection after a batch panicked: its state is
// unknown, and so is what the commands of the batch still hold.
func (t *redisTransport) reset([]*request) {
	clear(t.cmds)
	t.cmds = t.cmds[:0]
	clear(t.extra)
	t.extra = t.extra[:0]
	t.sent = t.sent[:0]            // what it sent of the kept Releases stays kept
	t.wait = nil                   // go-redis may still hold it
	t.joins, t.joinArgv = nil, nil // so may it the joins' arguments
	t.drop(false)
}

// close sends the kept Releases one last time, within tickBudget, and
// gives back everything the transport holds. A recheck not due yet is
// waited for (its time is at most the longer of a node timeout and 500ms
// after the Release that kept it: ReleaseFacts.Recheck), so that
// Client.Close right after a hand-over's Release still sends it in time.
// (TestCloseSendsTheHandOverRecheck)
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
		t.ctx = deadlineCtx{at: now.Add(t.budget)}
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

// Answered reports whether the master ran the command: it replied, and not
// with an error saying it runs nothing now (busy with a script, loading
// its data, cut off from its own master, a Cluster slot moving or its
// cluster down, a write refused for want of replicas (min-replicas-to-write)
// or of a disk (MISCONF), a replica that takes no write).
func Answered(err error) bool {
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
