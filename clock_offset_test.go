package redlock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// These tests run masters whose wall clocks read off the client's (the
// clock shim, clockShim), and check that an Extend's bounds (the
// validity's end, the re-take deadline) reach each master in its own
// clock: measured on every fresh connection, so that only the clocks'
// rates must agree.

// setClock moves the wall clock of the redis-server run with env (from
// clockShim) to offset from the real one, at once: a jump.
func setClock(t *testing.T, env []string, offset time.Duration) {
	t.Helper()
	var path string
	for _, e := range env {
		if p, ok := strings.CutPrefix(e, "CLOCKSHIM_FILE="); ok {
			path = p
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0) // never truncated: the server maps it
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		t.Fatal(err)
	}
	seq := binary.LittleEndian.Uint64(b[:])
	put := func(at int64, v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		if _, err := f.WriteAt(b[:], at); err != nil {
			t.Fatal(err)
		}
	}
	put(0, seq+1) // odd: the reader waits
	put(8, uint64(int64(offset)))
	put(0, seq+2)
}

// noInfoUser returns a client of s that logs in as a user who may do
// everything but INFO (the client then measures no clock offset), with
// reads bounded by the request's deadline.
func noInfoUser(t *testing.T, s *redistest.Server) redis.UniversalClient {
	t.Helper()
	ctx := context.Background()
	direct := redistest.Clients(t, []*redistest.Server{s})[0]
	if err := direct.Do(ctx, "acl", "setuser", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := s.Client(func(o *redis.Options) {
		o.Username, o.Password = "noinfo", "pw"
		o.ContextTimeoutEnabled = true
	})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return rdb
}

// events records an Observer's events.
type events struct {
	mu sync.Mutex
	es []redlock.Event
}

func (e *events) Observe(_ context.Context, ev redlock.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.es = append(e.es, ev)
}

// masters returns the MasterEvents seen so far.
func (e *events) masters() []redlock.MasterEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ms []redlock.MasterEvent
	for _, ev := range e.es {
		if m, ok := ev.(*redlock.MasterEvent); ok {
			ms = append(ms, *m)
		}
	}
	return ms
}

// pastValidity reports whether err is a master's answer that it ran an
// Extend past the lock's validity end, by its clock.
func pastValidity(err error) bool {
	return err != nil && strings.Contains(err.Error(), "past the lock's validity end")
}

// TestMasterClockBehindRunsNoStragglerPastTheValidity: the revival of
// TestExtendHeldUpByAFrozenMasterDoesNotReviveALapsedLock on a master 0
// whose clock is 3s behind the client's, more than the validity: an
// Extend held up in its socket until the validity has ended reaches it
// when its clock still reads before the validity's end as the client
// counts it. The bound must come in master 0's own clock: the held-up
// Extend does nothing there, and the key expires when the renewal master
// 0 ran before it froze says.
func TestMasterClockBehindRunsNoStragglerPastTheValidity(t *testing.T) {
	ctx := context.Background()
	const lag = 3 * time.Second
	servers := append(redistest.Start(t, 1, redistest.Options{Env: clockShim(t, -lag)}), redistest.Start(t, 2)...)
	direct := redistest.Clients(t, servers)
	if off := masterOffset(t, direct[0]); off > -lag+100*time.Millisecond || off < -lag-100*time.Millisecond {
		t.Fatalf("setup: master 0's clock is %v off, want %v", off, -lag)
	}
	c := newClient(t, boundedClients(t, servers), redlock.WithNodeTimeout(200*time.Millisecond))
	const ttl = 1500 * time.Millisecond
	lock, err := c.Obtain(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	t.Cleanup(func() {
		for _, s := range servers {
			s.Cont()
		}
	})
	for _, s := range servers[1:] {
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	if err := lock.Extend(ctx, ttl); err == nil || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend with masters 1 and 2 frozen: %v, want a failure that is not ErrLockLost", err)
	}
	ran := time.Now() // master 0 ran that Extend before now
	if pttl := direct[0].PTTL(ctx, "k").Val(); pttl < ttl-250*time.Millisecond {
		t.Fatalf("setup: master 0's key has %v left, want the failed Extend's %v", pttl, ttl)
	}
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	if err := lock.Extend(ctx, ttl); err == nil || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend with every master frozen: %v, want a failure that is not ErrLockLost", err)
	}
	for lock.Validity() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	for _, s := range servers {
		if err := s.Cont(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // master 0 runs the held-up Extend
	if v := get(t, direct[0], "k"); v != lock.Token() {
		t.Fatalf("setup: master 0 holds %q after it resumed, want the lock's key (the failed Extend's renewal)", v)
	}
	after := direct[0].PTTL(ctx, "k").Val()
	left := time.Until(ran.Add(ttl))
	if after > left+100*time.Millisecond {
		t.Fatalf("master 0 (clock %v behind) had %v left on the key after it resumed, past the %v its last renewal before the freeze left: a held-up Extend revived the lapsed lock", lag, after.Round(time.Millisecond), left.Round(time.Millisecond))
	}
	if err := lock.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release of the lapsed lock: %v, want ErrLockLost", err)
	}
}

// TestAttachOnAMasterWhoseClockIsAhead: a Client's first request to a
// master may be an Extend (Attach's confirmation), built before its lane's
// first connection measured the master's clock: it goes out with the
// offset that connection measured. Here the master is 5s ahead, more than
// the lock's TTL.
func TestAttachOnAMasterWhoseClockIsAhead(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1, redistest.Options{Env: clockShim(t, 5*time.Second)})
	clients := boundedClients(t, servers)
	a, err := redlock.NewSingle(clients[0], redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	l, err := a.Obtain(ctx, "job", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := redlock.NewSingle(clients[0], redlock.WithNodeTimeout(200*time.Millisecond)) // another process
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h, err := b.Attach(ctx, "job", l.Token(), 2*time.Second, 0)
	if err != nil {
		t.Fatalf("Attach on a healthy master whose clock is 5s ahead: %v", err)
	}
	if err := h.Extend(ctx, 2*time.Second); err != nil {
		t.Fatalf("Extend of the attached lock: %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release of the attached lock: %v", err)
	}
}

// TestStaleClockOffsetFailsThatMasterOnly: a master's clock that jumps
// ahead after its offset was measured makes the bounds it gets early, until
// the lane's next fresh connection: that master answers its renewals with
// a refusal of its clock (nothing done), which counts as its failure,
// never as a loss. Over three masters the lock renews on the other two;
// over that master alone, Extend fails (ErrUnavailable) and the lock stays
// valid until its validity runs out; once the lane takes a fresh
// connection, the master renews again.
func TestStaleClockOffsetFailsThatMasterOnly(t *testing.T) {
	ctx := context.Background()
	env := clockShim(t, 0)
	servers := append(redistest.Start(t, 1, redistest.Options{Env: env}), redistest.Start(t, 2)...)
	direct := redistest.Clients(t, servers)
	clients := boundedClients(t, servers)
	three := newClient(t, clients, redlock.WithNodeTimeout(200*time.Millisecond))
	one, err := redlock.NewSingle(clients[0], redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	l3, err := three.Obtain(ctx, "k3", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l1, err := one.Obtain(ctx, "k1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A shorter validity (the keys keep their minute: Extend never
	// shortens one), which master 0's jump will pass.
	for _, l := range []*redlock.Lock{l3, l1} {
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	setClock(t, env, 20*time.Second)
	if off := masterOffset(t, direct[0]); off < 19*time.Second {
		t.Fatalf("setup: master 0's clock is %v ahead after the jump, want 20s", off)
	}
	// Master 0's answer may come after the quorum's: the lock on master 0
	// alone shows it.
	if err := l3.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend over three masters, master 0's clock jumped 20s ahead: %v, want the other two's quorum", err)
	}
	err = l1.Extend(ctx, 5*time.Second)
	if !errors.Is(err, redlock.ErrUnavailable) || errors.Is(err, redlock.ErrLockLost) || !pastValidity(err) {
		t.Fatalf("Extend on master 0 alone after its clock jumped: %v, want ErrUnavailable for the master's clock refusal, not ErrLockLost", err)
	}
	if l1.Validity() <= 0 || l3.Validity() <= 0 {
		t.Fatalf("validity %v over master 0 alone, %v over three: a renewal refused by a master's clock lost a lock", l1.Validity(), l3.Validity())
	}
	if n := count(holdersOf(t, direct, "k3"), l3.Token()); n != 3 {
		t.Fatalf("%d masters hold the lock's key, want 3", n)
	}
	// The lane's next fresh connection measures the jumped clock.
	if err := direct[0].Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	var last error
	for range 5 {
		if last = l1.Extend(ctx, 5*time.Second); last == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("Extend on master 0 after its lane's connection was closed: %v, want it renewed with the offset a fresh connection measured", last)
	}
}

// TestPastValidityAnswerIsNoMasterDown: a master that answers an Extend
// that it ran past the lock's validity end, by its clock, answered: the
// Observer hears that it answers again, never that it stopped. Here the
// client may not read the master's clock (INFO denied: offset 0) and the
// master's is 20s ahead, more than the lock's TTL.
func TestPastValidityAnswerIsNoMasterDown(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1, redistest.Options{Env: clockShim(t, 20*time.Second)})
	rdb := noInfoUser(t, servers[0])
	var seen events
	c, err := redlock.NewSingle(rdb, redlock.WithNodeTimeout(200*time.Millisecond), redlock.WithObserver(&seen))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Obtain(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	takeDown(t, "frozen", servers[0])
	if err := l.Extend(ctx, 10*time.Second); err == nil {
		t.Fatal("Extend on a frozen master succeeded")
	}
	if ms := seen.masters(); len(ms) != 1 || ms[0].Up {
		t.Fatalf("MasterEvents after an Extend on the frozen master: %+v, want one that says it stopped answering", ms)
	}
	if err := servers[0].Cont(); err != nil {
		t.Fatal(err)
	}
	var err2 error
	redistest.Eventually(t, func() error {
		err2 = l.Extend(ctx, 10*time.Second)
		if !pastValidity(err2) {
			return err2
		}
		return nil
	})
	if errors.Is(err2, redlock.ErrLockLost) {
		t.Fatalf("Extend answered past the validity by the master's clock: %v, want no loss", err2)
	}
	if ms := seen.masters(); len(ms) != 2 || !ms[1].Up {
		t.Fatalf("MasterEvents after the master answered the Extend: %+v, want it back up", ms)
	}
}
