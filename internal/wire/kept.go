package wire

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the Releases a transport keeps, to send them again. Its
// rules, each with the test that fails when it breaks:
//
//   - A Release that could not reach the master (a timeout, a stalled lane,
//     no connection, a master that answers that it ran nothing: BUSY,
//     LOADING) is kept and sent again after the barrier, when the master
//     answers again, and when the Client closes, until its key would have
//     expired anyway: a straggling acquire that lands after a stall must not
//     keep a released lock's key for a whole TTL. (TestReleasedLockLeavesNoKeyAfterAStall,
//     TestCloseSendsKeptReleases, TestReleasedLockLeavesNoKeyAfterABusyScript)
//   - A Release by a handle that did not obtain its lock (Client.Attach)
//     that finds the key absent is kept too, and sent once more when its
//     recheck time comes (ReleaseFacts.Recheck: after the longer of this
//     Client's node timeout and the longest default one, 500ms, standing
//     for the Obtainer's, which is not known here), then no more: the
//     Obtain that took the lock, in another Client, may have a request to
//     this master still on its way, which would land after the Release and
//     keep its key for a whole TTL. Close waits for that time and sends
//     it. It is owner-checked, as every Release.
//     (TestHandOverLeavesNoStrayKey, TestCloseSendsTheHandOverRecheck,
//     TestHandOverRecheckNeverDeletesAnotherOwnersKey)
//   - Such a Release whose answer is handled at or after its recheck time
//     (a slow answer, a busy machine) is kept all the same, and sent at
//     once: it may have run on the master long before, and the Obtain's
//     request landed there since.
//     (TestHandOverRecheckGoesWhenItsAnswerIsHandledLate)
//   - Rechecks take at most half the room (MaxPending/2): a Release that
//     got no answer, its key most likely still there, is kept before them.
//     (TestHandOverRechecksLeaveRoomForReleasesThatGotNoAnswer)
//   - A kept Release goes again as its first sending went: on a Redis
//     Cluster master it announces a marked key on the key's sharded
//     channel, elsewhere on the wake channel, whatever the Client's other
//     masters are. (TestKeptReleaseAnnouncesOnItsMastersChannel)

// MaxPending bounds the Releases a lane keeps for a master that does not
// answer; beyond it, the keys expire with their TTL.
const MaxPending = 4096

// A keptRelease is a Release the transport sends again: one that got no
// answer, or a recheck, which waits until notBefore.
type keptRelease struct {
	op        Op
	notBefore time.Time
}

// stale reports whether k is pointless at now: its key has expired.
func (k *keptRelease) stale(now time.Time) bool {
	s := k.op.release.Stale
	return !s.IsZero() && now.After(s)
}

// keep holds on to the Releases of batch that did not run, to send them
// again after the barrier, and to those of a handle that did not obtain
// its lock that found the key absent, to send them once more at their
// recheck time.
func (t *redisTransport) keep(batch []*request) {
	for _, r := range batch {
		switch {
		case r.kind() != KindRelease || r.err == nil || r.err == ErrTaken:
		case r.err == ErrAbsent:
			t.recheck(r.op, time.Now())
		case !Answered(r.err):
			t.keepOp(r.op)
		}
	}
}

// recheck keeps o, a Release that found the key absent, its answer
// handled at now, to send once more at its recheck time: a Release by a
// handle that did not obtain the lock (ReleaseFacts.Recheck). When that
// time has passed, it goes at once: when the answer is handled says
// nothing of when the master ran it. The second sending is the last.
func (t *redisTransport) recheck(o Op, now time.Time) {
	at := o.release.Recheck
	if at.IsZero() {
		return
	}
	o.release.Recheck = time.Time{}
	if len(t.pending) >= MaxPending/2 {
		return // rechecks leave room for Releases that got no answer (TestHandOverRechecksLeaveRoomForReleasesThatGotNoAnswer)
	}
	t.keepAgain(keptRelease{op: o, notBefore: later(at, now)})
}

// due reports whether a kept Release may go now (a recheck waits for its
// time).
func (t *redisTransport) due(now time.Time) bool {
	for i := range t.pending {
		if !now.Before(t.pending[i].notBefore) {
			return true
		}
	}
	return false
}

// absentAgain reports whether c, a kept Release's command, found the key
// absent (the scripts' -1).
func absentAgain(c *redis.Cmd) bool {
	v, ok := c.Val().(int64)
	return ok && c.Err() == nil && v == -1
}

// keepOp keeps a Release to send again, until its key would have expired.
func (t *redisTransport) keepOp(o Op) { t.keepAgain(keptRelease{op: o}) }

// keepAgain keeps k, until its key would have expired.
func (t *redisTransport) keepAgain(k keptRelease) {
	if len(t.pending) >= MaxPending || k.stale(time.Now()) {
		return // the key expires with its TTL
	}
	k.op.Done, k.op.Inline, k.op.Vals = nil, false, nil
	t.pending = append(t.pending, k)
}

// buildKept makes r the request that sends k again: an EVAL (the master
// may have lost its scripts since), which on a Cluster master announces a
// marked key on the key's sharded channel, as the first sending did.
// (TestKeptReleaseAnnouncesOnItsMastersChannel)
func (t *redisTransport) buildKept(r *request, k *keptRelease) {
	*r = request{op: k.op, cluster: t.cluster}
	r.build(true, true)
}

func (t *redisTransport) addExtra(c *redis.Cmd) {
	t.extra = append(t.extra, c)
	t.cmds = append(t.cmds, c)
}
