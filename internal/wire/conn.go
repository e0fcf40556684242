package wire

import (
	"context"
	"fmt"
	"math"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// This file is the lane's own connection to a standalone master: when it
// takes one and gives it back, and the round trip that sets it up, which
// runs the barrier (barrier.go) and learns the connection's client ID, the
// master's run_id and its clock offset. Its rules, each with the test that
// fails when it breaks:
//
//   - On a standalone master (a *redis.Client: plain or Sentinel), the lane
//     keeps a connection of its own while it is in use, so a batch pays no
//     pool checkout, and knows its client ID and address on the server: a
//     CLIENT INFO round trip when it takes one. (TestTransportKnowsItsConnection)
//   - An Extend's bounds (the validity's end, the re-take deadline:
//     extend.lua) reach each master as its own clock reads them: the
//     fresh connection's round trip that learns its ID also measures the
//     master's clock offset (INFO server: server_time_usec; state.sawClock,
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

// DefaultConnIdle is how long a lane keeps its connection without using it before
// it gives it back to the client's pool, so that a lock taken now and then
// (a watchdog's renewal every ttl/3, a job every few seconds) pays no CLIENT
// INFO round trip: 15s covers the renewals of a lock of 45s. A master
// restarted meanwhile left the connection dead; the batch that finds it so
// goes again on a fresh one (see exec). Where that retry is not available
// (no barrier), the lane keeps an idle connection for bareIdle only, and the
// pool's health check replaces a dead one. A lane gives its connection back
// at once when the pool has no idle connection left: the application may be
// waiting for it. Config.ConnIdle sets another (the tests do).
const DefaultConnIdle = 15 * time.Second

const bareIdle = time.Second

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
	t.st.sawRunID(run)
	if strings.HasSuffix(addr, ":0") {
		// A Unix socket: every client's address is the socket's, and a
		// restarted master gives IDs anew, so CLIENT KILL could hit a
		// stranger. No barrier; nothing of a closed connection runs later.
		t.local, id = true, 0
	}
	taken = true
	t.conn, t.pipe, t.took, t.id, t.addr, t.batches = c, c.Pipeline(), time.Now(), id, addr, 0
	t.st.tookConn()
	return nil
}

// rebase rebuilds the Extends of batch, built before a fresh connection
// measured the master's clock offset anew (take), with that offset: the
// master behind the connection may have changed (a failover), and the
// first batch on a lane's first connection was built with none.
// (TestAttachOnAMasterWhoseClockIsAhead)
func (t *redisTransport) rebase(batch []*request) {
	skew := t.st.clock.Load()
	for _, r := range batch {
		if r.kind() == KindExtend && r.skew != skew {
			r.skew = skew
			r.build(r.eval, t.fresh)
		}
	}
}

// identify asks c's client ID and address, whether CLIENT KILL is allowed
// if nobody asked yet, and the master's run_id (to see a restart) and
// clock (its offset, state.sawClock: INFO server says both); first of all
// it kills the connections given up before (t.kill), and closes them once
// the master has. An error is a failure to get an answer, or a barrier
// the master did not run; an ACL or a Redis that denies a question leaves
// the ID 0, or the run_id "" and the offset 0.
func (t *redisTransport) identify(ctx context.Context, c *redis.Conn) (int64, string, string, error) {
	kills := t.killCmds(ctx)
	info := redis.NewCmd(ctx, "client", "info") // not ClientInfoCmd: a name with '=' fails its parser
	server := redis.NewCmd(ctx, "info", "server")
	var probe *redis.Cmd
	if t.st.killKnown.Load() == 0 {
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
		if err != nil {
			// Why the master did not run it, a deadline that passed above
			// all: the root tells a timeout at its caller's deadline by it
			// (TestCallersDeadlineEndsACallWhoseMastersOweABarrier).
			return 0, "", "", fmt.Errorf("%w (%w)", errBarrier, err)
		}
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
		t.st.sawMode(infoField(s, "redis_mode"))
		u, err := strconv.ParseInt(infoField(s, "server_time_usec"), 10, 64)
		usec, clock = u, err == nil && u > 0
	}
	t.st.sawClock(usec, replied, clock)
	if probe != nil {
		switch err := probe.Err(); {
		case err == nil:
			t.st.killKnown.Store(1)
		case RefusedCommand(err): // an ACL, or a Redis without the filter
			t.st.killKnown.Store(2)
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

// giveBack puts the lane's connection back in the client's pool.
func (t *redisTransport) giveBack() {
	t.conn.Close()
	t.conn, t.pipe, t.id = nil, nil, 0
}

// poolDry reports whether the client's pool has no idle connection left
// while it is full: someone may be waiting for the one the lane holds.
func (t *redisTransport) poolDry() bool {
	s := t.std.PoolStats()
	return s.IdleConns == 0 && int(s.TotalConns) >= t.std.Options().PoolSize
}

// idleFor is how long the lane keeps its connection unused.
func (t *redisTransport) idleFor() time.Duration {
	if t.local || t.barrier() {
		return t.idle
	}
	return bareIdle
}

// A dialWatch is the go-redis hook through which the wires of a standalone
// master's client see every dial of that client fail (a refused
// connection, a TLS handshake): go-redis dials on a goroutine of its own
// and, when the request's deadline passes first, says only that the
// deadline passed, so without it the cause would reach nothing but
// go-redis's log. ProcessHook and ProcessPipelineHook return next. go-redis
// cannot remove a hook, so a client gets one dialWatch however many
// Clients are built over it (watchDials), and a closed Master's state is
// let go (unwatch). (TestRefusedMastersNameTheirCause,
// TestOneDialHookPerGoRedisClient)
type dialWatch struct {
	mu  sync.Mutex
	sts atomic.Pointer[[]*state] // the states of the Masters over the client; read without mu
}

// dialWatches has the dialWatch of each go-redis client it was added to,
// by a weak pointer to the client: an entry goes when its client is
// collected.
var dialWatches sync.Map // weak.Pointer[redis.Client] -> *dialWatch

// watchDials makes st see the dial failures of std, adding the client's
// one dialWatch the first time.
func watchDials(std *redis.Client, st *state) *dialWatch {
	k := weak.Make(std)
	w, loaded := dialWatches.LoadOrStore(k, new(dialWatch))
	dw := w.(*dialWatch)
	if !loaded {
		std.AddHook(dw)
		runtime.AddCleanup(std, func(k weak.Pointer[redis.Client]) { dialWatches.Delete(k) }, k)
	}
	dw.mu.Lock()
	var sts []*state
	if old := dw.sts.Load(); old != nil {
		sts = slices.Clone(*old)
	}
	sts = append(sts, st)
	dw.sts.Store(&sts)
	dw.mu.Unlock()
	return dw
}

// unwatch stops st seeing w's dials, and lets go of it.
func (w *dialWatch) unwatch(st *state) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.sts.Load()
	if old == nil {
		return
	}
	sts := slices.DeleteFunc(slices.Clone(*old), func(s *state) bool { return s == st })
	w.sts.Store(&sts)
}

func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			if sts := w.sts.Load(); sts != nil {
				for _, st := range *sts {
					st.sawFailure(err)
				}
			}
		}
		return c, err
	}
}

func (w *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (w *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
