package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// A Lock is a held lock, returned by [Client.Obtain]. It is safe for
// concurrent use: Extend from one goroutine while another calls Release,
// for example. Extend and Release on one Lock run one at a time.
type Lock struct {
	c     *Client
	key   string // as the caller named it
	token string
	fence int64
	op    op // the acquire: its key and token boxed once for every request
	// obtained is when the winning attempt started, for WithMaxHold.
	obtained time.Time

	mu       sync.Mutex    // serialises Extend and Release
	ttl      time.Duration // of the last Obtain or Extend; guarded by mu
	released atomic.Bool   // a Release decided (nil or ErrLockLost); written under mu
	until    atomic.Int64  // end of validity, in ns since c.epoch; 0 when released or lost
}

// Key returns the key the lock was obtained for, without the client's
// prefix.
func (l *Lock) Key() string { return l.key }

// Token returns the lock's owner identity, 128 random bits from crypto/rand
// encoded in URL-safe base64: the value the lock key holds on each master.
func (l *Lock) Token() string { return l.token }

// Fence returns the lock's fencing token, with [WithFencing]; 0 without it.
// Under Redlock's assumptions (no master loses its data, every holder
// finishes within its validity) each new holder of a key gets a fence
// strictly greater than every earlier holder's, also while a minority of
// masters is down, slow or frozen. Pass it to the resource with every write
// and let the resource refuse a fence lower than one it has seen (see
// [FencedWrite]).
func (l *Lock) Fence() int64 { return l.fence }

// Validity returns how long the lock is still held for sure: its TTL minus
// the time the last Obtain or Extend took minus the drift allowance, counted
// on the monotonic clock from when that call started. It is 0 once that time
// has passed, after Release, and once Extend found the lock lost.
func (l *Lock) Validity() time.Duration {
	until := l.until.Load()
	if until == 0 {
		return 0
	}
	return max(0, time.Duration(until)-time.Since(l.c.epoch))
}

// Extend resets the lock's TTL to ttl on every master where it is still
// ours, and re-takes the key where it has vanished (a restart, an eviction).
// It succeeds when a quorum confirmed it within the new validity, and then
// the validity is counted anew from the start of this call: ttl minus the
// time Extend took minus the drift allowance (shorter than before, when ttl
// is).
//
// No request of Extend takes effect after the lock's validity has ended: its
// requests' deadline is capped at that end, and a master re-takes a vanished
// key only until then. So a lapsed lock is never revived, whatever the
// network delays.
//
// It returns an error matching [ErrLockLost] when the validity had already
// run out or ran out before a quorum confirmed, or when refusals rule out a
// quorum (our token is gone from more than N - quorum masters); Validity is
// 0 from then on. When masters merely fail to answer in time, the error
// matches [ErrUnavailable] and not ErrLockLost: the lock is still ours until
// Validity runs out, and Extend may be tried again. A failed Extend never
// lengthens the validity, and shortens it to what the masters it may have
// reached will hold: at most ttl minus the drift allowance from the start of
// the call.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	ttl, err := l.c.check(ctx, l.key, ttl)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.extendLocked(ctx, ttl)
}

// extendLocked is Extend after validation, with l.mu held; the watchdog
// calls it while the client closes.
func (l *Lock) extendLocked(ctx context.Context, ttl time.Duration) error {
	c := l.c
	start := time.Now()
	until := time.Duration(l.until.Load())
	end := c.epoch.Add(until) // the validity's end, on the monotonic clock
	if until == 0 || !start.Before(end) {
		l.until.Store(0)
		return fmt.Errorf("%w: validity ran out before Extend", ErrLockLost)
	}
	timeout := c.cfg.timeout(ttl)
	deadline := start.Add(timeout)
	if end.Before(deadline) {
		deadline = end
	}
	o := l.op.with(opExtend, c.boxTTL(ttl), l.fence)
	o.retakeBy = capDeadline(ctx, deadline).UnixMilli()
	rd := c.fanout(ctx, o, deadline, timeout)
	defer rd.done()
	valid := ttl - c.cfg.drift(ttl)
	if rd.ok >= c.quorum && time.Since(start) < valid {
		l.until.Store(int64(start.Add(valid).Sub(c.epoch)))
		l.ttl = ttl
		return nil
	}
	if rd.refused > len(c.nodes)-c.quorum {
		l.until.Store(0)
		return c.quorumError("extend", rd, ErrLockLost)
	}
	// Not extended. The masters it reached, or may still reach, now hold
	// the key until ttl after they ran it, no sooner than start + ttl; the
	// others until the old validity's end.
	until = min(until, start.Add(valid).Sub(c.epoch))
	if until <= time.Since(c.epoch) {
		l.until.Store(0)
		qe := c.quorumError("extend", rd, ErrLockLost)
		qe.why = "the validity ran out before a quorum confirmed"
		return qe
	}
	l.until.Store(int64(until))
	return c.quorumError("extend", rd, nil)
}

// Release deletes the lock on every master where it still holds our token,
// and never deletes another owner's key. It returns nil when a quorum
// confirmed the delete; an error matching [ErrLockLost] when refusals show
// our token was gone from more than N - quorum masters (the lock had lapsed
// or been taken: work done under it may have overlapped); otherwise an error
// matching [ErrUnavailable] with each master's answer, and the keys left
// expire with their TTL. Validity is 0 after Release, whatever it returns.
//
// Once a Release has returned nil or ErrLockLost, later calls return nil at
// once: a deferred Release after an explicit one is no alarm. After a
// Release that merely failed to reach the masters, another call tries again.
func (l *Lock) Release(ctx context.Context) error {
	if ctx == nil {
		return invalid("nil context")
	}
	if l.c.closed.Load() && !l.released.Load() {
		l.until.Store(0)
		return ErrClosed
	}
	return l.release(ctx)
}

// release is Release after validation; Do calls it while the client
// closes.
func (l *Lock) release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released.Load() {
		return nil
	}
	return l.releaseLocked(ctx)
}

// releaseLocked is release with l.mu held.
func (l *Lock) releaseLocked(ctx context.Context) error {
	c := l.c
	l.until.Store(0)
	timeout := c.cfg.timeout(l.ttl)
	rd := c.fanout(ctx, l.op.with(opRelease, nil, 0), time.Now().Add(timeout), timeout)
	defer rd.done()
	if rd.ok >= c.quorum {
		l.released.Store(true)
		return nil
	}
	if rd.refused > len(c.nodes)-c.quorum {
		l.released.Store(true)
		return c.quorumError("release", rd, ErrLockLost)
	}
	return c.quorumError("release", rd, nil)
}
