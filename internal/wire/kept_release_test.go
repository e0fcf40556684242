package wire

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// TestHandOverRechecksLeaveRoomForReleasesThatGotNoAnswer: a lane keeps at
// most MaxPending Releases. The second Releases of attached handles that
// found their key absent (rechecks: the key is most likely just gone) wait
// there for a node timeout each, so a master that lacks the keys of many
// attached locks (restarted empty, say) fills the room with them at a high
// enough rate of hand-overs. A Release that got no answer at all (its key
// most likely still there) must still be kept: dropping it leaves its key
// for a whole TTL, which the kept Releases exist to prevent
// (TestReleasedLockLeavesNoKeyAfterAStall), for the sake of rechecks that
// will most likely find nothing.
func TestHandOverRechecksLeaveRoomForReleasesThatGotNoAnswer(t *testing.T) {
	tr := &redisTransport{}
	now := time.Now()
	for i := range MaxPending {
		o := Release(NewTarget(fmt.Sprint("attached:", i), "", "tok"), nil, ReleaseFacts{Recheck: now.Add(time.Second), Stale: now.Add(time.Minute)})
		tr.recheck(o, now)
	}
	stalled := Release(NewTarget("stalled", "", "tok"), nil, ReleaseFacts{Stale: now.Add(time.Minute)})
	tr.keepOp(stalled)
	if !slices.ContainsFunc(tr.pending, func(k keptRelease) bool { return k.op.target.Key() == "stalled" }) {
		t.Fatalf("a Release that got no answer was dropped: the lane keeps %d rechecks of attached handles (none due for a second), and no room for it", len(tr.pending))
	}
}

// TestKeptReleaseAnnouncesOnItsMastersChannel: a Release kept for a master
// that did not answer goes again as its first sending went: on a Redis
// Cluster master it announces a marked key on the key's sharded channel
// (SPUBLISH, where the waiters of a Cluster listen), elsewhere on the wake
// channel, whatever the Client's other masters are.
func TestKeptReleaseAnnouncesOnItsMastersChannel(t *testing.T) {
	ks := NewKeySet([]string{"{s}:a", "{s}:b"}, nil)
	for _, tc := range []struct {
		name    string
		o       Op
		cluster bool
	}{
		{"key, Cluster master", Release(NewTarget("k", "", "tok"), nil, ReleaseFacts{}), true},
		{"key, standalone master", Release(NewTarget("k", "", "tok"), nil, ReleaseFacts{}), false},
		{"set, Cluster master", Release(ks.Target("tok"), nil, ReleaseFacts{}), true},
		{"set, standalone master", Release(ks.Target("tok"), nil, ReleaseFacts{}), false},
	} {
		tr := &redisTransport{cluster: tc.cluster}
		tr.keepOp(tc.o)
		var r request
		tr.buildKept(&r, &tr.pending[0])
		args := r.cmd.Args()
		if sharded := args[len(args)-1] == "s"; sharded != tc.cluster {
			t.Errorf("%s: the kept Release goes out as %v: announced on the sharded channel %v, want %v", tc.name, args, sharded, tc.cluster)
		}
	}
}

// TestClusterMasterSendsItsKeptReleases: on a Redis Cluster master the
// transport keeps a Release the lane could not send, like on a standalone
// one (lane.go send, kept.go keep), and sends it through the Cluster's
// pooled connections once the master answers again (shared.go): the
// released lock's key must not stay for its whole TTL, and the idle lane
// must stop ticking once nothing is kept.
func TestClusterMasterSendsItsKeptReleases(t *testing.T) {
	ctx := context.Background()
	rc := redistest.StartCluster(t, 1)
	cc := rc.Client(func(o *redis.ClusterOptions) { o.MaxRedirects = -1 })
	t.Cleanup(func() { cc.Close() }) // after the master's cleanup
	if err := cc.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	direct := rc.Client()
	defer direct.Close()
	const timeout = 50 * time.Millisecond
	m := newMaster(t, cc, Config{NodeTimeout: timeout})
	if err := lock(m, "k", "tok", timeout); err != nil {
		t.Fatal(err)
	}
	other := "other" // one shard: the same lane
	if err := rc.Servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	defer rc.Servers[0].Cont()
	stalled := make(chan error, 1)
	go func() { stalled <- lock(m, other, "tok", timeout) }() // in flight on the frozen master: the lane stalls
	time.Sleep(150 * time.Millisecond)
	if err := unlock(m, "k", "tok", timeout); err == nil {
		t.Fatal("Release on a stalled lane succeeded")
	}
	if err := rc.Servers[0].Cont(); err != nil {
		t.Fatal(err)
	}
	<-stalled
	time.Sleep(time.Second)                                                                                                 // the master answers again; the lane is idle
	ln := m.laneFor(&request{op: Op{target: NewTarget("k", "", "tok"), Call: Call{Deadline: time.Now().Add(time.Second)}}}) // the shard's
	if ln == m.lane {
		t.Fatal("the key's requests take the master's lane, not its shard's")
	}
	ln.mu.Lock()
	ticking := ln.ticking != nil
	ln.mu.Unlock()
	if v, err := direct.Get(ctx, "k").Result(); err == nil && v == "tok" {
		t.Fatalf("a second after the master answered again, the released lock's key is there for %v more (the lane still ticks: %v)",
			direct.PTTL(ctx, "k").Val().Round(time.Second), ticking)
	}
	if ticking {
		t.Fatal("an idle lane with nothing to send still ticks")
	}
}
