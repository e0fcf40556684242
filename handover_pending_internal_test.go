package redlock

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestHandOverRechecksLeaveRoomForReleasesThatGotNoAnswer: a lane keeps at
// most maxPending Releases. The second Releases of attached handles that
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
	for i := range maxPending {
		o := newOp(opRelease, fmt.Sprint("attached:", i), "", "tok")
		o.recheck, o.stale = now.Add(time.Second), now.Add(time.Minute)
		tr.recheck(o, now)
	}
	stalled := newOp(opRelease, "stalled", "", "tok")
	stalled.stale = now.Add(time.Minute)
	tr.keepOp(stalled)
	if !slices.ContainsFunc(tr.pending, func(o op) bool { return o.key == "stalled" }) {
		t.Fatalf("a Release that got no answer was dropped: the lane keeps %d rechecks of attached handles (none due for a second), and no room for it", len(tr.pending))
	}
}
