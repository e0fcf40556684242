package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the transport over go-redis: how a lane's batch reaches one
// master. Its rules, each with the test that fails when it breaks:
//
//   - On a standalone master (a *redis.Client: plain or Sentinel), the lane
//     keeps a connection of its own, so a batch pays no pool checkout, and
//     knows its client ID on the server. (TestTransportKnowsItsConnection)
//   - Order holds across connections: a connection given up with requests
//     whose fate is unknown (a timeout, a network error, a panic) may still
//     deliver them to the master later, and a later request of the same key
//     sent on a fresh connection could overtake them (a Release undone by an
//     Extend's late re-take). So the fresh connection's first command, in
//     the same pipeline as the batch, is CLIENT KILL ID of the old one: once
//     the master has run it, nothing of the old connection runs any more.
//     (TestReleaseIsNotUndoneByStraggler) Masters whose ACL denies CLIENT
//     KILL, and Cluster masters (a pool of connections per shard), do without
//     it; an Extend's re-take is then still refused once its deadline has
//     passed (extendScript).
//   - A batch that found its connection closed by the master (a restart, an
//     idle timeout) is sent once more on a fresh one: the master never read
//     what it could not answer on a closed connection. (TestExtendRetakesVanishedKey)
//   - Scripts are lost whole (a restart, SCRIPT FLUSH), so every script is
//     loaded before the first script request, in the batch's own pipeline,
//     and a NOSCRIPT batch is rerun in order. (TestScriptsLoadedBeforeFirstUse,
//     TestScriptCacheFlushed)
//   - Commands are reused and alias their request's arguments; go-redis is
//     done with a command when Process or Exec returns. (request.command)

// connTurn is how long a lane keeps its connection before it puts it back in
// the client's pool and takes one again. On a RESP3 connection go-redis
// peeks at the socket for push notifications before every command (a
// recvfrom syscall and three allocations) unless the connection was put back
// in its pool less than 5 seconds ago; a connection never put back paid that
// on every batch. Pushes still arrive: go-redis handles those that come with
// a batch's replies. A turn costs two CLIENT ID round trips (see take), so
// only a connection in steady use turns; a lane used now and then keeps its
// connection and pays the peek.
const connTurn = 2 * time.Second

type redisTransport struct {
	rdb    redis.UniversalClient
	std    *redis.Client // rdb when it is standalone, else nil (no connection of our own)
	fresh  bool          // every request needs a new command (a sharded client; see request.command)
	loaded *atomic.Bool  // every script is in the master's cache, as far as we know (the node's)
	takes  *sync.Mutex   // the node's: one lane takes a connection at a time (see take)
	ctx    deadlineCtx   // the running batch's deadline

	conn *redis.Conn // the lane's own connection (std only)
	pipe redis.Pipeliner
	id   int64     // conn's client ID on the master; 0 when unknown
	took time.Time // when conn was taken from the pool
	used time.Time // when conn last carried a batch

	kill     []int64 // client IDs of connections given up with requests of unknown fate
	noKill   bool    // the master's ACL denies CLIENT KILL
	cmds     []redis.Cmder
	barriers []*redis.Cmd
}

// deadlineCtx carries a deadline for go-redis's socket timeouts without a
// timer: nothing ever cancels it.
type deadlineCtx struct {
	context.Context
	at time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.at, true }

func (t *redisTransport) exec(batch []*request, now time.Time) {
	var at time.Time
	scripts := false
	for _, r := range batch {
		r.build(false, t.fresh)
		at = later(at, r.deadline)
		scripts = scripts || r.kind != opAcquire
	}
	t.ctx = deadlineCtx{context.Background(), at}
	ctx := &t.ctx // a pointer: no allocation to make it a context.Context
	t.send(ctx, batch, scripts && !t.loaded.Load(), now)
	if t.std != nil && time.Now().Before(at) {
		if again := closedConn(batch); len(again) > 0 {
			for _, r := range again {
				r.build(false, t.fresh)
			}
			t.send(ctx, again, scripts && !t.loaded.Load(), now)
		}
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
}

// closedConn returns the requests of batch that failed because the master
// had closed the connection before reading them.
func closedConn(batch []*request) []*request {
	var again []*request
	for _, r := range batch {
		if err := r.cmd.Err(); err != nil && !isReply(err) && connClosed(err) {
			again = append(again, r)
		}
	}
	return again
}

// connClosed reports whether err says the peer had closed the connection.
func connClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// send sends batch as one pipeline and reads the replies into the requests'
// commands. With load set, it first loads every script, in the same
// pipeline where it can.
func (t *redisTransport) send(ctx context.Context, batch []*request, load bool, now time.Time) {
	if len(batch) == 0 {
		return
	}
	if t.std == nil {
		t.sendShared(ctx, batch, load)
		return
	}
	if t.conn != nil && now.Sub(t.took) > connTurn && now.Sub(t.used) < connTurn {
		t.conn.Close() // back to the client's pool
		t.conn, t.pipe = nil, nil
	}
	t.used = now
	if t.conn == nil {
		if err := t.take(ctx, now); err != nil {
			for _, r := range batch {
				r.cmd.SetErr(err)
			}
			return
		}
	}
	var loads [len(scripts)]*redis.Cmd
	t.barriers = t.barriers[:0]
	for _, id := range t.kill {
		c := redis.NewCmd(ctx, "client", "kill", "id", id)
		t.barriers = append(t.barriers, c)
		t.cmds = append(t.cmds, c)
	}
	if load {
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
		_, _ = t.pipe.Exec(ctx)
		clear(t.cmds)
		t.cmds = t.cmds[:0]
	}
	t.settle(load, loads[:])
	for _, r := range batch {
		if err := r.cmd.Err(); err != nil && !isReply(err) {
			// A network error or a timeout: the connection may still carry
			// requests the master will run later. Give it up, and have the
			// next connection kill it first.
			t.drop()
			return
		}
	}
}

// take takes a connection from the client's pool and learns its client ID.
// The lanes of a node take theirs one at a time: go-redis v9.23 races with
// itself when connections of one client dial at once through Conn (a
// handshake that falls back writes the client's shared options under a lock
// of its own).
func (t *redisTransport) take(ctx context.Context, now time.Time) error {
	t.takes.Lock()
	defer t.takes.Unlock()
	var c *redis.Conn
	ok := false
	defer func() {
		if !ok && c != nil {
			c.Close()
		}
	}()
	var id int64
	var err error
	// Twice: a connection the pool has just dialed was never put back in
	// it, and go-redis then peeks for push notifications on every command
	// (see connTurn) until it is; putting it back once stamps it.
	for range 2 {
		if c != nil {
			c.Close()
		}
		c = t.std.Conn()
		id, err = c.ClientID(ctx).Result()
		if err != nil && !isReply(err) {
			return fmt.Errorf("redlock: no connection to the master: %w", unprefixed{err})
		}
	}
	// An ACL that denies CLIENT ID leaves the ID unknown: such a
	// connection, once given up, cannot be killed.
	ok = true
	t.conn, t.pipe, t.id, t.took = c, c.Pipeline(), id, now
	return nil
}

// settle reads the barriers' and the script loads' replies.
func (t *redisTransport) settle(load bool, loads []*redis.Cmd) {
	if len(t.barriers) > 0 {
		resolved := true
		for _, c := range t.barriers {
			switch err := c.Err(); {
			case err == nil || strings.Contains(err.Error(), "No such client"):
			case isReply(err) && strings.HasPrefix(err.Error(), "NOPERM"):
				t.noKill = true
			default:
				resolved = false // not run (a network error): the next connection tries again
			}
		}
		if resolved || t.noKill {
			t.kill = t.kill[:0]
		}
		clear(t.barriers)
	}
	if load {
		ok := true
		for _, c := range loads {
			ok = ok && c.Err() == nil
		}
		t.loaded.Store(ok)
	}
}

// drop gives up the lane's connection, to be killed by the next one.
func (t *redisTransport) drop() {
	if t.conn == nil {
		return
	}
	if t.id != 0 && !t.noKill {
		t.kill = append(t.kill, t.id)
	}
	t.conn.Close()
	t.conn, t.pipe, t.id = nil, nil, 0
}

// sendShared sends batch through the client's own pipeline: a Cluster or a
// Ring picks a pooled connection per shard.
func (t *redisTransport) sendShared(ctx context.Context, batch []*request, load bool) {
	if load {
		t.loadScripts(ctx) // a Cluster: SCRIPT LOAD goes to every shard
	}
	if len(batch) == 1 {
		_ = t.rdb.Process(ctx, batch[0].cmd)
		return
	}
	pipe := t.rdb.Pipeline()
	for _, r := range batch {
		t.cmds = append(t.cmds, r.cmd)
	}
	_ = pipe.BatchProcess(ctx, t.cmds...)
	clear(t.cmds)
	t.cmds = t.cmds[:0]
	_, _ = pipe.Exec(ctx)
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

func (t *redisTransport) reset() { t.drop() }

func (t *redisTransport) close() {
	if t.conn != nil {
		t.conn.Close()
		t.conn, t.pipe = nil, nil
	}
}

// isReply reports whether err is the master's answer (an error reply, or
// nil) rather than a failure to get one. go-redis returns replies unwrapped.
func isReply(err error) bool {
	_, ok := err.(redis.Error)
	return ok
}
