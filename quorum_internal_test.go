package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// The quorum over N masters, on in-process masters.

func TestObtainReleaseMini(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5} {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			ctx := context.Background()
			ms, cs := minis(t, n)
			c := newClient(t, cs, WithKeyPrefix("lock:"))
			l, err := c.Obtain(ctx, "k", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if l.Key() != "k" || len(l.Token()) != 22 {
				t.Fatalf("key %q token %q", l.Key(), l.Token())
			}
			// Obtain returns at quorum; the other masters follow.
			redistest.Eventually(t, func() error {
				for i, m := range ms {
					if got, _ := m.Get("lock:k"); got != l.Token() {
						return fmt.Errorf("master %d holds %q, want our token", i, got)
					}
				}
				return nil
			})
			if v := l.Validity(); v <= 0 || v > time.Second-12*time.Millisecond {
				t.Fatalf("validity %v, want in (0, ttl-drift]", v)
			}
			_, err = c.Obtain(ctx, "k", time.Second)
			if !errors.Is(err, ErrNotObtained) {
				t.Fatalf("second Obtain: %v, want ErrNotObtained", err)
			}
			var qe *QuorumError
			if !errors.As(err, &qe) || len(qe.Nodes) != n || !errors.Is(err, ErrTaken) {
				t.Fatalf("second Obtain error %v lacks node detail", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if l.Validity() != 0 {
				t.Fatal("validity after release")
			}
			redistest.Eventually(t, func() error {
				for i, m := range ms {
					if m.Exists("lock:k") {
						return fmt.Errorf("master %d still holds the key", i)
					}
				}
				return nil
			})
			// A second Release of the same handle (a deferred one after an
			// explicit one) is no alarm.
			if err := l.Release(ctx); err != nil {
				t.Fatalf("second Release: %v, want nil", err)
			}
			// A stranger's key under the same name is not touched by it.
			for _, m := range ms {
				m.Set("lock:k", "stranger")
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("third Release: %v, want nil", err)
			}
			for i, m := range ms {
				if got, _ := m.Get("lock:k"); got != "stranger" {
					t.Fatalf("master %d: a released handle's Release touched a stranger's key (%q)", i, got)
				}
			}
			if err := l.Extend(ctx, time.Second); !errors.Is(err, ErrLockLost) {
				t.Fatalf("Extend after Release: %v, want ErrLockLost", err)
			}
		})
	}
}

// TestQuorumEveryState runs Obtain, Extend and Release over every
// assignment of {free, taken by a stranger, down} to N masters, N up to 5.
func TestQuorumEveryState(t *testing.T) {
	const (
		free = iota
		taken
		down
	)
	ctx := context.Background()
	for n := 1; n <= 5; n++ {
		ms, cs := minis(t, n)
		c := newClient(t, cs, WithNodeTimeout(time.Second))
		q := n/2 + 1
		combos := 1
		for range n {
			combos *= 3
		}
		for combo := range combos {
			state := make([]int, n)
			nfree, ntaken := 0, 0
			for i, x := 0, combo; i < n; i, x = i+1, x/3 {
				state[i] = x % 3
				switch state[i] {
				case free:
					nfree++
				case taken:
					ntaken++
				}
			}
			key := fmt.Sprintf("q%d-%d", n, combo)
			for i, m := range ms {
				m.SetError("")
				switch state[i] {
				case taken:
					m.Set(key, "stranger")
				case down:
					m.SetError("LOADING pretend down")
				}
			}
			l, err := c.Obtain(ctx, key, time.Minute)
			if (err == nil) != (nfree >= q) {
				t.Fatalf("N=%d state %v: Obtain err %v, want success %v", n, state, err, nfree >= q)
			}
			for _, m := range ms {
				m.SetError("")
			}
			redistest.Eventually(t, func() error {
				for i, m := range ms {
					v, _ := m.Get(key)
					switch {
					case state[i] == taken && v != "stranger":
						return fmt.Errorf("N=%d state %v: stranger's key on master %d became %q", n, state, i, v)
					case state[i] == free && err != nil && v != "":
						return fmt.Errorf("N=%d state %v: failed Obtain left %q on master %d", n, state, v, i)
					}
				}
				return nil
			})
			if err != nil {
				var qe *QuorumError
				if !errors.As(err, &qe) || !errors.Is(err, ErrNotObtained) || qe.Quorum != q {
					t.Fatalf("N=%d state %v: error %v", n, state, err)
				}
				// Exactly one outcome: taken when the stranger's refusals
				// alone rule out a quorum, else unavailable.
				isTaken, isUnavailable := errors.Is(err, ErrTaken), errors.Is(err, ErrUnavailable)
				if isTaken == isUnavailable || isTaken != (ntaken > n-q) {
					t.Fatalf("N=%d state %v: taken %v unavailable %v (error %v)", n, state, isTaken, isUnavailable, err)
				}
				continue
			}
			// Extend and release with the same masters down: they succeed
			// on the free ones.
			for i, m := range ms {
				if state[i] == down {
					m.SetError("LOADING pretend down")
				}
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatalf("N=%d state %v: Extend: %v", n, state, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("N=%d state %v: Release: %v", n, state, err)
			}
		}
		for _, m := range ms {
			m.SetError("")
		}
	}
}

// TestNewRefusesTooManyMasters: a Client keeps each master's answer in a bit
// of a uint64 (internal/wire bit), so New refuses a 65th master.
func TestNewRefusesTooManyMasters(t *testing.T) {
	var masters []redis.UniversalClient
	for i := range maxMasters + 1 {
		rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)})
		t.Cleanup(func() { rdb.Close() })
		masters = append(masters, rdb)
	}
	if _, err := New(masters); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("New with %d masters: %v, want ErrInvalidArgument", len(masters), err)
	}
}
