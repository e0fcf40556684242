package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// These tests hold requests of a lock up past its validity on real
// redis-servers (a master frozen with a request in its socket), and check
// that nothing of a finished lock comes back, and that a Release of a
// lapsed lock says it was lost.

// boundedClients returns a go-redis client per server whose reads end at
// the request's deadline (ContextTimeoutEnabled, as the README advises),
// closed when the test ends.
func boundedClients(t *testing.T, servers []*redistest.Server) []redis.UniversalClient {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		c := s.Client(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
		t.Cleanup(func() { c.Close() })
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		clients[i] = c
	}
	return clients
}

// TestExtendHeldUpByAFrozenMasterDoesNotReviveALapsedLock: masters 1 and 2
// freeze, so an Extend reaches master 0 alone and fails; master 0 ran it,
// so its key outlives the validity the holder counts on (the one of the
// Obtain). Master 0 freezes too, with the next Extend in its socket, and
// stays frozen until that validity has ended. When it resumes it runs the
// held-up Extend on a key still ours: a PEXPIRE then would revive the
// lapsed lock there for a whole TTL. The key must expire when the renewal
// master 0 ran before it froze says, and a Release of the lock reports it
// lost. For a key, and for a fenced set (its own scripts).
func TestExtendHeldUpByAFrozenMasterDoesNotReviveALapsedLock(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  bool
	}{{"key", false}, {"fenced set", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			servers := redistest.Start(t, 3)
			direct := redistest.Clients(t, servers)
			var opts []redlock.Option
			if tc.set {
				opts = append(opts, redlock.WithFencing())
			}
			c := newClient(t, boundedClients(t, servers), append(opts, redlock.WithNodeTimeout(200*time.Millisecond))...)
			const ttl = 1500 * time.Millisecond
			keys := []string{"k"}
			var lock *redlock.Lock
			var err error
			if tc.set {
				keys = []string{"{k}:a", "{k}:b"}
				lock, err = c.ObtainMulti(ctx, keys, ttl)
			} else {
				lock, err = c.Obtain(ctx, "k", ttl)
			}
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			for _, s := range servers[1:] {
				if err := s.Stop(); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() {
				for _, s := range servers {
					s.Cont()
				}
			})
			if err := lock.Extend(ctx, ttl); err == nil || errors.Is(err, redlock.ErrLockLost) {
				t.Fatalf("Extend with masters 1 and 2 frozen: %v, want a failure that is not ErrLockLost", err)
			}
			ran := time.Now() // master 0 ran that Extend before now
			if pttl := direct[0].PTTL(ctx, keys[0]).Val(); pttl < ttl-250*time.Millisecond {
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
			// Master 0 reads the held-up Extend first, from the socket it
			// was already watching.
			time.Sleep(100 * time.Millisecond)
			if v := get(t, direct[0], keys[0]); v != lock.Token() {
				t.Fatalf("setup: master 0 holds %q after it resumed, want the lock's key (the failed Extend's renewal)", v)
			}
			after := direct[0].PTTL(ctx, keys[0]).Val()
			if err := lock.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
				t.Fatalf("Release of the lapsed lock: %v, want ErrLockLost", err)
			}
			// Release deleted master 0's key; a revival is seen in the TTL
			// it had (and, without the Release, it would have outlived
			// the renewal master 0 ran before it froze).
			left := time.Until(ran.Add(ttl))
			t.Logf("master 0's key after it resumed: %v left; its last renewal before the freeze left %v", after.Round(time.Millisecond), left.Round(time.Millisecond))
			if after > left+100*time.Millisecond {
				t.Fatalf("master 0's key had %v left after it resumed, past the %v its last renewal before the freeze left: a held-up Extend revived the lapsed lock", after.Round(time.Millisecond), left.Round(time.Millisecond))
			}
		})
	}
}

// TestHeldUpExtendLeavesNoKeyPastItsRenewal is the revival seen from the
// masters alone, with no Release to clean up: once the renewal that master
// 0 ran before it froze has expired, no master holds the lapsed lock's key.
func TestHeldUpExtendLeavesNoKeyPastItsRenewal(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
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
	_ = lock.Extend(ctx, ttl) // master 0 alone runs it
	ran := time.Now()
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	_ = lock.Extend(ctx, ttl) // held up in master 0's socket
	for lock.Validity() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	for _, s := range servers {
		if err := s.Cont(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Until(ran.Add(ttl + 200*time.Millisecond)))
	if vs := holdersOf(t, direct, "k"); count(vs, lock.Token()) > 0 {
		t.Fatalf("masters hold %q (master 0's key has %v left) after the lock lapsed and its last renewal expired: a held-up Extend revived it",
			vs, direct[0].PTTL(ctx, "k").Val().Round(time.Millisecond))
	}
}

// TestReleaseAfterTheValidityEndedSaysLost: a lock whose validity ended
// while its keys stayed (an Extend to a shorter TTL shrinks the validity,
// never a key) is released on every master, and Release reports the lock
// lost, saying why: the work may have overlapped with another holder's. A
// Release after it returns nil.
func TestReleaseAfterTheValidityEndedSaysLost(t *testing.T) {
	ctx := context.Background()
	_, clients, c := cluster(t, 3)
	lock, err := c.Obtain(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_ = lock.Extend(ctx, 100*time.Millisecond) // its outcome does not matter: the validity ends soon
	for lock.Validity() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if n := count(holdersOf(t, clients, "k"), lock.Token()); n != 3 {
		t.Fatalf("setup: %d masters hold the key, want 3", n)
	}
	err = lock.Release(ctx)
	if !errors.Is(err, redlock.ErrLockLost) || !strings.Contains(err.Error(), "validity had ended") {
		t.Fatalf("Release after the validity ended: %v, want ErrLockLost saying the validity had ended", err)
	}
	redistest.Eventually(t, func() error { // Release returns at a quorum
		if n := count(holdersOf(t, clients, "k"), lock.Token()); n != 0 {
			return fmt.Errorf("%d masters still hold the key after the Release", n)
		}
		return nil
	})
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("a second Release: %v, want nil", err)
	}
}

// TestReleaseAfterTheWatchdogLostTheLockSaysLost: renewals on masters 0
// and 1 ran whose replies the holder never counted (here: their keys made
// to last a minute by hand), then those two froze; the watchdog counted
// the lock lost when its validity ran out. Once they answer again, every
// master still holds our key, and a Release deletes them all: it must
// still report the lock lost (the work may have overlapped with another
// holder's), not released.
func TestReleaseAfterTheWatchdogLostTheLockSaysLost(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	direct := redistest.Clients(t, servers)
	c := newClient(t, boundedClients(t, servers), redlock.WithNodeTimeout(100*time.Millisecond))
	lock, err := c.Obtain(ctx, "k", 600*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	work, stop, err := lock.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	t.Cleanup(func() {
		for _, s := range servers {
			s.Cont()
		}
	})
	for i, s := range servers[:2] {
		if err := direct[i].PExpire(ctx, "k", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-work.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the watchdog never counted the lock lost")
	}
	if cause := context.Cause(work); !errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("watchdog's cause %v, want ErrLockLost", cause)
	}
	stop()
	for _, s := range servers[:2] {
		if err := s.Cont(); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(holdersOf(t, direct, "k"), lock.Token()); n < 2 {
		t.Fatalf("setup: %d masters hold the key, want at least 2", n)
	}
	if err := lock.Release(ctx); !errors.Is(err, redlock.ErrLockLost) || !strings.Contains(err.Error(), "validity had ended") {
		t.Fatalf("Release after the watchdog lost the lock: %v, want ErrLockLost saying the validity had ended", err)
	}
	redistest.Eventually(t, func() error { // Release returns at a quorum
		if n := count(holdersOf(t, direct, "k"), lock.Token()); n != 0 {
			return fmt.Errorf("%d masters still hold the key after the Release", n)
		}
		return nil
	})
}
