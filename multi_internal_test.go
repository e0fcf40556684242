package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// overlappingSets are the sets the contention tests take: each key is in
// several, in both orders, beside a set of one key and a set of three.
var overlappingSets = [][]string{
	{"k0", "k1"}, {"k1", "k0"}, {"k1", "k2"}, {"k2", "k3", "k4"},
	{"k4", "k0"}, {"k3", "k1"}, {"k2"}, {"k0", "k2", "k4"},
}

// A contention is what contend saw: per key, how often a holder found
// another holder of that key (a ledger of holders per key: it must stay at
// one); the workers that did not get through all their rounds (no
// progress: a deadlock, or keys left behind); and the holds made.
type contention struct {
	overlaps map[string]int
	stuck    []string
	holds    int
}

// contend runs one worker per set of sets on c, each taking its set rounds
// times (a jittered retry, each Obtain bounded by wait) and holding it a
// moment.
func contend(t *testing.T, c *Client, sets [][]string, rounds int, ttl, wait time.Duration) contention {
	t.Helper()
	var mu sync.Mutex
	res := contention{overlaps: map[string]int{}}
	holders := map[string]*atomic.Int32{}
	for _, set := range sets {
		for _, k := range set {
			holders[k] = new(atomic.Int32)
		}
	}
	var wg sync.WaitGroup
	for w, set := range sets {
		wg.Go(func() {
			for r := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				l, err := c.ObtainMulti(ctx, set, ttl, WithRetry(LinearBackoff(2*time.Millisecond)))
				cancel()
				if err != nil {
					mu.Lock()
					res.stuck = append(res.stuck, fmt.Sprintf("worker %d %q, round %d: %v", w, set, r, err))
					mu.Unlock()
					return
				}
				var seen []string
				for _, k := range set {
					if holders[k].Add(1) > 1 {
						seen = append(seen, k)
					}
				}
				time.Sleep(300 * time.Microsecond)
				for _, k := range set {
					holders[k].Add(-1)
				}
				mu.Lock()
				res.holds++
				for _, k := range seen {
					res.overlaps[k]++
				}
				mu.Unlock()
				l.Release(context.Background())
			}
		})
	}
	wg.Wait()
	return res
}

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
			saved := acquireSetScript
			acquireSetScript = brokenScript(tc.src)
			t.Cleanup(func() { acquireSetScript = saved })
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

// brokenScript is a script of src with its digest.
func brokenScript(src string) script {
	r := redis.NewScript(src)
	return newScript(src, r.Hash())
}

// setClient starts n masters and a Client over them.
func setClient(t *testing.T, n int) *Client {
	t.Helper()
	c, err := New(redistest.Clients(t, redistest.Start(t, n)), WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestHashSlot: the slot of a key is Redis's, hash tags included: the
// CRC16 check value, then CLUSTER KEYSLOT on a real cluster node.
func TestHashSlot(t *testing.T) {
	if got := hashSlot("123456789"); got != 0x31C3 {
		t.Fatalf("slot of 123456789 = %#x, want 0x31c3 (CRC16 XMODEM's check value)", got)
	}
	ctx := context.Background()
	rc := redistest.StartCluster(t, 1)
	rdb := redis.NewClient(&redis.Options{Addr: rc.Servers[0].Addr()})
	defer rdb.Close()
	keys := []string{"", "a", "foo", "{user1000}.following", "{user1000}.followers", "foo{}{bar}", "foo{{bar}}zap",
		"foo{bar}{zap}", "{", "}", "{}", "a{b", "a}b{c}", "lock:{account}:a", "\xff\x00\x80", "ключ"}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("job-%d", i), fmt.Sprintf("x{%d}y", i))
	}
	for _, k := range keys {
		want, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := hashSlot(k); int64(got) != want {
			t.Errorf("slot of %q = %d, want %d", k, got, want)
		}
	}
}

// onCluster marks o's master 0 (the request's, in TestSetRequests) as a
// Redis Cluster, whose Release announces marked keys with SPUBLISH.
func onCluster(o op) op {
	o.sharded = bit(0)
	return o
}

// TestSetRequests: how each request on a set is encoded, with and without
// fencing, and how a set's acquire reply reads.
func TestSetRequests(t *testing.T) {
	plain := &keySet{names: []string{"a", "b"}, keys: []any{"p:a", "p:b"}, n: int64(2), n2: int64(4)}
	fenced := &keySet{names: []string{"a", "b"}, keys: []any{"p:a", "p:b"}, ckeys: []any{"{p:a}:fence", "{p:b}:fence"}, n: int64(2), n2: int64(4)}
	ttl, by := int64(1000), int64(1700000000000)
	for _, tc := range []struct {
		name string
		o    op
		want []any
	}{
		{"acquire", plain.acquire("t", ttl),
			[]any{"evalsha", acquireSetScript.sha, int64(2), "p:a", "p:b", "t", int64(2), ttl}},
		{"fenced acquire", fenced.acquire("t", ttl),
			[]any{"evalsha", acquireSetScript.sha, int64(4), "p:a", "p:b", "{p:a}:fence", "{p:b}:fence", "t", int64(2), ttl}},
		{"raise", fenced.acquire("t", ttl).with(opRaise, nil, 7),
			[]any{"evalsha", raiseSetScript.sha, int64(4), "p:a", "p:b", "{p:a}:fence", "{p:b}:fence", "t", int64(7)}},
		{"extend", withRetake(plain.acquire("t", ttl).with(opExtend, ttl, 0), by),
			[]any{"evalsha", extendSetScript.sha, int64(2), "p:a", "p:b", "t", int64(2), ttl, by}},
		{"fenced extend", withRetake(fenced.acquire("t", ttl).with(opExtend, ttl, 7), by),
			[]any{"evalsha", extendSetScript.sha, int64(4), "p:a", "p:b", "{p:a}:fence", "{p:b}:fence", "t", int64(2), ttl, by, int64(7)}},
		{"release", fenced.acquire("t", ttl).with(opRelease, nil, 0),
			[]any{"evalsha", releaseSetScript.sha, int64(2), "p:a", "p:b", "t", ""}},
		{"release on a Cluster master", onCluster(fenced.acquire("t", ttl).with(opRelease, nil, 0)),
			[]any{"evalsha", releaseSetScript.sha, int64(2), "p:a", "p:b", "t", "", "s"}},
		{"kept", fenced.acquire("t", ttl).with(opRelease, int64(300), 0),
			[]any{"evalsha", releaseSetScript.sha, int64(2), "p:a", "p:b", "t", int64(300)}},
	} {
		r := &request{op: tc.o}
		r.build(false, false)
		if got := r.cmd.Args(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		r.build(true, false) // EVAL: the source in place of the digest
		var src any
		for _, sc := range scripts {
			if sc.sha == tc.want[1] {
				src = sc.src
			}
		}
		if got := r.cmd.Args(); got[0] != "eval" || got[1] != src || !slices.Equal(got[2:], tc.want[2:]) {
			t.Errorf("%s as EVAL: %.40v", tc.name, got)
		}
	}
	for _, tc := range []struct {
		reply   int64
		wantVal int64
		wantErr error
	}{{1, 1, nil}, {42, 42, nil}, {-1, 1, ErrTaken}, {-3, 3, ErrTaken}} {
		r := &request{op: plain.acquire("t", ttl)}
		r.cmd = redis.NewCmd(context.Background())
		r.cmd.SetVal(tc.reply)
		if v, err := r.result(nil); v != tc.wantVal || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Errorf("reply %d: %d, %v; want %d, %v", tc.reply, v, err, tc.wantVal, tc.wantErr)
		}
	}
}

func withRetake(o op, by int64) op {
	o.retakeBy = by
	return o
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
