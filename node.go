package redlock

import (
	"context"
	"fmt"
	"hash/maphash"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the seam between the lock algorithm and the masters: a node
// takes requests and delivers one reply each. Everything above it speaks in
// requests and rounds; only this file knows how they travel.
//
// Requests to one master from any number of callers are auto-pipelined. A
// node has one lane per master of several, and a few for a single master
// (see lanesFor). A lane has one long-lived worker that takes everything
// queued so far and sends it as one pipeline (one write, one read). The lane
// has one batch in flight at a time, and a lock's requests always take the
// lane its key hashes to, so they reach a master in the order they were
// made: a Release sent after an Extend that returned at quorum cannot
// overtake the Extend's straggler and be undone by it. On a single master
// whose client bounds reads by the request's deadline, a request made when
// its lane is idle goes out at once on the caller's goroutine, so one caller
// pays no hand-off.
//
// For a standalone master (*redis.Client) a lane keeps a connection of its
// own, taken from the client's pool (with its hooks), so a batch pays no pool
// checkout and health check; it is replaced after any network error.

type opKind uint8

const (
	opAcquire       opKind = iota // SET key token NX PX ttl
	opAcquireFenced               // acquireFencedScript
	opRaise                       // raiseScript
	opExtend                      // extendScript, or extendFencedScript with a counter
	opRelease                     // releaseScript
)

// An op is what a round asks of every master. Its arguments are boxed once
// per round and shared by the round's requests.
type op struct {
	kind             opKind
	key, ckey, token any // strings; ckey is nil without fencing
	ttl, fence       any // int64 milliseconds, int64
	deadline         time.Time
	done             <-chan struct{} // the caller's context; a request it ends before sending is dropped
	rd               *round          // where the reply goes; nil when nobody waits for it
}

// newOp boxes a lock's key, counter key and token, for an op of kind that
// takes no TTL or fence; with sets those.
func newOp(kind opKind, key, ckey, token string) op {
	o := op{kind: kind, key: key, token: token}
	if ckey != "" {
		o.ckey = ckey
	}
	return o
}

// with returns o for another kind of request on the same lock, reusing its
// boxed key and token. ttl is the boxed TTL in milliseconds (see
// Client.boxTTL), for the kinds that take one; fence is boxed only for the
// kinds that send it.
func (o op) with(kind opKind, ttl any, fence int64) op {
	o.kind, o.ttl, o.fence = kind, ttl, nil
	if kind == opRaise || (kind == opExtend && o.ckey != nil) {
		o.fence = fence
	}
	return o
}

// maxArgs is the most arguments a request's command has (EVALSHA of the
// fenced extend).
const maxArgs = 9

// A request is one op on one master. Requests are pooled: the node returns
// one to the pool once it has delivered its reply.
type request struct {
	op
	idx  int // the master's position, for the reply
	cmd  *redis.Cmd
	argv [maxArgs]any // backs cmd's arguments

	// Commands kept for reuse, by their number of arguments: a command's
	// arguments are r.argv[:n], refilled for each request.
	cmds [maxArgs + 1]*redis.Cmd
}

// build makes r's command: EVALSHA, or EVAL when eval is set. With fresh
// set it makes a new command rather than reuse one.
func (r *request) build(eval, fresh bool) {
	var s *script
	a := r.argv[:0]
	switch r.kind {
	case opAcquire:
		a = append(a, "set", r.key, r.token, "nx", "px", r.ttl)
		r.cmd = r.command(a, fresh)
		return
	case opAcquireFenced:
		s, a = &acquireFencedScript, append(a, nil, nil, 2, r.key, r.ckey, r.token, r.ttl)
	case opRaise:
		s, a = &raiseScript, append(a, nil, nil, 2, r.key, r.ckey, r.token, r.fence)
	case opExtend:
		if r.ckey == nil {
			s, a = &extendScript, append(a, nil, nil, 1, r.key, r.token, r.ttl)
		} else {
			s, a = &extendFencedScript, append(a, nil, nil, 2, r.key, r.ckey, r.token, r.ttl, r.fence)
		}
	default:
		s, a = &releaseScript, append(a, nil, nil, 1, r.key, r.token)
	}
	if eval {
		a[0], a[1] = "eval", s.srcArg
	} else {
		a[0], a[1] = "evalsha", s.shaArg
	}
	r.cmd = r.command(a, fresh)
}

// command returns a command whose arguments are a, a prefix of r.argv: one
// of r's own commands with as many arguments, reset, or a new one when
// fresh is set. A command allocates; reusing one makes a round to five
// masters ten allocations cheaper. go-redis is done with a command when
// Process or Exec returns (a hook that kept one for later would see it
// reused). A node never reuses commands on a sharded client (Cluster,
// Ring): go-redis keeps a command's hash slot in it.
func (r *request) command(a []any, fresh bool) *redis.Cmd {
	if fresh {
		return redis.NewCmd(context.Background(), a...)
	}
	c := r.cmds[len(a)]
	if c == nil {
		c = redis.NewCmd(context.Background(), a...)
		r.cmds[len(a)] = c
		return c
	}
	c.SetErr(nil)
	c.SetVal(nil)
	return c
}

// result reads the master's answer to r: the counter for a fenced acquire,
// and nil, ErrTaken, errAbsent or the failure.
func (r *request) result() (int64, error) {
	err := r.cmd.Err()
	if r.kind == opAcquire {
		if err == redis.Nil {
			return 0, ErrTaken
		}
		return 0, err
	}
	if err != nil {
		return 0, err
	}
	v, err := r.cmd.Int64()
	if err != nil {
		return 0, err
	}
	switch {
	case v > 0:
		return v, nil
	case v == 0:
		return 0, ErrTaken
	default:
		return 0, errAbsent
	}
}

func noScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

type node struct {
	rdb    redis.UniversalClient
	addr   string
	inl    bool         // requests may run on the caller's goroutine (one master, bounded reads)
	fresh  bool         // every request needs a new command (a sharded client; see request.command)
	loaded atomic.Bool  // every script is in the master's cache, as far as we know
	reqs   *sync.Pool   // the client's pool of requests
	lanes  []*lane      // a lock's requests all take the lane its key hashes to
	seed   maphash.Seed // for that hash
}

type lane struct {
	mu      sync.Mutex
	cond    sync.Cond
	queue   []*request
	running bool // a batch is in flight, sent by the worker or a caller
	waiting bool // the worker is parked
	closed  bool

	// Owned by whoever runs the lane's batch (running is set).
	conn *redis.Conn // the lane's own connection, for a *redis.Client master
	pipe redis.Pipeliner
	cmds []redis.Cmder // scratch: a batch's commands
	used time.Time     // when conn last ran a batch (its start)
	took time.Time     // when conn was taken from the pool
	ctx  deadlineCtx   // the running batch's deadline
}

func newNode(rdb redis.UniversalClient, addr string, single bool, reqs *sync.Pool, wg *sync.WaitGroup) *node {
	_, standalone := rdb.(*redis.Client)
	n := &node{rdb: rdb, addr: addr, inl: single && boundedByDeadline(rdb), fresh: !standalone, reqs: reqs}
	n.seed = maphash.MakeSeed()
	for range lanesFor(rdb, single) {
		l := new(lane)
		l.cond.L = &l.mu
		n.lanes = append(n.lanes, l)
		wg.Add(1)
		go n.work(l, wg)
	}
	return n
}

// lanesFor is how many lanes a node has: one per master of several, and
// up to four (a connection each) for a single master, fewer when the
// client's pool is small, so the lanes keep most of it free for the
// application.
//
// A lane has one batch in flight, so on one lane the client and the master
// take turns: the master waits while the client reads a batch's replies and
// hands them out, and the client waits while the master runs the next
// batch. Over several masters the turns of one master overlap the others';
// over one master only more lanes overlap them. Measured with 64 goroutines
// on a 2-core machine running the client and the masters: one master made
// about 100k lock+release cycles/s with one lane, 125k with two, 145k with
// three or four and 110k with six; three and five masters ran slower with a
// second lane per master (N=5: 40k cycles/s with one lane, 29k with two),
// their servers' CPU being spent then on smaller batches.
func lanesFor(rdb redis.UniversalClient, single bool) int {
	if !single {
		return 1
	}
	if c, ok := rdb.(*redis.Client); ok {
		return min(4, max(1, c.Options().PoolSize/4))
	}
	return 4
}

// boundedByDeadline reports whether rdb bounds a socket read by the
// request's deadline (ContextTimeoutEnabled). Only then may a request run on
// its caller's goroutine: otherwise a master that does not answer would hold
// the caller for the client's ReadTimeout, past its node timeout. Sent by a
// worker, the caller waits on its own timer instead.
func boundedByDeadline(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// send queues r on the lane, or sends it at once on the caller's goroutine
// when the lane is idle and inline sending is allowed. The node owns r from
// here on.
func (n *node) send(r *request) {
	l := n.laneOf(r.key)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		n.deliver(r, 0, ErrClosed)
		return
	}
	if n.inl && !l.running && len(l.queue) == 0 {
		l.running = true
		l.mu.Unlock()
		one := [1]*request{r}
		n.exec(l, one[:])
		l.mu.Lock()
		l.running = false
		if len(l.queue) > 0 && l.waiting {
			l.cond.Signal()
		}
		l.mu.Unlock()
		return
	}
	l.queue = append(l.queue, r)
	if !l.running && l.waiting {
		l.cond.Signal()
	}
	l.mu.Unlock()
}

// laneOf returns the lane of every request on key (a boxed string).
func (n *node) laneOf(key any) *lane {
	if len(n.lanes) == 1 {
		return n.lanes[0]
	}
	return n.lanes[maphash.String(n.seed, key.(string))%uint64(len(n.lanes))]
}

func (n *node) close() {
	for _, l := range n.lanes {
		l.mu.Lock()
		l.closed = true
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}

// work sends whatever is queued on l as one pipeline, one batch at a time,
// until the node closes and the lane is empty.
func (n *node) work(l *lane, wg *sync.WaitGroup) {
	defer wg.Done()
	var batch []*request
	l.mu.Lock()
	for {
		for (len(l.queue) == 0 && !l.closed) || l.running {
			l.waiting = true
			l.cond.Wait()
			l.waiting = false
		}
		if len(l.queue) == 0 {
			l.mu.Unlock()
			if l.conn != nil {
				l.conn.Close() // back to the client's pool
			}
			return
		}
		batch, l.queue = l.queue, batch[:0]
		l.running = true
		l.mu.Unlock()
		n.exec(l, batch)
		clear(batch)
		l.mu.Lock()
		l.running = false
	}
}

// deadlineCtx carries a deadline for go-redis's socket timeouts without a
// timer: nothing ever cancels it.
type deadlineCtx struct {
	context.Context
	at time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.at, true }

// errSkipped and errQueued mark requests dropped before they were sent.
var (
	errSkipped = fmt.Errorf("%w: the caller gave up before it was sent", errNoReply)
	errQueued  = fmt.Errorf("%w: waited in the queue past its deadline: %w", errNoReply, context.DeadlineExceeded)
)

// exec sends batch as one pipeline on lane l and delivers every reply.
func (n *node) exec(l *lane, batch []*request) {
	now := time.Now()
	var at time.Time
	live := 0
	scripts := false
	for _, r := range batch {
		if err := r.dropped(now); err != nil {
			n.deliver(r, 0, err)
			continue
		}
		r.build(false, n.fresh)
		at = later(at, r.deadline)
		scripts = scripts || r.kind != opAcquire
		batch[live] = r
		live++
	}
	batch = batch[:live]
	if live == 0 {
		return
	}
	l.ctx = deadlineCtx{context.Background(), at}
	ctx := &l.ctx // a pointer: no allocation to make it a context.Context
	n.run(ctx, l, batch, scripts && !n.loaded.Load(), now)
	retry := 0
	for i, r := range batch {
		if noScript(r.cmd.Err()) {
			batch[retry], batch[i] = r, batch[retry]
			retry++
		}
	}
	if retry > 0 {
		// The master lost its script cache (a restart, SCRIPT FLUSH). It
		// loses it whole, so the requests that failed are all the batch's
		// script requests, and rerunning them in order keeps the order of
		// one lock's requests (an Extend never runs after the Release that
		// followed it).
		n.loaded.Store(false)
		for _, r := range batch[:retry] {
			r.build(false, n.fresh)
		}
		n.run(ctx, l, batch[:retry], true, now)
		for _, r := range batch[:retry] {
			if noScript(r.cmd.Err()) { // could not load: EVAL, one by one
				r.build(true, n.fresh)
				n.run(ctx, l, []*request{r}, false, now)
			}
		}
	}
	for _, r := range batch {
		v, err := r.result()
		n.deliver(r, v, err)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// idleConn is how long a lane's own connection may sit unused (counted from
// its last batch's start, which errs only early) before the lane gives it
// back to the client's pool and takes one through the pool's health check:
// a master restarted since then left it dead. A restart takes longer than
// this (redis-server starts in 10ms or more), so a connection in steady use
// never meets a restarted master unawares, and one in steady use pays no
// check.
const idleConn = 5 * time.Millisecond

// connTurn is how long a lane keeps its connection, even in steady use,
// before it puts it back in the client's pool and takes one again. On a
// RESP3 connection go-redis peeks at the socket for push notifications
// before every command (a recvfrom syscall and three allocations), unless
// the connection was put back in its pool less than 5 seconds ago; a
// connection the lane never put back paid that on every batch. Pushes still
// arrive: go-redis handles those that come with a batch's replies.
const connTurn = 100 * time.Millisecond

// run sends batch on l's connection and reads the replies into the
// requests' commands. With load set, it first loads every script (see
// loadScripts), in the same pipeline where it can. now is about when the
// batch started; the lane's clock needs no better.
func (n *node) run(ctx context.Context, l *lane, batch []*request, load bool, now time.Time) {
	if l.conn != nil {
		if now.Sub(l.used) > idleConn || now.Sub(l.took) > connTurn {
			l.conn.Close()
			l.conn, l.pipe = nil, nil
		}
	}
	if l.pipe == nil {
		if c, ok := n.rdb.(*redis.Client); ok {
			l.conn = c.Conn()
			l.pipe = l.conn.Pipeline()
			l.took = now
		} else {
			l.pipe = n.rdb.Pipeline()
		}
	}
	var loads [len(scripts)]*redis.Cmd
	if load && l.conn == nil {
		n.loadScripts(ctx) // a Cluster: SCRIPT LOAD goes to every shard
		load = false
	}
	switch {
	case load:
		for i, s := range scripts {
			loads[i] = redis.NewCmd(ctx, "script", "load", s.srcArg)
			_ = l.pipe.Process(ctx, loads[i])
		}
		fallthrough
	case len(batch) > 1:
		// All at once: the pipeline grows its slice of commands once.
		for _, r := range batch {
			l.cmds = append(l.cmds, r.cmd)
		}
		_ = l.pipe.BatchProcess(ctx, l.cmds...)
		clear(l.cmds)
		l.cmds = l.cmds[:0]
		_, _ = l.pipe.Exec(ctx)
	case l.conn != nil: // one command: Process spares the pipeline's slice
		_ = l.conn.Process(ctx, batch[0].cmd)
	default:
		_ = n.rdb.Process(ctx, batch[0].cmd)
	}
	if load {
		ok := true
		for _, c := range loads {
			ok = ok && c.Err() == nil
		}
		n.loaded.Store(ok)
	}
	if l.conn == nil {
		return
	}
	l.used = now
	for _, r := range batch {
		if err := r.cmd.Err(); err != nil && !isReply(err) {
			// A network error or a timeout: the connection may still carry
			// replies we will never read. Give it back and take another.
			l.conn.Close()
			l.conn, l.pipe = nil, nil
			return
		}
	}
}

// isReply reports whether err is the master's answer (an error reply, or
// nil) rather than a failure to get one. go-redis returns replies unwrapped.
func isReply(err error) bool {
	_, ok := err.(redis.Error)
	return ok
}

// loadScripts loads every script on the master (on every shard of a
// Cluster: go-redis sends SCRIPT LOAD to all of them) before the first
// script request, so that no batch finds some of our scripts loaded and
// others not: a failed EVALSHA rerun after a later request of the same batch
// had run would reorder one lock's requests.
func (n *node) loadScripts(ctx context.Context) {
	for _, s := range scripts {
		if n.rdb.ScriptLoad(ctx, s.src).Err() != nil {
			return
		}
	}
	n.loaded.Store(true)
}

// dropped says why r should not be sent at all: its caller gave up, or its
// deadline has passed while it waited in the queue.
func (r *request) dropped(now time.Time) error {
	select {
	case <-r.done:
		return errSkipped
	default:
	}
	if !now.Before(r.deadline) {
		return errQueued
	}
	return nil
}

// deliver hands r's reply to its round and r back to the pool.
func (n *node) deliver(r *request, v int64, err error) {
	if rd := r.rd; rd != nil {
		rd.replies <- reply{idx: r.idx, val: v, err: err}
		rd.unref()
	}
	r.op, r.cmd = op{}, nil
	clear(r.argv[:]) // the commands keep r.argv as their arguments
	n.reqs.Put(r)
}

// addrOf names a master in errors by the address its client knows.
func addrOf(rdb redis.UniversalClient, i int) string {
	switch c := rdb.(type) {
	case *redis.Client:
		if a := c.Options().Addr; a != "" && a != "FailoverClient" {
			return a
		}
	case *redis.ClusterClient:
		if a := c.Options().Addrs; len(a) > 0 {
			return strings.Join(a, ",")
		}
	case *redis.Ring:
		addrs := make([]string, 0, len(c.Options().Addrs))
		for _, a := range c.Options().Addrs {
			addrs = append(addrs, a)
		}
		sort.Strings(addrs)
		if len(addrs) > 0 {
			return strings.Join(addrs, ",")
		}
	}
	return fmt.Sprintf("master[%d]", i)
}
