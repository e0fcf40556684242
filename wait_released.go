package redlock

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// WaitReleased waits until the current holder of key releases it, or its
// lock expires: the wait of a worker that lost the race for a piece of
// work (a cache entry to rebuild) and wants its result, not the lock. It
// returns nil once it finds key absent on a quorum of masters: at once
// when it is, else after the releases of key are announced (the same
// wake-up [WithWait] uses) or a quorum of the keys it saw could have
// expired, whichever comes first, and it looks again. A release that
// leaves the key in place (a lock held at least for a while,
// [WithHoldAtLeast]) is announced, and WaitReleased then waits for the
// rest of that while. A key that expired and was taken again before it
// looked keeps it waiting for the new holder. It returns an error when ctx
// ends (matching its cause, and its Err), on [Client.Close] (matching
// [ErrClosed]), or when too few masters answer within the node timeout
// (matching [ErrUnavailable]); one that ctx or Close ended never matches
// ErrUnavailable.
func (c *Client) WaitReleased(ctx context.Context, key string) error {
	if ctx == nil {
		return invalid("nil context")
	}
	if key == "" {
		return invalid("empty key")
	}
	w := c.wakerFor()
	if w == nil {
		return ErrClosed
	}
	full := c.cfg.keyPrefix + key
	x := w.join(full, true)
	if x == nil {
		return ErrClosed
	}
	defer w.leave(x, 0)
	timeout := c.cfg.timeout(maxDefaultNodeTimeout * 10)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		confirmed, _, _, _ := w.ready(x)
		o := wire.Watch(full)
		deadline := time.Now().Add(timeout)
		rd := c.fanout(ctx, o, deadline, timeout)
		pending := 0
		for _, nd := range rd.nodes {
			if nd.Err == errNoReply {
				pending++
			}
		}
		if rd.refused < c.quorum && rd.refused+pending >= c.quorum {
			// The round decided at N - quorum + 1 "absent" answers: at an
			// even N one short of the quorum of absent keys this needs.
			// Hear the others, when they can make it
			// (TestWaitReleasedOnAFreeKeyAtEveryMasterCount).
			c.collect(ctx, rd, pending, capDeadline(ctx, deadline), timeout, false)
		}
		var held uint64
		answered, absent := 0, 0
		for i, nd := range rd.nodes {
			switch nd.Err {
			case nil: // held: read as a refusal with its PTTL, for quorumFree
				held |= bit(i)
				answered++
				rd.nodes[i].Err = ErrTaken
			case errAbsent:
				answered++
				absent++
			}
		}
		wait, ok := c.quorumFree(rd)
		var err error
		switch {
		case answered >= c.quorum:
		case rd.ended != nil:
			// The caller's context (or Close) ended the look before the
			// masters' answers decided it: not an outage
			// (TestWaitReleasedEndedByTheCallerIsNotAnOutage).
			err = c.quorumError("wait", rd, nil)
		default:
			err = c.quorumError("wait", rd, ErrUnavailable)
		}
		rd.done()
		switch {
		case err != nil:
			return err
		case absent >= c.quorum:
			return nil
		}
		if !ok { // a key without expiry: look again, not at once
			wait = jitter(timeout/2, timeout)
		}
		// Free on a quorum once so many of the masters that hold it
		// announce a release; then look again: a release may have left
		// the key for the rest of a minimum hold (keepScript).
		need := c.quorum - absent
		if bits.OnesCount64(confirmed&held) < need {
			wait = min(wait, timeout)
		}
		timer.Reset(wait + time.Millisecond)
		w.use(x)
		if cause := c.sleepUntil(ctx, w, x, timer, held, need, timeout); cause != nil {
			return fmt.Errorf("redlock: waiting for %q to be released: %w", key, cause)
		}
	}
}
