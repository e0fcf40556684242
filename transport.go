package redlock

import (
	"context"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the transport over go-redis: how a lane's batch reaches one
// master. Its rules, each with the test that fails when it breaks:
//
//   - On a standalone master (a *redis.Client: plain or Sentinel), the lane
//     keeps a connection of its own while it is in use, so a batch pays no
//     pool checkout, and learns its client ID and address on the server
//     (CLIENT INFO, in the first batch's pipeline). (TestTransportKnowsItsConnection)
//   - Order holds across connections: a connection given up with requests
//     whose fate is unknown (a timeout, a network error, a panic) may still
//     deliver them to the master later, and a later request of the same key
//     on a fresh connection could overtake them (a Release undone by an
//     Extend's late re-take). So the fresh connection's first commands, in
//     the same pipeline as the batch, kill the old one (CLIENT KILL ID ...
//     ADDR ..., both filters, so that a restarted master's new client with
//     a reused ID is spared): once the master has run it, nothing of the
//     old connection runs any more. (TestReleaseIsNotUndoneByStraggler,
//     TestBarrierKillsNoStranger)
//   - Where that barrier is not available (an ACL that denies CLIENT KILL
//     or CLIENT INFO, a Redis before 6.2, the first batch of a connection
//     failing before CLIENT INFO answered, a Cluster master), a straggler
//     can still land after a later request: an Extend never shortens a key
//     (extendScript), so it cannot cut a renewed lock, and its re-take is
//     refused past its deadline by the master's clock; a straggling acquire
//     or re-take that lands after a Release keeps the key until its TTL.
//     (TestShorterStragglerCannotShortenAHeldLock)
//   - A Release that could not reach the master (a timeout, a stalled lane,
//     no connection) is kept and sent again after the barrier, when the
//     master answers again: a straggling acquire that lands after a stall
//     must not keep a released lock's key for a whole TTL.
//     (TestReleasedLockLeavesNoKeyAfterAStall)
//   - Scripts are lost whole (a restart, SCRIPT FLUSH), so every script is
//     loaded before the first script request, in the batch's own pipeline,
//     and a NOSCRIPT batch is rerun in order. (TestScriptsLoadedBeforeFirstUse,
//     TestScriptCacheFlushed)
//   - Commands are reused and alias their request's arguments; go-redis is
//     done with a command when Process or Exec returns, and a batch that
//     panicked gives its commands up. (request.command,
//     TestPanickedBatchIsNotResent)

// connTurn is how long a lane keeps its connection in steady use before it
// puts it back in the client's pool and takes one again. On a RESP3
// connection go-redis peeks at the socket for push notifications before
// every command (a recvfrom syscall and three allocations) unless the
// connection was put back in its pool less than 5 seconds ago; a connection
// never put back paid that on every batch. Pushes still arrive: go-redis
// handles those that come with a batch's replies.
//
// A connection the pool has just dialed was never put back in it, so it
// pays the peek until its first turn: that one comes after connTurnFirst.
const (
	connTurn      = 2 * time.Second
	connTurnFirst = 50 * time.Millisecond
)

// connIdle is how long a lane keeps its connection without using it before
// it gives it back to the client's pool: the application may need it, and
// a master restarted meanwhile left it dead (the pool's health check then
// replaces it). Taking one again costs a CLIENT INFO in the next batch.
const connIdle = 20 * time.Millisecond

// maxPending bounds the Releases a lane keeps for a master that does not
// answer; beyond it, the keys expire with their TTL.
const maxPending = 4096

type redisTransport struct {
	rdb     redis.UniversalClient
	std     *redis.Client // rdb when it is standalone, else nil (no connection of our own)
	fresh   bool          // every request needs a new command (a sharded client; see request.command)
	loaded  *atomic.Bool  // every script is in the master's cache, as far as we know (the node's)
	takes   chan struct{} // the node's: one lane dials at a time (see take)
	dialing bool          // this lane holds the node's dial turn
	ctx     deadlineCtx   // the running batch's deadline

	conn *redis.Conn // the lane's own connection (std only)
	pipe redis.Pipeliner
	info *redis.ClientInfoCmd // CLIENT INFO of conn, sent with its first batch; nil once read
	id   int64                // conn's client ID on the master; 0 when unknown
	addr string               // conn's address as the master sees it
	took time.Time            // when conn was taken from the pool
	turn time.Duration        // how long conn may be kept in steady use
	long bool                 // this turn is the short one (the names swap each take)
	used time.Time            // when conn last carried a batch

	kill      []victim   // connections given up with requests of unknown fate
	killKnown bool       // the master said whether this client may CLIENT KILL
	noKill    bool       // the master's ACL denies CLIENT KILL (or CLIENT INFO)
	probe     *redis.Cmd // a CLIENT KILL that matches no client, to learn that
	pending   []op       // Releases to send again, after the barrier
	cmds      []redis.Cmder
	extra     []*redis.Cmd // this batch's barrier and pending commands
}

// A victim is a connection to kill before the next batch.
type victim struct {
	id   int64
	addr string
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
	for _, r := range batch {
		r.build(false, t.fresh)
	}
	t.send(ctx, batch, scripts && !t.loaded.Load(), now)
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
		t.loaded.Store(false)
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
		r.val, r.err = r.result()
	}
	t.keep(batch)
}

// keep holds on to the Releases of batch that got no answer, to send them
// again after the barrier.
func (t *redisTransport) keep(batch []*request) {
	for _, r := range batch {
		if r.kind == opRelease && r.err != nil && !isReply(r.err) && r.err != ErrTaken && r.err != errAbsent {
			t.keepOp(r.op)
		}
	}
}

func (t *redisTransport) keepOp(o op) {
	if len(t.pending) >= maxPending {
		return // the key expires with its TTL
	}
	o.done, o.inline, o.vals = nil, false, nil
	t.pending = append(t.pending, o)
}

// tick is the lane's idle work: give back a connection left unused, and
// send the kept Releases when the master may answer again. It reports
// whether it should be called again.
func (t *redisTransport) tick(now time.Time) bool {
	if t.conn != nil && now.Sub(t.used) >= connIdle {
		t.conn.Close() // back to the client's pool
		t.conn, t.pipe, t.info = nil, nil, nil
	}
	if len(t.pending) > 0 {
		t.ctx = deadlineCtx{at: now.Add(maxDefaultNodeTimeout)}
		t.send(&t.ctx, nil, false, now)
	}
	return t.conn != nil || len(t.pending) > 0
}

// barrier reports whether a connection given up now would be killed before
// the next batch.
func (t *redisTransport) barrier() bool {
	return t.std != nil && t.killKnown && !t.noKill && t.id != 0
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
	if t.conn != nil && (now.Sub(t.took) > t.turn || now.Sub(t.used) >= connIdle) {
		t.conn.Close() // back to the client's pool
		t.conn, t.pipe, t.info = nil, nil, nil
	}
	if t.conn == nil && !t.take(ctx) {
		err := context.DeadlineExceeded
		for _, r := range batch {
			r.cmd.SetErr(err)
		}
		return
	}
	t.used = now
	t.extra = t.extra[:0]
	if t.info != nil {
		t.cmds = append(t.cmds, t.info)
	}
	if !t.killKnown {
		t.probe = redis.NewCmd(ctx, "client", "kill", "id", int64(math.MaxInt64), "addr", "0.0.0.0:0")
		t.cmds = append(t.cmds, t.probe)
	}
	for _, v := range t.kill {
		t.addExtra(redis.NewCmd(ctx, "client", "kill", "id", v.id, "addr", v.addr))
	}
	nkill := len(t.extra)
	for i := range t.pending {
		r := request{op: t.pending[i]}
		r.build(false, true)
		t.addExtra(r.cmd)
	}
	var loads [len(scripts)]*redis.Cmd
	if load || len(t.pending) > 0 && !t.loaded.Load() {
		load = true
		for i, s := range scripts {
			loads[i] = redis.NewCmd(ctx, "script", "load", s.srcArg)
			t.cmds = append(t.cmds, loads[i])
		}
	}
	if len(t.cmds) == 0 && len(batch) == 1 {
		_ = t.conn.Process(ctx, batch[0].cmd) // one command: Process spares the pipeline's slice
	} else {
		for _, r := range batch {
			t.cmds = append(t.cmds, r.cmd)
		}
		_ = t.pipe.BatchProcess(ctx, t.cmds...)
		_, err := t.pipe.Exec(ctx)
		stamp(t.cmds, err)
		clear(t.cmds)
		t.cmds = t.cmds[:0]
	}
	broken := t.settle(load, loads[:], nkill)
	for _, r := range batch {
		if err := r.cmd.Err(); err != nil && !isReply(err) {
			broken = true
		}
	}
	if broken {
		// A network error or a timeout: the connection may still carry
		// requests the master will run later. Give it up, and have the
		// next connection kill it first.
		t.drop()
	}
}

func (t *redisTransport) addExtra(c *redis.Cmd) {
	t.extra = append(t.extra, c)
	t.cmds = append(t.cmds, c)
}

// take takes a connection from the client's pool; its CLIENT INFO goes out
// with the first batch. The lanes of a node take theirs one at a time, for
// no longer than the batch's deadline: go-redis v9.23 races with itself
// when connections of one client dial at once through Conn (a handshake
// that falls back writes the client's shared options under a lock of its
// own).
func (t *redisTransport) take(ctx context.Context) bool {
	select {
	case t.takes <- struct{}{}:
	default:
		at, _ := ctx.Deadline()
		w := time.NewTimer(time.Until(at))
		defer w.Stop()
		select {
		case t.takes <- struct{}{}:
		case <-w.C:
			return false
		}
	}
	t.dialing = true
	c := t.std.Conn()
	t.conn, t.pipe, t.took, t.id, t.addr = c, c.Pipeline(), time.Now(), 0, ""
	// Short and long turns alternate: a freshly dialed connection is back
	// in the pool soon, and one that came from it stays.
	t.turn = connTurn
	if t.long = !t.long; t.long {
		t.turn = connTurnFirst
	}
	t.info = redis.NewClientInfoCmd(ctx, "client", "info")
	// The connection dials on its first command: the first batch runs
	// holding the node's dial turn, given back in settle.
	return true
}

// settle reads the replies of the commands that went with the batch:
// CLIENT INFO, the barrier, the kept Releases, the script loads. It reports
// whether one of them failed without an answer (the connection is then
// broken).
func (t *redisTransport) settle(load bool, loads []*redis.Cmd, nkill int) (broken bool) {
	t.dialed()
	if t.probe != nil {
		switch err := t.probe.Err(); {
		case err == nil:
			t.killKnown = true
		case isReply(err) && strings.HasPrefix(err.Error(), "NOPERM"):
			t.killKnown, t.noKill = true, true
		case isReply(err): // an older Redis that knows no such filter
			t.killKnown, t.noKill = true, true
		default:
			broken = true
		}
		t.probe = nil
	}
	if t.info != nil {
		if info, err := t.info.Result(); err == nil && info != nil && info.ID != 0 && info.Addr != "" {
			t.id, t.addr = info.ID, info.Addr
			t.info = nil
		} else if isReply(err) {
			t.noKill = true // no CLIENT INFO: no barrier either
			t.info = nil
		} else {
			broken = true
		}
	}
	if nkill > 0 {
		resolved := true
		for _, c := range t.extra[:nkill] {
			switch err := c.Err(); {
			case err == nil || strings.Contains(err.Error(), "No such client"):
			case isReply(err) && strings.HasPrefix(err.Error(), "NOPERM"):
				t.noKill = true
			default:
				resolved, broken = false, true // not run: the next connection tries again
			}
		}
		if resolved || t.noKill {
			t.kill = t.kill[:0]
		}
	}
	if len(t.extra) > nkill {
		// The kept Releases went out after the barrier; keep those that
		// did not get an answer.
		sent := t.pending
		t.pending = t.pending[:0:0]
		for i, c := range t.extra[nkill:] {
			if err := c.Err(); err != nil && !isReply(err) {
				t.keepOp(sent[i])
				broken = true
			}
		}
	}
	clear(t.extra)
	t.extra = t.extra[:0]
	if load {
		ok := true
		for _, c := range loads {
			ok = ok && c.Err() == nil
		}
		t.loaded.Store(ok)
	}
	return broken
}

// drop gives up the lane's connection, to be killed first by the next one
// where the barrier is available.
func (t *redisTransport) drop() {
	if t.conn == nil {
		return
	}
	if t.barrier() {
		t.kill = append(t.kill, victim{t.id, t.addr})
	}
	t.dialed()
	t.conn.Close()
	t.conn, t.pipe, t.info, t.id = nil, nil, nil, 0
}

// dialed gives the node's dial turn back, if this lane holds it.
func (t *redisTransport) dialed() {
	if t.dialing {
		t.dialing = false
		<-t.takes
	}
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
	if len(batch) == 1 {
		_ = t.rdb.Process(cctx, batch[0].cmd)
	} else {
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
	t.loaded.Store(true)
}

// reset drops the connection after a batch panicked: its state is
// unknown, and so is what the commands of the batch still hold.
func (t *redisTransport) reset([]*request) {
	clear(t.cmds)
	t.cmds = t.cmds[:0]
	clear(t.extra)
	t.extra = t.extra[:0]
	t.probe = nil
	t.drop()
}

func (t *redisTransport) close() {
	if t.conn != nil {
		t.conn.Close()
		t.conn, t.pipe, t.info = nil, nil, nil
	}
	t.dialed()
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
	switch c := c.(type) {
	case *redis.Cmd:
		return c.Val() != nil
	case *redis.ClientInfoCmd:
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
