package redlock

import (
	"context"
	"errors"
	"fmt"
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
// node has a few lanes, each with one long-lived worker that takes
// everything queued on its lane so far and sends it as one pipeline (one
// write, one read). A key always travels on the same lane and a lane has one
// batch in flight at a time, so requests for one lock reach a master in the
// order they were made: a Release sent after an Extend that returned at
// quorum cannot overtake the Extend's straggler and be undone by it. On a
// single master, a request made when its lane is idle goes out at once on
// the caller's goroutine, so one caller pays no hand-off.

// lanesPerNode bounds the pipelines in flight to one master. More than one
// keeps the master busy while a batch's replies are read; more than a few
// only splits batches.
const lanesPerNode = 2

type opKind uint8

const (
	opAcquire       opKind = iota // SET key token NX PX ttl
	opAcquireFenced               // acquireFencedScript
	opRaise                       // raiseScript
	opExtend                      // extendScript, or extendFencedScript with a counter
	opRelease                     // releaseScript
)

// A request is one operation on one master.
type request struct {
	kind     opKind
	key      string
	ckey     string // the fence counter; "" without fencing
	token    string
	ttlMs    int64
	fence    int64
	deadline time.Time       // when the node timeout ends, or the caller's deadline if sooner
	done     <-chan struct{} // the caller's context; a request it ends before sending is dropped
	rd       *round          // where the reply goes; nil when nobody waits for it
	idx      int             // the master's position, for the reply
	cmd      *redis.Cmd
}

// A round is one operation sent to every master; the replies come back on
// one channel buffered to N, so no sender ever blocks on a caller that has
// already decided and gone.
type round struct {
	replies chan reply
}

type reply struct {
	idx int
	val int64 // the fence counter, for opAcquireFenced
	err error // nil: agreed; ErrTaken or errAbsent: refused; else failed
}

// build makes r's command: EVALSHA, or EVAL when eval is set (the master
// answered NOSCRIPT).
func (r *request) build(eval bool) {
	var s *script
	var args []any
	switch r.kind {
	case opAcquire:
		r.cmd = redis.NewCmd(context.Background(), "set", r.key, r.token, "nx", "px", r.ttlMs)
		return
	case opAcquireFenced:
		s, args = &acquireFencedScript, []any{2, r.key, r.ckey, r.token, r.ttlMs}
	case opRaise:
		s, args = &raiseScript, []any{2, r.key, r.ckey, r.token, r.fence}
	case opExtend:
		if r.ckey == "" {
			s, args = &extendScript, []any{1, r.key, r.token, r.ttlMs}
		} else {
			s, args = &extendFencedScript, []any{2, r.key, r.ckey, r.token, r.ttlMs, r.fence}
		}
	default:
		s, args = &releaseScript, []any{1, r.key, r.token}
	}
	if eval {
		args = append([]any{"eval", s.src}, args...)
	} else {
		args = append([]any{"evalsha", s.sha}, args...)
	}
	r.cmd = redis.NewCmd(context.Background(), args...)
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
	inl    bool        // requests may run on the caller's goroutine (one master)
	loaded atomic.Bool // every script is in the master's cache, as far as we know
	lanes  [lanesPerNode]lane
}

type lane struct {
	mu      sync.Mutex
	cond    sync.Cond
	queue   []*request
	running bool // a batch is in flight, sent by the worker or a caller
	waiting bool // the worker is parked
	closed  bool
}

func newNode(rdb redis.UniversalClient, addr string, inline bool, wg *sync.WaitGroup) *node {
	n := &node{rdb: rdb, addr: addr, inl: inline}
	wg.Add(lanesPerNode)
	for i := range n.lanes {
		l := &n.lanes[i]
		l.cond.L = &l.mu
		go n.work(l, wg)
	}
	return n
}

// lane picks key's lane (FNV-1a).
func (n *node) lane(key string) *lane {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return &n.lanes[h%lanesPerNode]
}

// send queues r on its lane, or sends it at once on the caller's goroutine
// when the lane is idle and inline sending is allowed.
func (n *node) send(r *request) {
	l := n.lane(r.key)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		deliver(r, ErrClosed)
		return
	}
	if n.inl && !l.running && len(l.queue) == 0 {
		l.running = true
		l.mu.Unlock()
		n.exec([]*request{r}, nil)
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

func (n *node) close() {
	for i := range n.lanes {
		l := &n.lanes[i]
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
	pipe := n.rdb.Pipeline()
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
			return
		}
		batch, l.queue = l.queue, batch[:0]
		l.running = true
		l.mu.Unlock()
		n.exec(batch, pipe)
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

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.at, true }

var errSkipped = errors.New("redlock: request dropped before it was sent")

// exec sends batch as one pipeline (or a single command when pipe is nil)
// and delivers every reply.
func (n *node) exec(batch []*request, pipe redis.Pipeliner) {
	now := time.Now()
	var at time.Time
	live := 0
	for _, r := range batch {
		if err := r.dropped(now); err != nil {
			deliver(r, err)
			continue
		}
		r.build(false)
		if r.deadline.After(at) {
			at = r.deadline
		}
		batch[live] = r
		live++
	}
	batch = batch[:live]
	if live == 0 {
		return
	}
	ctx := deadlineCtx{context.Background(), at}
	if !n.loaded.Load() {
		for _, r := range batch {
			if r.kind != opAcquire {
				n.loadScripts(ctx)
				break
			}
		}
	}
	n.run(ctx, batch, pipe)
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
		n.loadScripts(ctx)
		for _, r := range batch[:retry] {
			r.build(false)
		}
		n.run(ctx, batch[:retry], pipe)
		for _, r := range batch[:retry] {
			if noScript(r.cmd.Err()) { // could not load: EVAL, one by one
				r.build(true)
				n.run(ctx, []*request{r}, nil)
			}
		}
	}
	for _, r := range batch {
		v, err := r.result()
		deliverVal(r, v, err)
	}
}

func (n *node) run(ctx context.Context, batch []*request, pipe redis.Pipeliner) {
	if pipe == nil || len(batch) == 1 {
		for _, r := range batch {
			_ = n.rdb.Process(ctx, r.cmd)
		}
		return
	}
	for _, r := range batch {
		_ = pipe.Process(ctx, r.cmd)
	}
	_, _ = pipe.Exec(ctx)
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
		return fmt.Errorf("%w: waited in the queue past the node timeout", context.DeadlineExceeded)
	}
	return nil
}

func deliver(r *request, err error) { deliverVal(r, 0, err) }

func deliverVal(r *request, v int64, err error) {
	if r.rd != nil {
		r.rd.replies <- reply{idx: r.idx, val: v, err: err}
	}
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
