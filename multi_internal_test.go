package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/scripts"
)

// TestOverlappingSetsNeitherOverlapNorDeadlock: workers take overlapping
// sets, in different orders, over 1, 3 and 5 masters: no key ever has two
// holders, and every worker gets through every round (no deadlock, no key
// left behind by a failed attempt).
func TestOverlappingSetsNeitherOverlapNorDeadlock(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprint("N=", n), func(t *testing.T) {
			c := setClient(t, n)
			const rounds = 12
			res := contend(t, c, overlappingSets, rounds, 10*time.Second, 5*time.Second)
			for k, o := range res.overlaps {
				t.Errorf("key %s: a holder met another holder %d times", k, o)
			}
			for _, s := range res.stuck {
				t.Errorf("no progress: %s", s)
			}
			if want := rounds * len(overlappingSets); res.holds != want {
				t.Errorf("%d holds, want %d", res.holds, want)
			}
		})
	}
}

// TestOverlappingSetsCatchBrokenSets: the contention test above fails
// against sets taken the wrong way. A script that takes keys one by one
// and stops at the first held leaves the keys before it on the master: an
// attempt refused there is not undone there (the master said "held"), so
// those keys block every other set for a TTL, and the workers make no
// progress. A script that checks only the first key lets two holders into
// the others.
func TestOverlappingSetsCatchBrokenSets(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		overlaps  bool
	}{
		{"one by one", `local n = tonumber(ARGV[2])
for i = 1, n do
	if not redis.call('SET', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[3]) then
		return -i
	end
end
return 1
`, false},
		{"first key only", `local n = tonumber(ARGV[2])
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then
	return -1
end
for i = 1, n do
	redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[3])
end
return 1
`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saved := scripts.AcquireSet
			scripts.AcquireSet = brokenScript(tc.src)
			t.Cleanup(func() { scripts.AcquireSet = saved })
			c := setClient(t, 3)
			res := contend(t, c, overlappingSets, 12, 10*time.Second, time.Second)
			if tc.overlaps && len(res.overlaps) == 0 {
				t.Errorf("%s: no overlap seen in %d holds", tc.name, res.holds)
			}
			if !tc.overlaps && len(res.stuck) == 0 {
				t.Errorf("%s: every worker got through (%d holds)", tc.name, res.holds)
			}
		})
	}
}

// TestSetsOnMiniredis: the set scripts run on miniredis's Lua too, which
// redlocktest's in-process masters use: take, refuse with the key that
// blocked, fence, extend and re-take, release.
func TestSetsOnMiniredis(t *testing.T) {
	ctx := context.Background()
	ms, cs := minis(t, 3)
	c := newClient(t, cs, WithFencing(), WithKeyPrefix("lock:"))
	l, err := c.ObtainMulti(ctx, []string{"a", "b"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() != 1 {
		t.Fatalf("fence %d, want 1", l.Fence())
	}
	// The refused set meets a, not b: a late request of it could take b
	// on a master once b is gone below.
	_, err = c.ObtainMulti(ctx, []string{"c", "a"}, time.Minute)
	var qe *QuorumError
	if !errors.Is(err, ErrTaken) || !errors.As(err, &qe) || qe.Nodes[0].Key != "a" && qe.Nodes[1].Key != "a" {
		t.Fatalf("overlapping set: %v, want ErrTaken naming a", err)
	}
	for _, m := range ms {
		m.Del("lock:b")
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		for i, m := range ms {
			if got, _ := m.Get("lock:b"); got != l.Token() {
				return fmt.Errorf("master %d: b = %q after Extend, want re-taken", i, got)
			}
		}
		return nil
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, func() error {
		for i, m := range ms {
			if m.Exists("lock:a") || m.Exists("lock:b") {
				return fmt.Errorf("master %d keeps the set after Release", i)
			}
		}
		return nil
	})
	next, err := c.ObtainMulti(ctx, []string{"b", "c"}, time.Minute)
	if err != nil || next.Fence() != 2 {
		t.Fatalf("next set: fence %v, %v; want 2", next.Fence(), err)
	}
}
