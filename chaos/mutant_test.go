package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

// A subject is the lock a scenario runs against: the library, or a mutant
// (a deliberately broken lock, below) whose row must fail a named MUST
// check.
type subject struct {
	mutant string // the mutant's knobs, comma-separated; "" for the library
	expect string // with a mutant: a substring of the MUST message that has to fail
	only   string // run only the scenario's variant of this name ("": all)
}

// library is the subject of every scenario row.
var library = &subject{}

func (s *subject) locker() NewLocker {
	if s.mutant == "" {
		return Redlock
	}
	return func(ms []redis.UniversalClient, cfg LockConfig) (Locker, error) { return newMutant(s.mutant, ms, cfg) }
}

// runs reports whether the scenario's variant name is to run: only lists
// the variants to run, comma-separated.
func (s *subject) runs(variant string) bool {
	return s.only == "" || slices.Contains(strings.Split(s.only, ","), variant)
}

// knobs break one property each. With none set the mutant is a plain
// Redlock (quorum, NX, PX, validity = TTL - elapsed - drift, undo of failed
// attempts, re-take on Extend, a watchdog that cancels at the validity's end,
// fences raised on the quorum) that passes every scenario.
type knobs struct {
	waitAll       bool // waits for every master (up to the node timeout) instead of deciding at quorum
	noNX          bool // the acquire is SET without NX: every attempt is granted
	quorumAll     bool // needs every master
	quorumOne     bool // one master is enough
	neverRelease  bool // Release reports success and deletes nothing
	noExpiry      bool // the acquire sets no PX: keys never expire
	fullValidity  bool // the validity is the whole TTL from the call's return: no elapsed time, no drift
	noDrift       bool // no clock-drift allowance
	ignoreTimeout bool // no node timeout: waits for each master as long as the context allows
	bareErr       bool // ErrNotObtained without a *QuorumError
	constFence    bool // every holder gets fence 1
	noRetake      bool // Extend does not re-take a vanished key
	revive        bool // Extend neither checks the validity nor stops at its end: a lapsed lock comes back
	noCap         bool // Extend checks the validity when it starts but counts replies past its end
	keepValidity  bool // a failed Extend leaves the old validity, whatever TTL it set on the masters it reached
	lateCancel    bool // the watchdog cancels only when a renewal is refused, never at the validity's end
	noRenew       bool // the watchdog never renews
	closeNoWait   bool // Close neither cancels running Do calls nor waits for them
	closeBlocks   bool // a Do retrying its Obtain does not notice Close, which waits for it
	leak          bool // Close leaves a goroutine running
	slowUndo      bool // a failed attempt's undo waits for every master with a fresh deadline, past the caller's context
	retryForever  bool // Obtain retries every 10ms until its context ends, whatever the options say
	straggle      bool // an Extend's request to the last master goes out late, in the background, and re-takes past a release
	// A set of keys (ObtainMulti) is taken key by key, one attempt each;
	// when one fails, the keys taken are released and the whole set is
	// tried again: a correct lock on several keys (no set holds a key while
	// it waits), one round per key.
	multiWait  bool // holds the keys taken while it waits for the next: two sets can each hold a key the other waits for
	multiFirst bool // only the first key is taken
	noWake     bool // a waiting Obtain (Wait) is never woken: after a refused attempt it sleeps until its context ends
	// A waiting Obtain polls every 10ms, and so does WaitReleased: a poller
	// stands for the library's wake-ups. With gateWait a waiter refused
	// sleeps until the key expires where it lives longest: one master's
	// stray key (a minority) holds every waiter off although a quorum is
	// free.
	gateWait bool
	// An Extend's requests do nothing past their deadline by the master's
	// clock (the validity's end): noGuard runs them whenever they arrive.
	noGuard bool
	// The watchdog renews at least every probeEvery (250ms): it stands for
	// the library's probe that hears a master change or a subscription cut
	// within about that. noProbe renews only on its schedule.
	noProbe bool
	noKeep  bool // a Release before the minimum hold (HoldAtLeast) deletes the key, and KeptUntil still says it is kept
	// handoverStray: a handle from Attach releases nothing, and says it did.
	handoverStray bool
}

// probeEvery is how often at most the mutant's watchdog renews without
// noProbe.
const probeEvery = 250 * time.Millisecond

func parseKnobs(spec string) (knobs, error) {
	var k knobs
	fields := map[string]*bool{
		"waitall": &k.waitAll, "nonx": &k.noNX, "quorumall": &k.quorumAll, "quorumone": &k.quorumOne,
		"neverrelease": &k.neverRelease, "noexpiry": &k.noExpiry, "fullvalidity": &k.fullValidity,
		"nodrift": &k.noDrift, "ignoretimeout": &k.ignoreTimeout, "bareerr": &k.bareErr,
		"constfence": &k.constFence, "noretake": &k.noRetake, "revive": &k.revive, "nocap": &k.noCap,
		"keepvalidity": &k.keepValidity, "latecancel": &k.lateCancel, "norenew": &k.noRenew,
		"closenowait": &k.closeNoWait, "closeblocks": &k.closeBlocks, "leak": &k.leak,
		"slowundo": &k.slowUndo, "straggle": &k.straggle, "retryforever": &k.retryForever, "nowake": &k.noWake,
		"multiwait": &k.multiWait, "multifirst": &k.multiFirst, "gatewait": &k.gateWait, "noguard": &k.noGuard,
		"noprobe": &k.noProbe, "nokeep": &k.noKeep, "handoverstray": &k.handoverStray,
	}
	for _, f := range strings.Split(spec, ",") {
		if f == "" || f == "none" {
			continue
		}
		p, ok := fields[f]
		if !ok {
			return k, fmt.Errorf("unknown mutant knob %q", f)
		}
		*p = true
	}
	return k, nil
}

// The mutant's scripts. Each names the command that tells the adversary's
// witness what kind it is (DEL: release, PEXPIRE: extend, INCR: fenced
// acquire). A release leaves a tombstone for its token (KEYS[2], 10s), and
// an extend re-takes an absent key only without one: a straggling extend
// that reaches a master after the release cannot bring the key back.
var (
	mutantRelease = redis.NewScript(`redis.call('SET', KEYS[2], '1', 'PX', 10000)
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
if v == false then return -1 end
return 0`)
	mutantExtend = redis.NewScript(`if ARGV[5] ~= '0' then
	local t = redis.call('TIME')
	if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) >= tonumber(ARGV[5]) then return -2 end
end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if v == false and ARGV[3] == '1' and (ARGV[4] == '0' or redis.call('EXISTS', KEYS[2]) == 0) then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end
if v == false then return -1 end
return 0`)
	// mutantKeep is the Release of a lock before its minimum hold: the key
	// stays for the rest of it.
	mutantKeep = redis.NewScript(`local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if v == false then return -1 end
return 0`)
	mutantAcquireFenced = redis.NewScript(`local ok
if ARGV[3] == 'nx' then ok = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
elseif ARGV[3] == 'nopx' then ok = redis.call('SET', KEYS[1], ARGV[1], 'NX')
else ok = redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
if ok then return redis.call('INCR', KEYS[2]) end
return 0`)
	mutantRaise = redis.NewScript(`if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
return 1`)
)

type mutantLocker struct {
	ms      []redis.UniversalClient
	cfg     LockConfig
	k       knobs
	quorum  int
	epoch   time.Time
	closing chan struct{}
	closed  atomic.Bool
	mu      sync.Mutex     // orders Do's entry and every round's requests against Close
	dos     sync.WaitGroup // Do calls and watchdogs
	bg      sync.WaitGroup // requests in flight
}

func newMutant(spec string, ms []redis.UniversalClient, cfg LockConfig) (*mutantLocker, error) {
	k, err := parseKnobs(spec)
	if err != nil {
		return nil, err
	}
	m := &mutantLocker{ms: ms, cfg: cfg, k: k, quorum: len(ms)/2 + 1, epoch: time.Now(), closing: make(chan struct{})}
	switch {
	case k.quorumAll:
		m.quorum = len(ms)
	case k.quorumOne:
		m.quorum = 1
	}
	// Load the scripts on every master that answers (it also opens a
	// connection), so that a first request is one round trip, as the
	// library's is: a broken lock must fail its check for its knob, not for
	// a slow start.
	var wg sync.WaitGroup
	for _, rdb := range ms {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			for _, sc := range []*redis.Script{mutantRelease, mutantExtend, mutantAcquireFenced, mutantRaise, mutantKeep} {
				sc.Load(ctx, rdb)
			}
		})
	}
	wg.Wait()
	return m, nil
}

func (m *mutantLocker) timeout(ttl time.Duration) time.Duration {
	if m.cfg.NodeTimeout > 0 {
		return m.cfg.NodeTimeout
	}
	return min(ttl/10, 500*time.Millisecond)
}

func (m *mutantLocker) drift(ttl time.Duration) time.Duration {
	if m.k.noDrift {
		return 0
	}
	return time.Duration(float64(ttl)*redlock.DefaultDriftFactor) + 2*time.Millisecond
}

func (m *mutantLocker) now() int64 { return int64(time.Since(m.epoch)) }

// A tally is one round's answers: nil agreed, errRefused refused, else failed.
type tally struct {
	nodes               []redlock.NodeError
	vals                []int64
	ok, refused, failed int
}

var errRefused = errors.New("refused")

// round sends req to every master (or to those in only, when set) under a
// deadline and collects the answers until the outcome is decided (or,
// with waitAll, every master has answered), the deadline passes or ctx
// ends. Requests still in flight go on in the background.
func (m *mutantLocker) round(ctx context.Context, deadline time.Time, req func(ctx context.Context, i int) (int64, error), decide bool) *tally {
	n := len(m.ms)
	type ans struct {
		i   int
		v   int64
		err error
	}
	t := &tally{nodes: make([]redlock.NodeError, n), vals: make([]int64, n)}
	for i := range n {
		t.nodes[i] = redlock.NodeError{Addr: fmt.Sprintf("master[%d]", i), Err: errors.New("no reply")}
	}
	m.mu.Lock() // no request starts once Close waits for them
	if m.closed.Load() {
		m.mu.Unlock()
		for i := range n {
			t.nodes[i].Err = redlock.ErrClosed
		}
		t.failed = n
		return t
	}
	m.bg.Add(n)
	m.mu.Unlock()
	ch := make(chan ans, n)
	rctx, answered := countdown(ctx, deadline, n)
	for i := range n {
		go func() {
			defer m.bg.Done()
			v, err := req(rctx, i)
			ch <- ans{i, v, err}
			answered()
		}()
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for got := 0; got < n; got++ {
		if decide && !m.k.waitAll && (t.ok >= m.quorum || t.refused+t.failed > n-m.quorum) {
			break
		}
		select {
		case a := <-ch:
			t.nodes[a.i].Err, t.vals[a.i] = a.err, a.v
			switch {
			case a.err == nil:
				t.ok++
			case errors.Is(a.err, errRefused):
				t.refused++
			default:
				t.failed++
			}
		case <-timer.C:
			return t
		case <-ctx.Done():
			return t
		}
	}
	return t
}

// countdown returns a context that ends at deadline, not with ctx, and
// frees its timer once done has been called n times.
func countdown(ctx context.Context, deadline time.Time, n int) (context.Context, func()) {
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	var left atomic.Int32
	left.Store(int32(n))
	return rctx, func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
}

func (m *mutantLocker) deadline(ctx context.Context, start time.Time, ttl time.Duration) time.Time {
	d := start.Add(m.timeout(ttl))
	if m.k.ignoreTimeout {
		d = start.Add(time.Hour)
	}
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	return d
}

func (m *mutantLocker) quorumError(op string, t *tally, kind error) error {
	qe := &redlock.QuorumError{Op: op, Quorum: m.quorum, Nodes: t.nodes}
	if kind == nil {
		return qe
	}
	if m.k.bareErr {
		return fmt.Errorf("%w (%d of %d agreed)", kind, t.ok, len(m.ms))
	}
	return fmt.Errorf("%w: %w", kind, qe)
}

func (m *mutantLocker) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...Opt) (Held, error) {
	h, err := m.obtain(ctx, key, ttl, Collect(opts), false)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (m *mutantLocker) obtain(ctx context.Context, key string, ttl time.Duration, o Opts, inDo bool) (*mutantHeld, error) {
	return m.obtainAs(ctx, key, "", ttl, o, inDo)
}

// longestPTTL is how long the key lives on the master where it lives
// longest (gateWait's sleep).
func (m *mutantLocker) longestPTTL(ctx context.Context, full string) time.Duration {
	var d time.Duration
	for _, rdb := range m.ms {
		c, cancel := context.WithTimeout(ctx, m.timeout(time.Second))
		if p, err := rdb.PTTL(c, full).Result(); err == nil {
			d = max(d, p)
		}
		cancel()
	}
	return d
}

// obtainAs is obtain with the token of the lock (a set's), "" for a new one.
func (m *mutantLocker) obtainAs(ctx context.Context, key, token string, ttl time.Duration, o Opts, inDo bool) (*mutantHeld, error) {
	if m.closed.Load() {
		return nil, redlock.ErrClosed
	}
	if m.k.retryForever {
		o.Retry = 10 * time.Millisecond
	}
	if o.Wait && !m.k.noWake {
		o.Retry = 10 * time.Millisecond // a poller stands for the library's wake-ups
	}
	if o.Wait && m.k.noWake {
		if h, err := m.attempt(ctx, key, token, ttl); err == nil {
			return h, nil
		}
		<-ctx.Done()
		return nil, fmt.Errorf("%w: %w", redlock.ErrNotObtained, ctx.Err())
	}
	var last error
	for {
		if last != nil && ctx.Err() != nil {
			return nil, last
		}
		h, err := m.attempt(ctx, key, token, ttl)
		if err == nil {
			h.holdAtLeast = o.HoldAtLeast
			return h, nil
		}
		if o.Retry == 0 {
			return h, err
		}
		last = err
		wait := o.Retry/2 + mrand.N(o.Retry)
		if o.Wait && m.k.gateWait {
			wait = max(wait, m.longestPTTL(ctx, m.cfg.Prefix+key))
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return nil, err
		}
		closing := m.closing
		if inDo && m.k.closeBlocks {
			closing = nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-closing:
			return nil, fmt.Errorf("%w: %w", err, redlock.ErrClosed)
		case <-time.After(wait):
		}
	}
}

func newMutantToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (m *mutantLocker) attempt(ctx context.Context, key, token string, ttl time.Duration) (*mutantHeld, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", redlock.ErrNotObtained, ctx.Err())
	}
	if token == "" {
		token = newMutantToken()
	}
	start := time.Now()
	h := &mutantHeld{m: m, key: key, full: m.cfg.Prefix + key, token: token, ttl: ttl, obtained: start}
	mode := "nx"
	switch {
	case m.k.noNX:
		mode = "px"
	case m.k.noExpiry:
		mode = "nopx"
	}
	t := m.round(ctx, m.deadline(ctx, start, ttl), func(ctx context.Context, i int) (int64, error) {
		if m.cfg.Fencing {
			v, err := mutantAcquireFenced.Run(ctx, m.ms[i], []string{h.full, "{" + h.full + "}:fence"}, h.token, ttl.Milliseconds(), mode).Int64()
			if err == nil && v == 0 {
				return 0, errRefused
			}
			return v, err
		}
		var err error
		switch mode {
		case "nx":
			err = m.ms[i].SetArgs(ctx, h.full, h.token, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
		case "nopx":
			var set bool
			if set, err = m.ms[i].SetNX(ctx, h.full, h.token, 0).Result(); err == nil && !set {
				err = errRefused
			}
		default:
			err = m.ms[i].Set(ctx, h.full, h.token, ttl).Err()
		}
		if err == redis.Nil {
			err = errRefused
		}
		return 0, err
	}, true)
	if t.ok >= m.quorum {
		if m.cfg.Fencing {
			h.fence = slices.Max(t.vals)
			if m.k.constFence {
				h.fence = 1
			}
			m.round(ctx, m.deadline(ctx, start, ttl), func(ctx context.Context, i int) (int64, error) {
				if t.nodes[i].Err != nil {
					return 0, errRefused
				}
				return 0, mutantRaise.Run(ctx, m.ms[i], []string{h.full, "{" + h.full + "}:fence"}, h.token, h.fence).Err()
			}, false)
		}
		valid := ttl - m.drift(ttl)
		switch {
		case m.k.fullValidity:
			h.until.Store(m.now() + int64(ttl))
			return h, nil
		case time.Since(start) < valid:
			h.until.Store(int64(start.Add(valid).Sub(m.epoch)))
			return h, nil
		}
	}
	// Undo: release wherever it may have landed; wait for the masters
	// that answered.
	undoCtx, deadline := ctx, time.Now().Add(m.timeout(ttl))
	if m.k.slowUndo {
		undoCtx, deadline = context.WithoutCancel(ctx), time.Now().Add(10*m.timeout(ttl))
	}
	m.round(undoCtx, deadline, func(ctx context.Context, i int) (int64, error) {
		if errors.Is(t.nodes[i].Err, errRefused) {
			return 0, nil
		}
		return 0, mutantRelease.Run(ctx, m.ms[i], h.releaseKeys(), h.token).Err()
	}, m.k.slowUndo)
	return nil, m.quorumError("obtain", t, redlock.ErrNotObtained)
}

// ObtainMulti takes the keys one by one with the mutant's lock on one key
// (see knobs.multiWait), and retries the whole set per opts.
func (m *mutantLocker) ObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...Opt) (Held, error) {
	o := Collect(opts)
	take, each := keys, Opts{}
	switch {
	case m.k.multiFirst:
		take = keys[:1]
	case m.k.multiWait:
		each, o.Retry = o, 0 // each key waits; the set is not tried again
	}
	for {
		h, err := m.takeSet(ctx, keys, take, ttl, each)
		if err == nil {
			return h, nil
		}
		if o.Retry == 0 {
			return nil, err
		}
		wait := o.Retry/2 + mrand.N(o.Retry)
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

// takeSet takes the keys of take in order, each with o; when one fails it
// releases those it took.
func (m *mutantLocker) takeSet(ctx context.Context, keys, take []string, ttl time.Duration, o Opts) (*mutantSet, error) {
	set := &mutantSet{keys: keys}
	token := newMutantToken()
	for _, k := range take {
		h, err := m.obtainAs(ctx, k, token, ttl, o, false)
		if err != nil {
			set.Release(context.WithoutCancel(ctx))
			return nil, err
		}
		set.parts = append(set.parts, h)
	}
	return set, nil
}

// A mutantSet is the mutant's lock on several keys: one lock per key.
type mutantSet struct {
	keys  []string
	parts []*mutantHeld
}

func (s *mutantSet) Key() string            { return s.keys[0] }
func (s *mutantSet) Keys() []string         { return slices.Clone(s.keys) }
func (s *mutantSet) Token() string          { return s.parts[0].token }
func (s *mutantSet) Fence() int64           { return 0 }
func (s *mutantSet) lockTTL() time.Duration { return s.parts[0].lockTTL() }

func (s *mutantSet) KeptUntil() time.Time {
	var t time.Time
	for _, h := range s.parts {
		if k := h.KeptUntil(); t.IsZero() || k.Before(t) {
			t = k
		}
	}
	return t
}

func (s *mutantSet) Validity() time.Duration {
	v := s.parts[0].Validity()
	for _, h := range s.parts[1:] {
		v = min(v, h.Validity())
	}
	return v
}

func (s *mutantSet) Extend(ctx context.Context, ttl time.Duration) error {
	var errs []error
	for _, h := range s.parts {
		errs = append(errs, h.Extend(ctx, ttl))
	}
	return errors.Join(errs...)
}

func (s *mutantSet) Release(ctx context.Context) error {
	var errs []error
	for _, h := range s.parts {
		errs = append(errs, h.Release(ctx))
	}
	return errors.Join(errs...)
}

func (s *mutantSet) KeepAlive(ctx context.Context, opts ...Opt) (context.Context, func(), error) {
	return s.parts[0].m.keepAliveOf(s, ctx, opts)
}

func (s *mutantSet) Do(ctx context.Context, fn func(context.Context) error, opts ...Opt) error {
	return s.parts[0].m.doOn(ctx, s, fn, Collect(opts))
}

// A renewable is what the mutant's watchdog renews: a lock on a key or a set.
type renewable interface {
	Validity() time.Duration
	Extend(ctx context.Context, ttl time.Duration) error
	Release(ctx context.Context) error
	lockTTL() time.Duration
}

func (m *mutantLocker) DoMulti(ctx context.Context, keys []string, ttl time.Duration, fn func(context.Context) error, opts ...Opt) error {
	m.mu.Lock()
	if m.closed.Load() {
		m.mu.Unlock()
		return redlock.ErrClosed
	}
	if !m.k.closeNoWait {
		m.dos.Add(1)
		defer m.dos.Done()
	}
	m.mu.Unlock()
	set, err := m.ObtainMulti(ctx, keys, ttl, opts...)
	if err != nil {
		return err
	}
	return m.doOn(ctx, set.(*mutantSet), fn, Collect(opts))
}

// WaitReleased polls every 10ms until the key is absent on a quorum (with
// noWake: looks once, then sleeps until ctx ends).
func (m *mutantLocker) WaitReleased(ctx context.Context, key string) error {
	for {
		if m.closed.Load() {
			return redlock.ErrClosed
		}
		absent := 0
		for _, rdb := range m.ms {
			c, cancel := context.WithTimeout(ctx, m.timeout(time.Second))
			if n, err := rdb.Exists(c, m.cfg.Prefix+key).Result(); err == nil && n == 0 {
				absent++
			}
			cancel()
		}
		if absent >= m.quorum {
			return nil
		}
		wait := 10 * time.Millisecond
		if m.k.noWake {
			wait = time.Hour
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %q: %w", key, ctx.Err())
		case <-m.closing:
			return redlock.ErrClosed
		case <-time.After(wait):
		}
	}
}

// Attach confirms the lock of token on the masters (its TTL reset where
// it holds token, nothing re-taken) and returns a handle on it.
func (m *mutantLocker) Attach(ctx context.Context, key, token string, ttl time.Duration, fence int64) (Held, error) {
	h, err := m.attach(ctx, key, token, ttl, fence)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (m *mutantLocker) attach(ctx context.Context, key, token string, ttl time.Duration, fence int64) (*mutantHeld, error) {
	if m.closed.Load() {
		return nil, redlock.ErrClosed
	}
	start := time.Now()
	h := &mutantHeld{m: m, key: key, full: m.cfg.Prefix + key, token: token, fence: fence, ttl: ttl, obtained: start, attached: true}
	deadline := m.deadline(ctx, start, ttl)
	guard := strconv.FormatInt(deadline.UnixMilli(), 10)
	if m.k.noGuard {
		guard = "0"
	}
	t := m.round(ctx, deadline, func(ctx context.Context, i int) (int64, error) {
		v, err := mutantExtend.Run(ctx, m.ms[i], h.releaseKeys(), token, ttl.Milliseconds(), "0", "1", guard).Int64()
		if err == nil && v <= 0 {
			return 0, errRefused
		}
		return 0, err
	}, true)
	valid := ttl - m.drift(ttl)
	switch {
	case t.ok >= m.quorum && time.Since(start) < valid:
		h.until.Store(int64(start.Add(valid).Sub(m.epoch)))
		return h, nil
	case t.refused > len(m.ms)-m.quorum:
		return nil, m.quorumError("attach", t, redlock.ErrLockLost)
	}
	return nil, m.quorumError("attach", t, redlock.ErrUnavailable)
}

// AttachMulti attaches every key of the set (the mutant's sets hold one
// token on each key).
func (m *mutantLocker) AttachMulti(ctx context.Context, keys []string, token string, ttl time.Duration, fence int64) (Held, error) {
	set := &mutantSet{keys: keys}
	for _, k := range keys {
		h, err := m.attach(ctx, k, token, ttl, fence)
		if err != nil {
			return nil, err
		}
		set.parts = append(set.parts, h)
	}
	return set, nil
}

func (m *mutantLocker) Do(ctx context.Context, key string, ttl time.Duration, fn func(context.Context) error, opts ...Opt) (err error) {
	m.mu.Lock()
	if m.closed.Load() {
		m.mu.Unlock()
		return redlock.ErrClosed
	}
	if !m.k.closeNoWait {
		m.dos.Add(1)
		defer m.dos.Done()
	}
	m.mu.Unlock()
	o := Collect(opts)
	h, err := m.obtain(ctx, key, ttl, o, true)
	if err != nil {
		return err
	}
	return m.doOn(ctx, h, fn, o)
}

// doOn runs fn under a watchdog renewing h, then releases h.
func (m *mutantLocker) doOn(ctx context.Context, h renewable, fn func(context.Context) error, o Opts) (err error) {
	wctx, stop := m.keepAlive(h, ctx, o)
	defer func() {
		stop()
		rerr := h.Release(context.WithoutCancel(ctx))
		if cause := context.Cause(wctx); errors.Is(cause, redlock.ErrLockLost) || errors.Is(cause, redlock.ErrClosed) {
			err = errors.Join(err, cause)
		} else if errors.Is(rerr, redlock.ErrLockLost) {
			err = errors.Join(err, rerr)
		}
	}()
	return fn(wctx)
}

// Do is Lock.Do: fn under a watchdog, then Release.
func (h *mutantHeld) Do(ctx context.Context, fn func(context.Context) error, opts ...Opt) error {
	m := h.m
	m.mu.Lock()
	if m.closed.Load() {
		m.mu.Unlock()
		return redlock.ErrClosed
	}
	if !m.k.closeNoWait {
		m.dos.Add(1)
		defer m.dos.Done()
	}
	m.mu.Unlock()
	if h.Validity() == 0 {
		return fmt.Errorf("%w: validity ran out before Do", redlock.ErrLockLost)
	}
	return m.doOn(ctx, h, fn, Collect(opts))
}

func (m *mutantLocker) Close() error {
	m.mu.Lock()
	if m.closed.Swap(true) {
		m.mu.Unlock()
		return nil
	}
	if !m.k.closeNoWait {
		close(m.closing)
	}
	m.mu.Unlock()
	m.dos.Wait()
	m.bg.Wait()
	if m.k.leak {
		go m.leaked()
	}
	return nil
}

// leaked is the goroutine the leak knob leaves behind (it ends on its own,
// so later tests do not see it).
func (m *mutantLocker) leaked() { time.Sleep(3 * time.Second) }

type mutantHeld struct {
	m     *mutantLocker
	key   string
	full  string
	token string
	fence int64
	mu    sync.Mutex
	ttl   time.Duration
	until atomic.Int64 // ns since m.epoch; 0: released or lost

	obtained    time.Time     // the grant's attempt began
	holdAtLeast time.Duration // HoldAtLeast
	kept        time.Time     // KeptUntil
	attached    bool          // a handle from Attach
}

// releaseKeys are the lock key and its token's tombstone, in the lock
// key's hash slot.
func (h *mutantHeld) releaseKeys() []string {
	return []string{h.full, "{" + h.full + "}:released:" + h.token}
}

func (h *mutantHeld) Key() string    { return h.key }
func (h *mutantHeld) Keys() []string { return []string{h.key} }
func (h *mutantHeld) Token() string  { return h.token }
func (h *mutantHeld) Fence() int64   { return h.fence }

func (h *mutantHeld) lockTTL() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ttl
}

func (h *mutantHeld) KeptUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.kept
}

func (h *mutantHeld) Validity() time.Duration {
	u := h.until.Load()
	if u == 0 {
		return 0
	}
	return max(0, time.Duration(u-h.m.now()))
}

func (h *mutantHeld) Extend(ctx context.Context, ttl time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.m
	if m.closed.Load() {
		return redlock.ErrClosed
	}
	v := h.Validity()
	if v == 0 && !m.k.revive {
		return fmt.Errorf("%w: validity ran out before Extend", redlock.ErrLockLost)
	}
	start := time.Now()
	deadline := m.deadline(ctx, start, ttl)
	if end := start.Add(v); !m.k.revive && !m.k.noCap && end.Before(deadline) {
		deadline = end // an Extend may not take effect after the validity ended
	}
	if m.cfg.OnExtend != nil {
		defer m.cfg.OnExtend(ctx, start, start.Add(v))
	}
	retake, tombstone := "1", "1"
	if m.k.noRetake {
		retake = "0"
	}
	if m.k.straggle {
		tombstone = "0"
	}
	guard := strconv.FormatInt(deadline.UnixMilli(), 10)
	if m.k.noGuard || m.k.revive || m.k.straggle {
		guard = "0"
	}
	last := len(m.ms) - 1
	t := m.round(ctx, deadline, func(ctx context.Context, i int) (int64, error) {
		if m.k.straggle && i == last {
			m.bg.Go(func() {
				time.Sleep(3 * m.timeout(ttl))
				ctx, cancel := context.WithTimeout(context.Background(), m.timeout(ttl))
				defer cancel()
				mutantExtend.Run(ctx, m.ms[i], h.releaseKeys(), h.token, ttl.Milliseconds(), retake, tombstone, guard)
			})
			return 0, errors.New("sent later")
		}
		v, err := mutantExtend.Run(ctx, m.ms[i], h.releaseKeys(), h.token, ttl.Milliseconds(), retake, tombstone, guard).Int64()
		if err == nil && v <= 0 {
			return 0, errRefused
		}
		return 0, err
	}, true)
	valid := ttl - m.drift(ttl)
	switch {
	case t.ok >= m.quorum && time.Since(start) < valid:
		h.until.Store(int64(start.Add(valid).Sub(m.epoch)))
		h.ttl = ttl
		return nil
	case t.refused > len(m.ms)-m.quorum:
		h.until.Store(0)
		return m.quorumError("extend", t, redlock.ErrLockLost)
	}
	if !m.k.keepValidity {
		// The masters it reached now hold the new TTL.
		if u := int64(start.Add(valid).Sub(m.epoch)); u < h.until.Load() {
			h.until.Store(max(u, 1))
		}
	}
	return m.quorumError("extend", t, nil)
}

func (h *mutantHeld) Release(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.m
	h.until.Store(0)
	if m.k.neverRelease || h.attached && m.k.handoverStray {
		return nil
	}
	keep := time.Duration(0)
	if h.holdAtLeast > 0 {
		if until := h.obtained.Add(h.holdAtLeast); time.Until(until) > time.Millisecond {
			h.kept = until
			if !m.k.noKeep {
				keep = time.Until(until)
			}
		}
	}
	t := m.round(ctx, m.deadline(ctx, time.Now(), h.ttl), func(ctx context.Context, i int) (int64, error) {
		run := mutantRelease.Run(ctx, m.ms[i], h.releaseKeys(), h.token)
		if keep > 0 {
			run = mutantKeep.Run(ctx, m.ms[i], []string{h.full}, h.token, max(keep.Milliseconds(), 1))
		}
		v, err := run.Int64()
		if err == nil && v <= 0 {
			return 0, errRefused
		}
		return 0, err
	}, true)
	switch {
	case t.ok >= m.quorum:
		return nil
	case t.refused > len(m.ms)-m.quorum:
		return m.quorumError("release", t, redlock.ErrLockLost)
	}
	return m.quorumError("release", t, nil)
}

func (h *mutantHeld) KeepAlive(ctx context.Context, opts ...Opt) (context.Context, func(), error) {
	return h.m.keepAliveOf(h, ctx, opts)
}

// keepAliveOf is KeepAlive for a lock on a key or a set.
func (m *mutantLocker) keepAliveOf(h renewable, ctx context.Context, opts []Opt) (context.Context, func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return nil, nil, redlock.ErrClosed
	}
	m.dos.Add(1)
	wctx, stop := m.keepAlive(h, ctx, Collect(opts))
	var once sync.Once
	return wctx, func() { once.Do(func() { stop(); m.dos.Done() }) }, nil
}

// keepAlive renews h every ttl/3 (and, without noProbe, at least every
// probeEvery) until stop, and cancels the returned context when the lock
// can no longer be trusted. Renewals carry ctx's values.
func (m *mutantLocker) keepAlive(h renewable, ctx context.Context, o Opts) (context.Context, func()) {
	wctx, lost := context.WithCancelCause(ctx)
	ttl := h.lockTTL()
	every := o.RenewEvery
	if every == 0 {
		every = ttl / 3
	}
	if !m.k.noProbe {
		every = min(every, probeEvery)
	}
	base, abort := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	closing := m.closing
	if m.k.closeNoWait {
		closing = nil
	}
	go func() {
		defer close(done)
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-base.Done():
				return
			case <-wctx.Done():
				return
			case <-closing:
				lost(fmt.Errorf("%w: Close called while the lock was held", redlock.ErrClosed))
				return
			case <-t.C:
			}
			v := h.Validity()
			if v == 0 && !m.k.lateCancel {
				lost(fmt.Errorf("%w: renewals failed until the validity ran out", redlock.ErrLockLost))
				return
			}
			if m.k.noRenew {
				t.Reset(v)
				continue
			}
			rctx, cancel := base, context.CancelFunc(func() {})
			if !m.k.lateCancel {
				rctx, cancel = context.WithTimeout(base, v)
			}
			err := h.Extend(rctx, ttl)
			cancel()
			switch {
			case err == nil:
				t.Reset(every)
			case errors.Is(err, redlock.ErrLockLost) && !(m.k.lateCancel && h.Validity() == 0 && strings.Contains(err.Error(), "validity ran out")):
				lost(err)
				return
			case h.Validity() == 0 && !m.k.lateCancel:
				lost(fmt.Errorf("%w: renewals failed until the validity ran out: %w", redlock.ErrLockLost, err))
				return
			case m.k.lateCancel:
				t.Reset(every / 4)
			default:
				t.Reset(min(every/4+time.Millisecond, h.Validity()))
			}
		}
	}()
	return wctx, func() {
		abort()
		<-done
		lost(context.Canceled)
	}
}
