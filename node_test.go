package redlock

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// exec runs reqs as one batch on master 0's first lane, as its worker would,
// and returns each request's answer by position.
func execBatch(t *testing.T, c *Client, reqs []op) []error {
	t.Helper()
	// A round sized for the batch (a client's rounds hold N replies), with
	// a pool of its own.
	rd := &round{replies: make(chan reply, len(reqs)), pool: &sync.Pool{}}
	rd.refs.Store(1)
	defer rd.done()
	batch := make([]*request, len(reqs))
	for i := range reqs {
		r := c.requests.Get().(*request)
		r.op = reqs[i]
		r.idx, r.rd = i, rd
		if r.deadline.IsZero() {
			r.deadline = time.Now().Add(time.Second)
		}
		rd.refs.Add(1)
		batch[i] = r
	}
	n := c.nodes[0]
	l := n.lane
	l.mu.Lock()
	for l.running || !l.waiting { // the worker parked: the lane is ours
		l.mu.Unlock()
		time.Sleep(time.Millisecond)
		l.mu.Lock()
	}
	l.running, l.stalled = true, time.Now().Add(time.Second)
	l.mu.Unlock()
	l.run(batch)
	l.mu.Lock()
	l.running = false
	l.mu.Unlock()
	got := make([]error, len(reqs))
	seen := make([]bool, len(reqs))
	for range reqs {
		r := <-rd.replies
		if seen[r.idx] {
			t.Fatalf("request %d answered twice", r.idx)
		}
		seen[r.idx] = true
		got[r.idx] = r.err
	}
	select {
	case r := <-rd.replies:
		t.Fatalf("extra reply %+v", r)
	default:
	}
	return got
}

// TestBatchDeliversEachReplyOnce sends one pipeline mixing acquires and
// scripts the master has never seen, and checks every request gets exactly
// its own answer once.
func TestBatchDeliversEachReplyOnce(t *testing.T) {
	ms, cs := minis(t, 1)
	c := newClient(t, cs)
	ms[0].Set("mine", "tok")
	ms[0].Set("theirs", "other")
	reqs := []op{
		testOp(opRelease, "mine", "", "tok", 0),                // nil
		testOp(opAcquire, "free", "", "tok", 1000),             // nil
		testOp(opRelease, "theirs", "", "tok", 0),              // ErrTaken
		testOp(opAcquire, "theirs", "", "tok", 1000),           // ErrTaken
		testOp(opExtend, "absent", "", "tok", 1000),            // nil (re-taken)
		testOp(opRelease, "nothing", "", "tok", 0),             // errAbsent
		testOp(opAcquireFenced, "f", "{f}:fence", "tok", 1000), // nil, counter 1
	}
	want := []error{nil, nil, ErrTaken, ErrTaken, nil, errAbsent, nil}
	got := execBatch(t, c, reqs)
	for i, w := range want {
		if got[i] != w {
			t.Errorf("request %d (%v %v): got %v, want %v", i, reqs[i].kind, reqs[i].key, got[i], w)
		}
	}
}

// TestQueuedRequestsHonourDeadlineAndContext checks that a request whose
// caller gave up, or whose node timeout passed while it waited, is not sent.
func TestQueuedRequestsHonourDeadlineAndContext(t *testing.T) {
	ms, cs := minis(t, 1)
	c := newClient(t, cs)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a := testOp(opAcquire, "a", "", "t", 1000)
	a.done = ctx.Done()
	b := testOp(opAcquire, "b", "", "t", 1000)
	b.deadline = time.Now().Add(-time.Millisecond)
	for i, err := range execBatch(t, c, []op{a, b}) {
		if err == nil {
			t.Fatalf("request %d was sent", i)
		}
	}
	if ms[0].Exists("a") || ms[0].Exists("b") {
		t.Fatal("a dropped request reached the master")
	}
}

// TestScriptsLoadedBeforeFirstUse: with only some of our scripts in the
// master's cache, an Extend queued before a Release of the same lock must
// still run first, not be rerun after it (and re-take the released key).
func TestScriptsLoadedBeforeFirstUse(t *testing.T) {
	ms, cs := minis(t, 1)
	ctx := context.Background()
	if err := cs[0].ScriptLoad(ctx, releaseScript.src).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, cs)
	ms[0].Set("k", "tok")
	for i, err := range execBatch(t, c, []op{
		testOp(opExtend, "k", "", "tok", 60000),
		testOp(opRelease, "k", "", "tok", 0),
	}) {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if ms[0].Exists("k") {
		t.Fatal("the Extend ran after the Release and re-took the key")
	}
}

// TestRaiseDropsMastersNotRaised: a master whose counter cannot be raised to
// the fence no longer counts toward the quorum.
func TestRaiseDropsMastersNotRaised(t *testing.T) {
	ms, cs := minis(t, 3)
	c := newClient(t, cs, WithFencing())
	ms[0].Set("k", "tok")
	ms[1].Set("k", "tok")
	ms[2].Set("k", "other") // lost between the acquire and the raise
	rd := c.round()
	defer rd.done()
	copy(rd.vals, []int64{10, 1, 1})
	for i := range rd.nodes {
		rd.nodes[i].Err = nil
	}
	rd.ok = 3
	l := &Lock{op: testOp(opAcquireFenced, "k", "{k}:fence", "tok", 1000)}
	fence := c.raise(context.Background(), rd, l, time.Second)
	if fence != 10 || rd.ok != 2 || rd.nodes[2].Err == nil || rd.nodes[1].Err != nil {
		t.Fatalf("fence %d ok %d nodes %v", fence, rd.ok, rd.nodes)
	}
	if v, _ := ms[1].Get("{k}:fence"); v != "10" {
		t.Fatalf("master 1's counter %q, want 10", v)
	}
	if ms[2].Exists("{k}:fence") {
		t.Fatal("raised the counter of a master where the lock is not ours")
	}
}

// testOp is an op of kind on key with a TTL of ttlMs.
func testOp(kind opKind, key, ckey, token string, ttlMs int64) op {
	var ttl any
	if ttlMs > 0 {
		ttl = ttlMs
	}
	o := newOp(kind, key, ckey, token).with(kind, ttl, 0)
	if kind == opExtend {
		o.retakeBy = time.Now().Add(time.Minute).UnixMilli()
	}
	return o
}

// workerSeen is a go-redis hook that records whether a command ran on a
// lane's worker goroutine.
type workerSeen struct {
	mu     sync.Mutex
	worker []bool
}

func (h *workerSeen) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *workerSeen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.see(cmd.Name())
		return next(ctx, cmd)
	}
}
func (h *workerSeen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.see("pipeline")
		return next(ctx, cmds)
	}
}
func (h *workerSeen) see(string) {
	buf := make([]byte, 64<<10)
	buf = buf[:runtime.Stack(buf, false)]
	h.mu.Lock()
	h.worker = append(h.worker, strings.Contains(string(buf), "(*lane).work"))
	h.mu.Unlock()
}

// TestCancellableContextSendsInline: on one master whose client bounds
// reads by the deadline, an Obtain and a Release made with a cancellable
// context (a request's context, as most calls are) run on the caller's
// goroutine when the lane is idle, not through the lane's worker: two
// goroutine wake-ups fewer per round trip. A cancellation before the send
// still drops the request (TestQueuedRequestsHonourDeadlineAndContext).
func TestCancellableContextSendsInline(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	seen := &workerSeen{}
	rdb.AddHook(seen)
	c := newClient(t, []redis.UniversalClient{rdb})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 3 {
		l, err := c.Obtain(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.worker) < 6 {
		t.Fatalf("the hook saw %d commands, want at least 6", len(seen.worker))
	}
	for i, w := range seen.worker {
		if w {
			t.Errorf("command %d of %d ran on the lane's worker", i, len(seen.worker))
		}
	}
}
