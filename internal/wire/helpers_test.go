package wire

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redlock-go/redlock/internal/redistest"
)

// quiet drops go-redis's log lines: the fault tests make it log every
// refused dial.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m)
}

// The lane's tests run against a fake transport: no Redis, and (in a
// synctest bubble) no real time.

// fakeTransport records the batches it is given and answers every request
// with its position in the whole stream. Its knobs act on the next exec.
type fakeTransport struct {
	mu      sync.Mutex
	seen    []string      // keys, in the order the master would run them
	block   chan struct{} // exec waits on it when not nil
	entered chan struct{} // closed when an exec waits on block
	panics  int           // this many more execs panic
	delay   time.Duration // every exec takes this long (a round trip)
	resets  int
	sizes   []int    // of every batch
	kept    []string // keys of the Releases kept (keepOp)
	closed  bool
	busy    atomic.Bool // an exec is running: two at once is a bug
}

func (f *fakeTransport) exec(batch []*request, _ time.Time) {
	if f.busy.Swap(true) {
		panic("two execs at once")
	}
	defer f.busy.Store(false)
	f.mu.Lock()
	block, entered := f.block, f.entered
	f.block, f.entered = nil, nil
	panics := f.panics > 0
	if panics {
		f.panics--
	}
	delay := f.delay
	f.mu.Unlock()
	time.Sleep(delay)
	if block != nil {
		close(entered)
		<-block
	}
	if panics {
		panic("transport panics")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sizes = append(f.sizes, len(batch))
	for _, r := range batch {
		f.seen = append(f.seen, r.op.target.Key())
		r.val, r.err = int64(len(f.seen)), nil
	}
}

func (f *fakeTransport) reset([]*request) {
	f.mu.Lock()
	f.resets++
	f.mu.Unlock()
}

func (f *fakeTransport) keepOp(o Op) {
	f.mu.Lock()
	f.kept = append(f.kept, o.target.Key())
	f.mu.Unlock()
}

func (f *fakeTransport) tick(time.Time) bool { return false }

func (f *fakeTransport) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
}

// blockNext makes the next exec wait until the returned func is called,
// and returns a channel closed once it waits.
func (f *fakeTransport) blockNext() (entered <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	block, in := make(chan struct{}), make(chan struct{})
	f.block, f.entered = block, in
	return in, sync.OnceFunc(func() { close(block) })
}

// hookTransport is a fakeTransport that runs onExec (on the lane's runner,
// before the batch is sent) for every batch.
type hookTransport struct {
	*fakeTransport
	onExec func(batch []*request)
}

func (h *hookTransport) exec(batch []*request, now time.Time) {
	if h.onExec != nil {
		h.onExec(batch)
	}
	h.fakeTransport.exec(batch, now)
}

// testLane is a lane over a fake transport with its worker running, and
// what it delivered, by key.
type testLane struct {
	*lane
	t         *fakeTransport
	wg        sync.WaitGroup
	mu        sync.Mutex
	delivered map[string][]error
}

func newTestLane(t *testing.T) *testLane {
	return startTestLane(t, nil, nil)
}

// startTestLane is newTestLane whose transport is wrap's (nil: the fake
// itself), with setup run before the worker starts.
func startTestLane(t *testing.T, wrap func(*testLane, *fakeTransport) transport, setup func(*testLane)) *testLane {
	tl := &testLane{t: &fakeTransport{}, delivered: map[string][]error{}}
	var tr transport = tl.t
	if wrap != nil {
		tr = wrap(tl, tl.t)
	}
	tl.lane = newLane(tr, tl.record)
	if setup != nil {
		setup(tl)
	}
	tl.wg.Add(1)
	go tl.work(&tl.wg)
	t.Cleanup(func() {
		tl.close()
		tl.wg.Wait()
	})
	return tl
}

// newWaitingLane is newTestLane with waitCallers set, waitMax as given, and
// onExec hooked, set before the worker starts.
func newWaitingLane(t *testing.T, waitMax time.Duration, onExec func(tl *testLane, batch []*request)) *testLane {
	return startTestLane(t, func(tl *testLane, f *fakeTransport) transport {
		h := &hookTransport{fakeTransport: f}
		if onExec != nil {
			h.onExec = func(b []*request) { onExec(tl, b) }
		}
		return h
	}, func(tl *testLane) { tl.waitCallers, tl.waitMax = true, waitMax })
}

// record notes what was delivered for r's key.
func (tl *testLane) record(r *request) {
	tl.mu.Lock()
	k := r.op.target.Key()
	tl.delivered[k] = append(tl.delivered[k], r.err)
	tl.mu.Unlock()
}

// req is a request on key due within timeout.
func (tl *testLane) req(key string, timeout time.Duration) *request {
	return &request{op: Op{target: Target{key: key}, Call: Call{Deadline: time.Now().Add(timeout)}}}
}

// await returns once n requests were delivered in all, or fails after a
// second.
func (tl *testLane) await(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		tl.mu.Lock()
		got := 0
		for _, errs := range tl.delivered {
			got += len(errs)
		}
		tl.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests delivered", got, n)
		}
	}
}

// errsOf returns what was delivered for k.
func (tl *testLane) errsOf(k string) []error {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return append([]error(nil), tl.delivered[k]...)
}

// ranOutSoFar is how many of tl's waits for callers ran out.
func (tl *testLane) ranOutSoFar() int {
	tl.lane.mu.Lock()
	defer tl.lane.mu.Unlock()
	return tl.ranOut
}

// stallLane returns a test lane whose worker holds a batch its master
// does not answer (a frozen master, behind a client whose reads its
// deadline does not bound), out for more than twice its 10ms timeout: the
// master is marked not answering. release lets the batch come back.
func stallLane(t *testing.T) (tl *testLane, release func()) {
	t.Helper()
	tl = newTestLane(t)
	entered, release := tl.t.blockNext()
	t.Cleanup(release)
	tl.send(tl.req("stuck", 10*time.Millisecond), false)
	<-entered
	time.Sleep(30 * time.Millisecond)
	if tl.lane.mu.Lock(); time.Now().Before(tl.stalled) {
		t.Fatal("a batch out for three times its timeout does not mark its master")
	}
	tl.lane.mu.Unlock()
	return tl, release
}

// queueLen returns how many requests wait in l's queue.
func queueLen(l *lane) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// parked waits until l's worker waits for work.
func parked(l *lane) {
	for {
		l.mu.Lock()
		w := l.waiting
		l.mu.Unlock()
		if w {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// loopCallers makes tl's delivery send, for every request c<i>-<n> of the
// callers callers, c<i>-<n+1> after work, up to rounds requests each. The
// test sends each caller's first request; wait returns once every one was
// delivered.
func loopCallers(tl *testLane, callers, rounds int, work func()) (wait func()) {
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(callers * rounds))
	done := make(chan struct{})
	tl.lane.mu.Lock() // the worker reads deliver after taking it
	tl.lane.deliver = func(r *request) {
		var c, n int
		if k, _ := fmt.Sscanf(r.op.target.Key(), "c%d-%d", &c, &n); k != 2 {
			return // not a caller's
		}
		if left.Add(-1) == 0 {
			close(done)
		}
		if n+1 < rounds {
			wg.Go(func() {
				work()
				tl.send(tl.req(fmt.Sprintf("c%d-%d", c, n+1), time.Minute), false)
			})
		}
	}
	tl.lane.mu.Unlock()
	return func() {
		<-done
		wg.Wait()
	}
}

// closeWhileSending runs a lane that waits for its callers (a random wait
// of up to 3ms, each batch taking delay), has callers goroutines call send
// each times, closes the lane after a random time of up to before, and
// checks that its worker exits and that every request was delivered once
// (one refused after the close is failed with ErrClosed by send: delivered
// too). Each run is a synctest bubble of its own.
func closeWhileSending(t *testing.T, run int, delay, before time.Duration, callers, each int, send func(tl *testLane, c, j int)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) { closeWhileSendingIn(t, run, delay, before, callers, each, send) })
}

func closeWhileSendingIn(t *testing.T, run int, delay, before time.Duration, callers, each int, send func(tl *testLane, c, j int)) {
	tl := startTestLane(t, nil, func(tl *testLane) {
		tl.t.delay = delay
		tl.waitCallers, tl.waitMax = true, time.Duration(rand.IntN(3000))*time.Microsecond
	})
	var senders sync.WaitGroup
	for c := range callers {
		senders.Go(func() {
			for j := range each {
				send(tl, c, j)
			}
		})
	}
	time.Sleep(time.Duration(rand.Int64N(int64(before))))
	tl.close()
	done := make(chan struct{})
	go func() { tl.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("run %d: the worker did not exit after close", run)
	}
	senders.Wait()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	got := 0
	for k, errs := range tl.delivered {
		got += len(errs)
		if len(errs) != 1 {
			t.Fatalf("run %d: %s delivered %d times: %v", run, k, len(errs), errs)
		}
	}
	if got != callers*each {
		t.Fatalf("run %d: %d of %d requests delivered", run, got, callers*each)
	}
}

// The tests of a Master run against in-process masters (miniredis) or real
// servers (internal/redistest): sockets, so never in a synctest bubble.

// minis starts n in-process masters and returns them with their clients.
func minis(t *testing.T, n int) ([]*miniredis.Miniredis, []redis.UniversalClient) {
	t.Helper()
	ms := make([]*miniredis.Miniredis, n)
	cs := make([]redis.UniversalClient, n)
	for i := range n {
		ms[i] = miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: ms[i].Addr(), MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return ms, cs
}

// newMaster starts the wire to rdb as a Client's only master (cfg.Single
// is set), closed when the test ends.
func newMaster(t *testing.T, rdb redis.UniversalClient, cfg Config) *Master {
	t.Helper()
	cfg.Single = true
	if cfg.Workers == nil {
		cfg.Workers = new(sync.WaitGroup)
	}
	m := NewMaster(rdb, cfg)
	t.Cleanup(func() {
		m.Close()
		cfg.Workers.Wait()
	})
	return m
}

// chanSink takes replies on a channel.
type chanSink chan Reply

func (s chanSink) Deliver(r Reply) { s <- r }

// do sends o to m as master 0, as the root's round does (inline when the
// lane allows it), due within timeout, and waits for its reply.
func do(m *Master, o Op, timeout time.Duration) Reply {
	o.Deadline, o.Inline = time.Now().Add(timeout), true
	s := make(chanSink, 1)
	m.Send(&o, 0, s)
	return <-s
}

// lockTTL is the TTL the tests' locks take: a minute, in ms.
const lockTTL = int64(60000)

// lock takes key under token on m, as a Client's Obtain of one master
// does, with a node timeout of timeout.
func lock(m *Master, key, token string, timeout time.Duration) error {
	return do(m, Acquire(NewTarget(key, "", token), lockTTL, nil), timeout).Err
}

// unlock releases key under token on m, as a Lock's Release does.
func unlock(m *Master, key, token string, timeout time.Duration) error {
	return do(m, Release(NewTarget(key, "", token), nil, ReleaseFacts{}), timeout).Err
}

// cycle takes key on m and releases it.
func cycle(m *Master, key string, timeout time.Duration) error {
	if err := lock(m, key, "tok-"+key, timeout); err != nil {
		return err
	}
	return unlock(m, key, "tok-"+key, timeout)
}

// connID returns the client ID of the connection m's lane holds; the lane
// must be idle.
func connID(m *Master) int64 {
	m.lane.mu.Lock() // the lane is idle: its transport is ours to read
	defer m.lane.mu.Unlock()
	return m.lane.t.(*redisTransport).id
}

// testOp is an Op of kind on key with a TTL of ttlMs (none for 0).
func testOp(kind Kind, key, ckey, token string, ttlMs int64) Op {
	var ttl any
	if ttlMs > 0 {
		ttl = ttlMs
	}
	t := NewTarget(key, ckey, token)
	switch kind {
	case KindRelease:
		return Release(t, ttl, ReleaseFacts{})
	case KindExtend:
		return Extend(t, ttl, 0, Bounds{RetakeBy: time.Now().Add(time.Minute).UnixMilli()})
	}
	return Acquire(t, ttl, nil)
}

// execBatch runs ops as one batch on m's lane, as its worker would, and
// returns each request's answer by position.
func execBatch(t *testing.T, m *Master, ops []Op) []error {
	t.Helper()
	got := make([]error, len(ops))
	for i, r := range execBatchReplies(t, m, ops) {
		got[i] = r.Err
	}
	return got
}

// execBatchReplies is execBatch, with the whole replies.
func execBatchReplies(t *testing.T, m *Master, ops []Op) []Reply {
	t.Helper()
	sink := make(chanSink, len(ops))
	batch := make([]*request, len(ops))
	for i := range ops {
		r := m.reqs.Get().(*request)
		r.op, r.idx, r.sink = ops[i], i, sink
		if r.op.Deadline.IsZero() {
			r.op.Deadline = time.Now().Add(time.Second)
		}
		batch[i] = r
	}
	l := m.lane
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
	got := make([]Reply, len(ops))
	seen := make([]bool, len(ops))
	for range ops {
		r := <-sink
		if seen[r.Idx] {
			t.Fatalf("request %d answered twice", r.Idx)
		}
		seen[r.Idx] = true
		got[r.Idx] = r
	}
	select {
	case r := <-sink:
		t.Fatalf("extra reply %+v", r)
	default:
	}
	return got
}

// laneIdle waits until the lanes of rdb's master gave their connections
// back to its pool.
func laneIdle(t *testing.T, rdb *redis.Client) {
	t.Helper()
	redistest.Eventually(t, func() error {
		if s := rdb.PoolStats(); s.IdleConns != s.TotalConns {
			return fmt.Errorf("the lanes still hold %d connections", s.TotalConns-s.IdleConns)
		}
		return nil
	})
}

// skewedClock builds the chaos suite's clock shim (chaos/shim/clockshim.c)
// and returns the environment that runs a redis-server with its wall clock
// offset by offset, and a function that moves it to another offset at
// once (a jump). It skips without a C compiler.
func skewedClock(t *testing.T, offset time.Duration) ([]string, func(time.Duration)) {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc for the clock shim: %v", err)
	}
	dir := t.TempDir()
	so := filepath.Join(dir, "clockshim.so")
	src := filepath.Join("..", "..", "chaos", "shim", "clockshim.c")
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("building the clock shim: %v: %s", err, out)
	}
	// The control file: seq (even: stable), offset ns, rate ppm, anchor ns.
	ctl := make([]byte, 4096)
	binary.LittleEndian.PutUint64(ctl[0:], 2)
	binary.LittleEndian.PutUint64(ctl[8:], uint64(int64(offset)))
	binary.LittleEndian.PutUint64(ctl[16:], 1_000_000)
	path := filepath.Join(dir, "clock")
	if err := os.WriteFile(path, ctl, 0o644); err != nil {
		t.Fatal(err)
	}
	seq := uint64(2)
	jump := func(to time.Duration) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY, 0) // never truncated: the server maps it
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		put := func(at int64, v uint64) {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], v)
			if _, err := f.WriteAt(b[:], at); err != nil {
				t.Fatal(err)
			}
		}
		put(0, seq+1) // odd: the reader waits
		put(8, uint64(int64(to)))
		seq += 2
		put(0, seq)
	}
	return []string{"LD_PRELOAD=" + so, "CLOCKSHIM_FILE=" + path}, jump
}
