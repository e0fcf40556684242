package redlock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// TestRenewalsDecidedAtAQuorumAreNotSentToASlowMaster: a renewal that a
// quorum decided leaves nothing queued for a master that has not answered
// yet: its request, still waiting on that master's lane, is dropped, as it
// was when each watchdog's renewal had a context of its own, cancelled once
// the renewal returned. Without it, the slowest master is sent every
// renewal however far behind it is: its lane carries the whole renewal
// load, its batches grow until they time out whole, and the Releases that
// follow wait (and time out) behind them.
func TestRenewalsDecidedAtAQuorumAreNotSentToASlowMaster(t *testing.T) {
	ctx := context.Background()
	c, servers, p, direct := slowThird(t)
	fast := clientOf(t, servers[0])
	// Each batch to the third master is 300ms on its way (within the node
	// timeout of 1s): the renewals decide on the two others meanwhile.
	p.DelayOpen(300*time.Millisecond, 0)
	const locks = 20
	var stops []func()
	for i := range locks {
		l := obtain(t, c, "k"+strconv.Itoa(i), 3*time.Second)
		_, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, stop)
	}
	f0, s0 := renewalsRun(t, fast), renewalsRun(t, direct)
	time.Sleep(2 * time.Second)
	f1, s1 := renewalsRun(t, fast), renewalsRun(t, direct)
	for _, stop := range stops {
		stop()
	}
	renewals, slow := f1-f0, s1-s0
	if renewals < locks*10 {
		t.Fatalf("the fast master ran %d renewals in 2s, want about %d", renewals, locks*20)
	}
	// One batch per round trip goes out, with the renewals not decided
	// yet when it leaves: a few. Every renewal sent is about as many as
	// the fast master ran.
	t.Logf("fast %d slow %d", renewals, slow)
	if slow*2 > renewals {
		t.Errorf("the slow master ran %d renewals while the fast one ran %d: renewals decided at a quorum were still sent to it", slow, renewals)
	}
}
