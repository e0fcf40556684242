package redlock

import (
	"context"
	"fmt"
	"time"
)

// Renewals that fall behind: how late they are, what the Observer hears of
// it (BacklogEvent), and the Obtain that WithRenewalBacklogLimit refuses.

// noteLate notes that a renewal due is late by late, and reports whether
// that is news to tell (a BacklogEvent). r.mu is held.
func (r *renewer) noteLate(late time.Duration) bool {
	r.late.Store(int64(late))
	if r.behind || late <= renewalsLateAfter {
		return false
	}
	r.behind = true
	return true
}

// renewalsLate is the error of an Obtain while the renewals are late past
// WithRenewalBacklogLimit; nil when they are not, or without the option.
func (c *Client) renewalsLate() error {
	if c.cfg.backlog == 0 {
		return nil
	}
	r := c.renew.Load()
	if r == nil {
		return nil
	}
	late := time.Duration(r.late.Load())
	if late <= c.cfg.backlog {
		return nil
	}
	rd := c.round()
	defer rd.done()
	for i := range rd.nodes {
		rd.nodes[i].Err = errRenewalsBehind
	}
	rd.ended = fmt.Errorf("%w: the renewal this Client last began was %v late, past its limit of %v (WithRenewalBacklogLimit): it holds more locks than it renews in time", ErrRenewalsLate, late.Round(time.Millisecond), c.cfg.backlog)
	return c.quorumError("obtain", rd, ErrNotObtained)
}

// tellBacklog tells the Observer the renewals' state, behind (due of them
// waiting, the one that told it late by late) or caught up, unless that is
// what it heard last. Calls that race tell in turn, each the state as it
// is then: the last event heard is the state the last change left.
func (r *renewer) tellBacklog(due int, late time.Duration) {
	if r.c.cfg.obs == nil {
		return
	}
	r.tellMu.Lock()
	defer r.tellMu.Unlock()
	r.mu.Lock()
	behind := r.behind
	r.mu.Unlock()
	if behind == r.told {
		return
	}
	r.told = behind
	if !behind {
		due, late = 0, 0
	}
	r.c.observe(context.Background(), &BacklogEvent{Behind: behind, Due: due, Late: late})
}

// renewalsLateAfter is how long a renewal may wait past its time
// (watchdog.lateAt) for a worker before the Client tells a backlog
// (BacklogEvent).
const renewalsLateAfter = 100 * time.Millisecond

// A dogState says where a watchdog is.
type dogState uint8

const (
	dogWaiting dogState = iota // in the waiting heap
	dogReady                   // in the ready heap
	dogTurn                    // a worker runs its turn
	dogEnded
)
