package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file decodes a master's reply to a request, and names what a
// request's reply can be. The root package reports its own ErrTaken and
// ErrClosed for this package's (Reply.Err), and wraps the others.

var (
	// ErrTaken is a master's refusal: another owner holds the key.
	ErrTaken = errors.New("redlock: held by another owner")
	// ErrAbsent is a master's answer that the key is not there.
	ErrAbsent = errors.New("redlock: lock key absent")
	// ErrClosed fails a request sent to a master that is closing.
	ErrClosed = errors.New("redlock: client closed")
	// ErrNoReply is wrapped by every failure to get an answer that this
	// package makes (a request dropped, not sent, or sent and not
	// answered before a barrier could run); the root uses it for a master
	// not heard before its round decided.
	ErrNoReply = errors.New("redlock: no reply before the outcome was decided")
)

// ErrSkipped, ErrQueued and ErrReleasing mark requests dropped before
// they were sent: their caller gave up, their deadline passed while they
// waited in the queue, a Release of their lock began.
var (
	ErrSkipped   = fmt.Errorf("%w: the caller gave up before it was sent", ErrNoReply)
	ErrQueued    = fmt.Errorf("%w: waited in the queue past its deadline: %w", ErrNoReply, context.DeadlineExceeded)
	ErrReleasing = fmt.Errorf("%w: not sent, the lock is being released", ErrNoReply)
)

// ErrPastValidity is the answer of a master that ran an Extend past the
// end of the validity it served, by its clock, and so did nothing
// (extend.lua). Its reply came before the request's deadline, by the
// client's clock, which only a master clock that reads ahead of the bound
// it was sent allows (its offset unknown, measured low, or stale after a
// jump: state.sawClock): a failure of that master's, not a refusal, so
// that a clock alone never makes a lock lost; but an answer, so the
// master is not reported down (the root's Client.health).
// (TestStaleClockOffsetFailsThatMasterOnly)
var ErrPastValidity = errors.New("redlock: not extended: the master's clock was past the lock's validity end (is it ahead of the client's?)")

// Panicked marks the requests of a batch whose sending panicked (a
// go-redis hook's panic); V is what it panicked with.
type Panicked struct{ V any }

func (e Panicked) Error() string {
	return fmt.Sprintf("redlock: panic while sending to the master (a go-redis hook?): %v", e.V)
}

// result reads the master's answer to r: the counter for a fenced acquire
// (for a set's acquire, the fence, or the position of the key another
// owner holds), and nil, ErrTaken, ErrAbsent or the failure. st, when
// known, says whether the master restarted (see deletedBefore).
func (r *request) result(st *state) (int64, error) {
	err := r.cmd.Err()
	kind := r.kind()
	if kind == KindAcquire && !r.again {
		if err == redis.Nil {
			return 0, ErrTaken
		}
		return 0, err
	}
	if err != nil {
		return 0, err
	}
	if kind == KindAcquireWait {
		return r.pair()
	}
	v, err := r.cmd.Int64()
	if err != nil {
		return 0, err
	}
	if kind == KindWatch {
		if v == -2 {
			return 0, ErrAbsent
		}
		return v, nil
	}
	switch {
	case v > 0:
		return v, nil
	case kind == KindAcquireSet: // -i: the set's i-th key is another owner's
		return -v, ErrTaken
	case kind == KindRelease && r.deletedBefore(st):
		return 0, nil
	case kind == KindExtend && v == -2:
		return 0, ErrPastValidity
	case v == 0:
		return 0, ErrTaken
	default:
		return 0, ErrAbsent
	}
}

// pair reads the {flag, number} reply of wait.lua: the fence (or 0) when
// taken, or the key's PTTL with ErrTaken when held by another owner.
func (r *request) pair() (int64, error) {
	vs, err := r.cmd.Slice()
	if err != nil {
		return 0, err
	}
	if len(vs) != 2 {
		return 0, fmt.Errorf("redlock: unexpected reply %v", vs)
	}
	n, _ := vs[1].(int64)
	if f, _ := vs[0].(int64); f == 1 {
		return n, nil
	}
	return n, ErrTaken
}

// deletedBefore reports whether an earlier Release of the lock deleted its
// key on r's master: it said so, or it was sent while the key was still
// ours and no answer came, and the master is not seen to have restarted
// since the lock was obtained (a restart without persistence loses the
// key, and another owner may have held the lock since). A master whose
// run_id the client may not read (INFO denied) is not seen to restart; one
// whose run_id the Client had not learnt yet when the lock was obtained
// (it never answered the Obtain) may have restarted unseen, and its empty
// key is nobody's doing (TestRetriedReleaseReportsALossOnAMasterNeverHeardFrom).
func (r *request) deletedBefore(st *state) bool {
	b, f := Bit(r.idx), &r.op.release
	if f.Deleted&b != 0 {
		return true
	}
	return f.Reached&b != 0 && (st == nil || f.Known&b != 0 && !st.restartedAfter(f.Since))
}

// wantsAcks reports whether r is a grant that, with replica acks, counts
// only once replicas acknowledged it: an acquire, a fence raise, an
// Extend. A Release does not wait: a replica that missed it keeps the key
// until its TTL, a delay, not a second holder. Nor does WaitReleased's
// look at a key (KindWatch): it grants nothing, and the wait mark it may
// leave is a hint.
func (r *request) wantsAcks() bool { return r.kind() != KindRelease && r.kind() != KindWatch }

// errNoWait marks a request that wants acknowledgements whose WAIT did not
// run: never seen unless a send left the WAIT out.
var errNoWait = errors.New("redlock: no WAIT ran after the write")

// dropped says why r should not be sent at all: its caller gave up, or its
// deadline has passed while it waited in the queue.
func (r *request) dropped(now time.Time) error {
	select {
	case <-r.op.Done:
		return ErrSkipped
	default:
	}
	if h := r.op.extend.Halt; h != nil && h.Load() {
		return ErrReleasing
	}
	if !now.Before(r.op.Deadline) {
		return ErrQueued
	}
	return nil
}

func noScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// NoScript reports whether err is a master's NOSCRIPT: it has not loaded
// the script an EVALSHA named.
func NoScript(err error) bool { return noScript(err) }

// MaxMasters is the most masters a Client takes: each has a bit in a
// uint64 mask (Bit).
const MaxMasters = 64

// Bit is master i's bit in a mask of masters; 0 past the 64th, which the
// root's New refuses.
func Bit(i int) uint64 {
	if i >= 64 {
		return 0
	}
	return 1 << i
}
