package wire

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the replica acks' WAIT (the root's WithReplicaAcks;
// Config.Acks). Its rules, each with the test that fails when it breaks:
//
//   - With WithReplicaAcks, a batch with at least one grant (an acquire, a
//     fence raise, an Extend) ends with one WAIT on the same connection, in
//     the same pipeline: WAIT counts the replicas that acknowledged every
//     earlier write of its connection, so one covers the whole batch (and
//     the kept Releases before it), and its answer decides each grant of
//     the batch. It blocks the connection, so its timeout is cut to leave
//     the batch's earliest deadline room for the reply, a late one too
//     (Redis answers a timed-out WAIT on its next cron tick), down to
//     half the time left; it is never 0 (WAIT's "forever"). A
//     batch without a grant, and a Client without the option, send none.
//     (TestReplicaAcksGrant, TestReplicaAcksFrozenReplica,
//     TestReplicaAcksWaitFitsTheDeadline, TestReplicaAcksShareOneWait,
//     TestReplicaAcksCostNothingWithout)

// waitTick is how late Redis may answer a WAIT that timed out: it looks at
// blocked clients' timeouts when its event loop wakes, which an idle
// master does on its cron, 10 times a second at the default hz.
const waitTick = 100 * time.Millisecond

// waitCmd returns the WAIT to send after batch, or nil when no request of
// batch wants acknowledgements. WAIT holds back every reply of the batch,
// and a read past a deadline would break the connection (given up, and
// killed by the next one), so its timeout is the option's, cut so that
// even a late answer (waitTick) arrives before the batch's earliest
// deadline; but never below half the time left, which a healthy replica's
// acknowledgement needs more than the connection does. Never 0, which
// WAIT reads as "forever".
func (t *redisTransport) waitCmd(batch []*request) *redis.Cmd {
	var due time.Time
	want := false
	for _, r := range batch {
		if due.IsZero() || r.op.Deadline.Before(due) {
			due = r.op.Deadline
		}
		want = want || r.wantsAcks()
	}
	if !want {
		return nil
	}
	left := time.Until(due)
	ms := max(1, int64(min(t.ackWait, max(left/2, left-left/8-waitTick))/time.Millisecond))
	for _, r := range batch {
		if r.wantsAcks() {
			r.acked, r.ackMs, r.ackErr = 0, ms, errNoWait
		}
	}
	if ms != t.waitMs || t.waitMsArg == nil { // boxing allocates: keep the last box
		t.waitMs, t.waitMsArg = ms, ms
	}
	t.waitArgv = [3]any{"wait", t.acksArg, t.waitMsArg}
	if t.wait == nil || t.fresh {
		t.wait = redis.NewCmd(context.Background(), t.waitArgv[:]...)
	} else {
		t.wait.SetErr(nil)
		t.wait.SetVal(nil)
	}
	return t.wait
}

// acked gives the answer of the WAIT sent after batch to the requests of
// batch that want acknowledgements. It returns the WAIT's failure when it
// got no answer: the connection is then broken.
func (t *redisTransport) acked(batch []*request, wait *redis.Cmd) error {
	n, err := wait.Int64()
	for _, r := range batch {
		if r.wantsAcks() {
			if err == nil {
				r.acked, r.ackErr = n, nil
			} else {
				r.ackErr = err
			}
		}
	}
	if err != nil && !isReply(err) {
		return err
	}
	return nil
}
