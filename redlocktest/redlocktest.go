// Package redlocktest is a test kit for code that takes redlock locks: a
// real [redlock.Client] over in-process Redis masters (miniredis), and the
// controls a test needs to reach every branch of that code without a Redis
// server: another owner holds the key, a held lock is lost, masters become
// unavailable and come back, time passes.
//
//	func TestRebuildSkipsWhenAnotherReplicaHasIt(t *testing.T) {
//		m := redlocktest.New(t, 3)
//		m.Take("rebuild:home", time.Minute) // another replica holds it
//		if err := rebuild(ctx, m.Client(), "home"); err != nil {
//			t.Fatal(err) // rebuild should skip quietly on redlock.ErrTaken
//		}
//	}
//
// The masters expire keys as real time passes, like Redis, and run the
// library's own scripts; each Client is what another process would be. The
// lock's guarantees under real faults are tested against real servers in
// the redlock repository, not here.
package redlocktest

import (
	"crypto/rand"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

// Masters are in-process Redis masters for one test. Create them with
// [New]; the zero value is not usable. Its methods may be called from any
// goroutine of the test.
type Masters struct {
	// Prefix is the key prefix the code under test gives its Clients
	// ([redlock.WithKeyPrefix]); the methods that take a key add it. Set it
	// before using them; [Masters.Client] does not add it for you.
	Prefix string

	tb    testing.TB
	minis []*miniredis.Miniredis
	rdbs  []redis.UniversalClient
}

// New starts n in-process masters (n >= 1), stopped when the test ends. One
// master makes a single-instance lock (the Client is [redlock.NewSingle]'s);
// several make the Redlock quorum.
func New(tb testing.TB, n int) *Masters {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("redlocktest.New: %d masters, want at least 1", n)
	}
	m := &Masters{tb: tb}
	for range n {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			tb.Fatalf("redlocktest: start an in-process master: %v", err)
		}
		mr.ClockTTL(true) // expire keys as real time passes, as Redis does
		// RESP2: with RESP3, go-redis v9.23 tries a maintenance-notifications
		// handshake that miniredis refuses, and its fallback rewrites the
		// client's options while other connections of it dial (a data race
		// inside go-redis, seen by -race when masters come back up).
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, Protocol: 2})
		tb.Cleanup(func() {
			rdb.Close()
			mr.Close()
		})
		m.minis = append(m.minis, mr)
		m.rdbs = append(m.rdbs, rdb)
	}
	return m
}

// Redis returns the masters' go-redis clients, for code under test that
// builds its own [redlock.Client] ([redlock.New] or [redlock.NewSingle] with
// these), or for checking what the code stored.
func (m *Masters) Redis() []redis.UniversalClient { return slices.Clone(m.rdbs) }

// Client returns a new [redlock.Client] over the masters with opts, closed
// when the test ends. Several Clients are several processes.
func (m *Masters) Client(opts ...redlock.Option) *redlock.Client {
	m.tb.Helper()
	var c *redlock.Client
	var err error
	if len(m.rdbs) == 1 {
		c, err = redlock.NewSingle(m.rdbs[0], opts...)
	} else {
		c, err = redlock.New(m.rdbs, opts...)
	}
	if err != nil {
		m.tb.Fatalf("redlocktest: %v", err)
	}
	m.tb.Cleanup(func() { c.Close() })
	return c
}

// Take makes another owner hold key on every master for ttl, as another
// process holding the lock would, and returns that owner's token. The code
// under test then gets [redlock.ErrTaken] from Obtain. It fails the test
// when the key is held already.
func (m *Masters) Take(key string, ttl time.Duration) string {
	m.tb.Helper()
	token := newToken()
	for i, mr := range m.minis {
		if mr.Exists(m.Prefix + key) {
			m.tb.Fatalf("redlocktest.Take(%q): master %d holds it already", key, i)
		}
		m.set(mr, key, token, ttl)
	}
	return token
}

// Steal gives key to another owner on every master now, whoever holds it,
// and returns that owner's token: a lock held by the code under test is
// lost. Its watchdog ([redlock.Client.Do], [redlock.Lock.Do],
// [redlock.Lock.KeepAlive]) cancels the work at its next renewal, and its
// Extend and Release return [redlock.ErrLockLost].
func (m *Masters) Steal(key string, ttl time.Duration) string {
	m.tb.Helper()
	token := newToken()
	for _, mr := range m.minis {
		m.set(mr, key, token, ttl)
	}
	return token
}

func (m *Masters) set(mr *miniredis.Miniredis, key, token string, ttl time.Duration) {
	m.tb.Helper()
	if err := mr.Set(m.Prefix+key, token); err != nil {
		m.tb.Fatalf("redlocktest: %v", err)
	}
	mr.SetTTL(m.Prefix+key, ttl)
}

// Free deletes key on every master, as if its holder released it or its
// TTL ran out there. A holder still within its validity re-takes a key that
// vanished at its next renewal, as it would after a master restarted.
func (m *Masters) Free(key string) {
	for _, mr := range m.minis {
		mr.Del(m.Prefix + key)
	}
}

// Holder returns the token that holds key on a quorum of masters, or "".
func (m *Masters) Holder(key string) string {
	counts := map[string]int{}
	for _, mr := range m.minis {
		if v, err := mr.Get(m.Prefix + key); err == nil {
			token, _, _ := strings.Cut(v, "!") // a waiter's mark, and the turn queue after it
			counts[token]++
		}
	}
	for token, n := range counts {
		if n > len(m.minis)/2 {
			return token
		}
	}
	return ""
}

// Down makes the masters at the given positions (0-based) fail every
// request, as masters that are down would, until [Masters.Up]. With a
// majority down, Obtain returns [redlock.ErrUnavailable].
func (m *Masters) Down(masters ...int) {
	m.tb.Helper()
	for _, i := range masters {
		m.master(i).SetError("LOADING redlocktest: master down")
	}
}

// Up brings the masters at the given positions back.
func (m *Masters) Up(masters ...int) {
	m.tb.Helper()
	for _, i := range masters {
		m.master(i).SetError("")
	}
}

func (m *Masters) master(i int) *miniredis.Miniredis {
	m.tb.Helper()
	if i < 0 || i >= len(m.minis) {
		m.tb.Fatalf("redlocktest: no master %d of %d", i, len(m.minis))
	}
	return m.minis[i]
}

// FastForward moves every master's clock forward by d: keys whose TTL runs
// out within d are gone, without the test sleeping. The Clients' own clocks
// do not move: a lock's validity is counted on the process's monotonic
// clock, so a holder still believes it holds a lock whose keys expired this
// way, and re-takes them at its next renewal, as it would after a clock
// jump on the masters. To make a holder lose its lock, use [Masters.Steal].
func (m *Masters) FastForward(d time.Duration) {
	for _, mr := range m.minis {
		mr.FastForward(d)
	}
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
