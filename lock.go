package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// A Lock is a held lock, returned by [Client.Obtain] (or, on several keys
// at once, [Client.ObtainMulti]). It is safe for
// concurrent use: Extend from one goroutine while another calls Release,
// for example. Extend and Release on one Lock run one at a time.
type Lock struct {
	c     *Client
	key   string // as the caller named it
	token string
	fence int64
	// target is the lock as every request of it names it: its keys and
	// token, boxed once; set is its keys, for a lock on several.
	target wire.Target
	set    *keySet
	// obtained is when the winning attempt started, for WithMaxHold and
	// WithHoldAtLeast.
	obtained    time.Time
	holdAtLeast time.Duration // WithHoldAtLeast; 0 without
	keptUntil   time.Time     // a Release kept the key until then; guarded by mu
	// attached says the handle did not obtain the lock (Client.Attach):
	// its Release goes once more to a master where it found the key
	// absent (wire.ReleaseFacts.Recheck).
	attached bool

	mu        sync.Mutex   // serialises Extend and Release
	ttl       atomic.Int64 // of the last Obtain or Extend, a time.Duration; written under mu
	releasing atomic.Bool  // a Release has started; set before until is cleared
	released  atomic.Bool  // a Release decided (nil or ErrLockLost); written under mu
	until     atomic.Int64 // end of validity, in ns since c.epoch; 0 when released or lost

	// What earlier Releases did, so that a Release tried again tells a key
	// they deleted from a lapse (see wire.ReleaseFacts): the masters that
	// confirmed the delete, those that may have run it, and the validity's
	// end when the first Release began (ns since c.epoch).
	deleted, reached atomic.Uint64
	// known: the masters whose process the Client knew (Client.told) when
	// the lock was obtained; written once before the Lock is returned.
	known  uint64
	keyEnd atomic.Int64
	// lapsed says the validity had ended when the first Release began:
	// every Release then reports the lock lost.
	lapsed atomic.Bool

	// refusal is why an Extend found the lock lost to refusals, for a
	// watchdog that then sees the validity at 0.
	refusal atomic.Pointer[error]

	// dog is the first of the watchdogs renewing the lock (the others
	// follow it: watchdog.sibling), told whenever until changes so that they
	// follow a shorter validity; guarded by the Client's renewer's mu.
	// watched counts them.
	dog     *watchdog
	watched atomic.Int32
}

// lockFor takes l.mu for a call of the caller's, waiting no longer than
// ctx; a watchdog's renewal in flight gives way to it.
func (l *Lock) lockFor(ctx context.Context) error {
	if l.mu.TryLock() {
		return nil
	}
	if l.watched.Load() > 0 {
		l.c.renewerOf().cut(l) // a renewal in flight gives way
	}
	t := time.NewTimer(time.Millisecond)
	defer t.Stop()
	for !l.mu.TryLock() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("redlock: waiting for the lock's Extend or renewal in flight: %w", endedBy(ctx))
		case <-t.C:
			t.Reset(time.Millisecond)
		}
	}
	return nil
}

// setUntil sets the end of validity and tells the lock's watchdogs, but
// for by, the one whose own renewal set it (nil for a call of the
// caller's): a watchdog told of its own failed renewal would take the
// validity it left for the caller's change, and renew first rather than
// tell its work at the margin (TestWorkIsToldTheMarginBeforeTheValidityEnds).
// Once a Release has begun the validity stays 0, also when an Extend in
// flight then succeeds: a Release sets releasing before it clears until,
// and setUntil stores before it looks at releasing, so one of the two
// stores 0 last.
func (l *Lock) setUntil(until int64, by *watchdog) {
	l.until.Store(until)
	if until != 0 && l.releasing.Load() {
		l.until.Store(0)
	}
	if n := l.watched.Load(); n > 1 || n == 1 && by == nil {
		l.c.renewerOf().changed(l, by)
	}
}

// Key returns the key the lock was obtained for, without the client's
// prefix; for a lock on several keys, the first of them (see [Lock.Keys]).
func (l *Lock) Key() string { return l.key }

// Token returns the lock's owner identity: 128 random bits from
// crypto/rand in URL-safe base64 (22 characters), then, for a lock obtained
// [WithHolderInfo], "~" and the escaped info. It is the value the lock key
// holds on each master (a waiter may append its mark "!" and more, see
// [WithWait]); [Client.Attach] takes it whole.
func (l *Lock) Token() string { return l.token }

// HolderInfo returns the info [WithHolderInfo] put in the lock's token,
// unescaped; "" without. A handle of [Client.Attach] returns the info of
// the token it was given.
func (l *Lock) HolderInfo() string { return holderInfo(l.token) }

// Fence returns the lock's fencing token, with [WithFencing]; 0 without it.
// Under Redlock's assumptions (no master loses its data, every holder
// finishes within its validity) each new holder of a key gets a fence
// strictly greater than every earlier holder's, also while a minority of
// masters is down, slow or frozen. Pass it to the resource with every write
// and let the resource refuse a fence lower than one it has seen (see
// [FencedWrite]). A lock on several keys has one fence that holds so for
// each of its keys (see [Client.ObtainMulti]).
func (l *Lock) Fence() int64 { return l.fence }

// Validity returns how long the lock is still held for sure: its TTL minus
// the time the last Obtain or Extend took minus the drift allowance, counted
// on the monotonic clock from when that call started. It is 0 once that time
// has passed, after Release, and once Extend found the lock lost.
func (l *Lock) Validity() time.Duration {
	if l == nil {
		return 0 // a failed Obtain's: nothing is held (TestNilLockMethodsReturnAnError)
	}
	return l.validityAt(time.Now())
}

// validityAt is the validity left at now.
func (l *Lock) validityAt(now time.Time) time.Duration {
	until := l.until.Load()
	if until == 0 {
		return 0
	}
	return max(0, time.Duration(until)-now.Sub(l.c.epoch))
}

// Extend makes the lock's key last at least ttl more on every master where
// it is still ours, and re-takes the key where it has vanished (a restart,
// an eviction). It succeeds when a quorum confirmed it within the new
// validity, and then the validity is counted anew from the start of this
// call: ttl minus the time Extend took minus the drift allowance. A key is
// never shortened on a master: with a shorter ttl, only the validity the
// holder counts on shrinks (so that a late Extend cannot cut a lock a later
// one renewed); Release still frees the lock at once.
//
// No request of Extend takes effect after the lock's validity has ended: its
// requests' deadline is capped at that end, and a request that reaches a
// master later (held up by the network, or in the socket of a master that
// froze) does nothing there: neither the re-take of a vanished key nor the
// longer TTL of a key still ours, by the master's clock. So a lapsed lock is
// never revived, whatever the delays. The masters' clocks need not agree
// with the client's: each fresh connection measures its master's offset,
// and the bounds go out in that master's clock. Where the offset cannot be
// measured (an ACL that denies INFO, a Redis Cluster master) it is taken
// as 0: a master whose clock is behind by d may then run a request up to d
// late, and one ahead by more than the validity left when Extend starts
// answers with a failure; so does a master whose clock jumped since its
// offset was measured, until the next fresh connection.
//
// It returns an error matching [ErrLockLost] when the validity had already
// run out or ran out before a quorum confirmed, or when refusals rule out a
// quorum (our token is gone from more than N - quorum masters); Validity is
// 0 from then on; after a Release began, the error says so. When masters
// merely fail to answer in time, the error matches [ErrUnavailable] and not
// ErrLockLost: the lock is still ours until Validity runs out, and Extend
// may be tried again; when ctx ends first (a cancel, or a deadline shorter
// than the node timeout), the error says "ended by the caller" and matches
// ctx's cause, neither ErrLockLost nor ErrUnavailable. On the nil *Lock of
// a failed Obtain, Extend returns an error matching [ErrInvalidArgument].
// A failed Extend never
// lengthens the validity, and shortens it to what the masters it may have
// reached will hold: at most ttl minus the drift allowance from the start of
// the call.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return errNilLock("Extend")
	}
	ttl, err := l.c.check(ctx, l.key, ttl)
	if err != nil {
		return err
	}
	if err := l.lockFor(ctx); err != nil {
		return err
	}
	defer l.mu.Unlock()
	return l.extendLocked(ctx, ttl)
}

// extendLocked is Extend after validation, with l.mu held.
func (l *Lock) extendLocked(ctx context.Context, ttl time.Duration) error {
	var x extension
	l.sendExtend(ctx, time.Now(), ttl, nil, time.Time{}, &x)
	return l.readExtend(ctx, &x)
}

// An extension is an Extend in flight, between sendExtend and readExtend,
// with l.mu held throughout: a watchdog's renewals are sent in batches and
// read after (renewer.go), the caller's at once.
type extension struct {
	ttl, timeout time.Duration
	dog          *watchdog     // the renewing watchdog; nil: the caller's Extend
	start, dl    time.Time     // dl: the round's deadline
	until        time.Duration // the validity's end when it began, since the epoch
	before       time.Duration // the validity then, for the Observer
	rd           *round
	pending      int       // rd's masters not read yet (pollExtend)
	polled       bool      // pollExtend read rd to its outcome
	err          error     // set when nothing was sent: the outcome
	end          time.Time // when readExtend had the outcome
}

// sendExtend begins an Extend of l at start for ttl into x: the caller's
// (dog nil), its requests sent on the caller's goroutine when the master's
// lane is idle (see open); or dog's renewal, sent to the lanes' workers
// with those of its batch, that may not outlast by: the masters that have
// not answered by then count as failed.
func (l *Lock) sendExtend(ctx context.Context, start time.Time, ttl time.Duration, dog *watchdog, by time.Time, x *extension) {
	c := l.c
	*x = extension{ttl: ttl, dog: dog, start: start, until: time.Duration(l.until.Load())}
	if c.cfg.obs != nil {
		x.before = l.validityAt(start)
	}
	end := c.epoch.Add(x.until) // the validity's end, on the monotonic clock
	if x.until == 0 || !x.start.Before(end) {
		l.setUntil(0, x.dog)
		if l.releasing.Load() {
			x.err = errExtendAfterRelease // (TestExtendAfterReleaseSaysReleased)
			return
		}
		x.err = fmt.Errorf("%w: validity ran out before Extend", ErrLockLost)
		return
	}
	if ctx.Err() != nil { // nothing to ask the masters for a caller gone
		x.err = c.unanswered("extend", nil, endedBy(ctx), nil)
		return
	}
	x.timeout = c.cfg.timeout(ttl)
	// Both bounds on start's wall clock reading: the masters compare them
	// with theirs (extend.lua).
	left := end.Sub(x.start)
	x.dl = x.start.Add(min(x.timeout, left))
	if !by.IsZero() && by.Before(x.dl) {
		x.dl, x.timeout = by, by.Sub(x.start)
	}
	o := wire.Extend(l.target, c.boxTTL(ttl), l.fence, wire.Bounds{
		RetakeBy: capDeadline(ctx, x.dl).UnixMilli(),
		ValidBy:  x.start.Add(left).UnixMilli(),
		Halt:     &l.releasing, // a Release that begins meanwhile: not sent
	})
	x.rd, x.pending = c.sendAll(ctx, o, x.dl, dog == nil), len(c.nodes)
}

// pollExtend reads the answers to x that have arrived, without waiting,
// and reports whether its outcome is decided, its deadline counted from
// now: then readExtend returns at once.
func (l *Lock) pollExtend(ctx context.Context, x *extension, now time.Time) bool {
	if x.rd == nil || x.polled {
		return true
	}
	x.polled = l.c.poll(ctx, x.rd, &x.pending, x.dl, x.timeout, now)
	return x.polled
}

// readExtend ends the Extend x: it reads the masters' answers, sets the
// validity, tells the Observer, and returns the outcome.
func (l *Lock) readExtend(ctx context.Context, x *extension) error {
	c := l.c
	err := x.err
	var rec *extendRec
	if c.cfg.obs != nil {
		rec = c.newExtendRec()
	}
	var answers []NodeError
	if x.rd != nil && !x.polled {
		c.readAll(ctx, x.rd, x.dl, x.timeout)
	} else if x.rd != nil && c.cfg.obs != nil {
		c.health(ctx, x.rd)
	}
	x.end = time.Now()
	if x.rd != nil {
		err = l.extended(x)
		if rec != nil {
			rec.buf = append(rec.buf[:0], x.rd.nodes...)
			answers = rec.buf
		}
		x.rd.done()
		x.rd = nil
	}
	if rec != nil {
		rec.ev = ExtendEvent{Key: l.key, Renewal: x.dog != nil, Latency: x.end.Sub(x.start), Outcome: outcome(ctx, err, Extended),
			Before: x.before, After: l.validityAt(x.end), Masters: answers, Err: err}
		c.observe(ctx, &rec.ev)
		c.recycleExtend(rec)
	}
	return err
}

// extended sets the validity from the answers of x's masters, read by
// x.end, and returns the Extend's outcome.
func (l *Lock) extended(x *extension) error {
	c, rd, start := l.c, x.rd, x.start
	valid := x.ttl - c.cfg.drift(x.ttl)
	ok := rd.ok >= c.quorum && x.end.Sub(start) < valid
	if ok {
		l.setUntil(int64(start.Add(valid).Sub(c.epoch)), x.dog)
		l.ttl.Store(int64(x.ttl))
	}
	if l.releasing.Load() {
		// Its requests not sent yet were dropped (wire.Bounds.Halt); the validity
		// stays 0 whatever the others did.
		return errReleasedDuringExtend
	}
	if ok {
		return nil
	}
	if rd.refused > len(c.nodes)-c.quorum {
		err := error(c.quorumError("extend", rd, ErrLockLost))
		l.refusal.Store(&err)
		l.setUntil(0, x.dog)
		return err
	}
	// Not extended. The masters it reached, or may still reach, now hold
	// the key until ttl after they ran it, no sooner than start + ttl; the
	// others until the old validity's end.
	until := min(x.until, start.Add(valid).Sub(c.epoch))
	if until <= x.end.Sub(c.epoch) {
		l.setUntil(0, x.dog)
		qe := c.quorumError("extend", rd, ErrLockLost)
		qe.why = "the validity ran out before a quorum confirmed"
		return qe
	}
	l.setUntil(int64(until), x.dog)
	return c.quorumError("extend", rd, nil)
}

// errReleasedDuringExtend ends an Extend of a lock whose Release began
// while it ran: the holder gave the lock up (an Observer hears Cancelled).
var errReleasedDuringExtend = fmt.Errorf("%w: released while Extend ran", ErrLockLost)

// errExtendAfterRelease ends an Extend of a lock a Release had begun to
// release before it: the holder gave the lock up, its validity did not
// merely run out. (TestExtendAfterReleaseSaysReleased)
var errExtendAfterRelease = fmt.Errorf("%w: Release was called before this Extend", ErrLockLost)

// KeptUntil returns, after a Release that returned nil for a lock obtained
// [WithHoldAtLeast] before its minimum hold had passed, the time until
// which the masters keep its key; the zero Time otherwise (the key was
// deleted).
func (l *Lock) KeptUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keptUntil
}

// Release deletes the lock on every master where it still holds our token,
// and never deletes another owner's key. It returns nil when a quorum
// confirmed the delete of a lock still valid when Release began. It returns
// an error matching [ErrLockLost] (work done under the lock may have
// overlapped with another holder's) when the lock's validity had ended
// before the first Release began (a watchdog found it lost, an Extend did,
// or it lapsed: [Lock.Validity] was 0), whatever the masters answer; the
// Release still deletes every key that holds our token, and the error says
// that the validity had ended. It also returns one when refusals show our
// token was gone from more than N - quorum masters (the lock had lapsed or
// been taken). Otherwise it returns an error matching [ErrUnavailable] with
// each master's answer, and the keys left expire with their TTL. Validity is
// 0 after Release, whatever it returns, and a watchdog of the lock stops.
//
// Release waits for an Extend of the caller's in flight on the same lock (a
// watchdog's renewal gives way at once); when ctx ends first, the Release
// still goes out behind that Extend, and Release returns an error that says
// "ended by the caller" and matches ctx's cause, not ErrUnavailable
// (ErrLockLost for a lock whose validity had ended), and a later call tries
// again. So does a Release that ctx ends before a quorum answered.
//
// On the nil *Lock of a failed Obtain (a Release deferred before the
// error check), Release returns an error matching [ErrInvalidArgument].
//
// Once a Release has returned nil or ErrLockLost, other than after giving
// up on an Extend in flight, later calls return nil at once: a deferred
// Release after an explicit one is no alarm. After a
// Release that merely failed to reach the masters, another call tries again,
// and counts a key found gone (or another owner's) on a master as deleted
// by the first when the first was sent there while the lock was valid and
// got no answer, unless the master was seen to restart since the lock was
// obtained (its run_id changed; a client that may not read INFO sees no
// restart).
//
// For a lock obtained [WithHoldAtLeast] whose minimum hold has not passed
// yet, Release leaves the key in place for the rest of it instead of
// deleting it; [Lock.KeptUntil] then says until when.
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return errNilLock("Release")
	}
	if ctx == nil {
		return invalid("nil context")
	}
	if l.c.closed.Load() && !l.released.Load() {
		l.releasing.Store(true) // an Extend in flight cannot set a validity any more
		l.setUntil(0, nil)
		return ErrClosed
	}
	return l.release(ctx)
}

// release is Release after validation; Do calls it while the client
// closes.
func (l *Lock) release(ctx context.Context) error {
	if l.released.Load() {
		return nil // decided before: no need to wait for an Extend holding l.mu
	}
	if !l.releasing.Swap(true) {
		until := l.until.Load()
		l.keyEnd.Store(until)
		l.lapsed.Store(until == 0 || time.Duration(until) <= time.Since(l.c.epoch))
	}
	l.setUntil(0, nil) // the watchdog stops now, whoever holds l.mu
	if err := l.lockFor(ctx); err != nil {
		return l.releaseBehind(err)
	}
	defer l.mu.Unlock()
	if l.released.Load() {
		return nil
	}
	if l.c.cfg.obs == nil {
		return l.releaseLocked(ctx, nil)
	}
	start := time.Now()
	rec := l.c.newReleaseRec()
	answers := rec.buf[:0]
	err := l.releaseLocked(ctx, &answers)
	if len(answers) == 0 {
		answers = nil // no master asked
	} else {
		rec.buf = answers
	}
	rec.ev = ReleaseEvent{Key: l.key, Held: start.Sub(l.obtained), Latency: time.Since(start), Outcome: outcome(ctx, err, Released), Masters: answers, Err: err}
	l.c.observe(ctx, &rec.ev)
	l.c.recycleRelease(rec)
	return err
}

// A releasePlan is a Release to send: its Op, its node timeout, for a
// lock held at least a while not over yet until when the key stays, and
// the validity's end when the first Release began (keyEnd: a Release sent
// before then may delete the key).
type releasePlan struct {
	op      wire.Op
	timeout time.Duration
	kept    time.Time
	keyEnd  time.Time
}

// errNilLock is the error of method on the nil *Lock a failed Obtain
// returns: a Release deferred before the error check is common, and must
// not panic over the Obtain's own error (TestNilLockMethodsReturnAnError).
func errNilLock(method string) error {
	return invalid("%s of a nil *Lock (did the Obtain fail?)", method)
}

// releasePlan returns the Release to send now.
func (l *Lock) releasePlan() releasePlan {
	c := l.c
	ttl := time.Duration(l.ttl.Load())
	now := time.Now()
	p := releasePlan{keyEnd: c.epoch.Add(time.Duration(l.keyEnd.Load())), timeout: c.cfg.timeout(ttl)}
	var hold any
	rest := l.obtained.Add(l.holdAtLeast).Sub(now)
	if rest > 0 {
		// Held at least until then: the key stays for the rest of the while.
		ms := (rest + time.Millisecond - 1) / time.Millisecond
		hold, p.kept = int64(ms), now.Add(rest)
	}
	f := wire.ReleaseFacts{Deleted: l.deleted.Load(), Reached: l.reached.Load(), Known: l.known, KeyEnd: p.keyEnd, Since: l.obtained}
	// The key expires at the latest ttl after the last Extend ran, before
	// now; twice that leaves room for the masters' clocks.
	f.Stale = now.Add(2*ttl + max(rest, 0))
	if l.attached {
		// The Obtain that took the lock returned at a quorum, maybe with
		// its request to another master still on the way; it went out
		// within the node timeout of that Obtain's start, before the
		// hand-over: a master where this Release finds the key absent gets
		// it once more that long from now, so that such a request, landing
		// after this Release, leaves no key for a whole TTL. The obtaining
		// Client's node timeout is not known here: the longer of this
		// one's and the default's longest (500ms) stands for it
		// (TestHandOverLeavesNoStrayKey,
		// TestHandOverRecheckOutwaitsTheObtainersNodeTimeout).
		f.Recheck = now.Add(max(p.timeout, maxDefaultNodeTimeout))
		if end := f.Recheck.Add(p.timeout); end.After(f.Stale) {
			f.Stale = end
		}
	}
	p.op = wire.Release(l.target, hold, f)
	return p
}

// releaseBehind sends the Release of a caller that gave up waiting for
// l.mu (cause says why) to every master without waiting for it: it goes
// out behind the Extend in flight, on each master's lane. A later Release
// counts what this one may have done.
func (l *Lock) releaseBehind(cause error) error {
	c := l.c
	p := l.releasePlan()
	now := time.Now()
	p.op.Deadline = now.Add(p.timeout)
	if now.Before(p.keyEnd) { // sent while the key was ours: it may delete it
		all := uint64(0)
		for i := range c.nodes {
			all |= bit(i)
		}
		l.reached.Or(all)
	}
	if l.lapsed.Load() {
		return lapsedError(c.unanswered("release", &p.op, cause, ErrLockLost))
	}
	return c.unanswered("release", &p.op, cause, nil)
}

// releaseLocked is release with l.mu held.
//
// The Release goes out to every master even when ctx has ended (it is the
// cleanup); the caller waits for the outcome no longer than ctx. With ctx
// already done, it returns at once, and a later Release does nothing more.
func (l *Lock) releaseLocked(ctx context.Context, answers *[]NodeError) error {
	c := l.c
	p := l.releasePlan()
	timeout := p.timeout
	lapsed := l.lapsed.Load()
	if ctx.Err() != nil {
		p.op.Deadline, p.op.Vals = time.Now().Add(timeout), ctx
		l.released.Store(true)
		if lapsed {
			return lapsedError(c.unanswered("release", &p.op, endedBy(ctx), ErrLockLost))
		}
		return c.unanswered("release", &p.op, endedBy(ctx), nil)
	}
	now := time.Now()
	early := now.Before(p.keyEnd) // sent while the key was ours
	rd := c.fanout(ctx, p.op, now.Add(timeout), timeout)
	defer rd.done()
	for i, n := range rd.nodes {
		switch n.Err {
		case nil:
			l.deleted.Or(bit(i))
		case ErrTaken, errAbsent:
		default: // it may run yet, or be kept and sent again
			if early {
				l.reached.Or(bit(i))
			}
		}
	}
	if answers != nil {
		*answers = append(*answers, rd.nodes...)
	}
	if rd.ok >= c.quorum {
		l.released.Store(true)
		if l.set == nil && p.kept.IsZero() {
			for i := range rd.nodes {
				if rd.nodes[i].Err == nil && rd.vals[i] == 2 { // the turn went to a queued Client
					c.handedTurn(l.target.Key(), timeout)
					break
				}
			}
		}
		l.keptUntil = p.kept
		if lapsed {
			return lapsedError(c.quorumError("release", rd, ErrLockLost))
		}
		return nil
	}
	if lapsed {
		l.released.Store(true)
		return lapsedError(c.quorumError("release", rd, ErrLockLost))
	}
	if rd.refused > len(c.nodes)-c.quorum {
		l.released.Store(true)
		return c.quorumError("release", rd, ErrLockLost)
	}
	return c.quorumError("release", rd, nil)
}

// lapsedError makes err, a Release's *QuorumError, say that the lock was
// lost because its validity had ended before the first Release began,
// whatever the masters answered: the work may have overlapped with another
// holder's, even where the keys were still ours to delete.
// (TestReleaseAfterTheValidityEndedSaysLost)
func lapsedError(err error) error {
	var qe *QuorumError
	if errors.As(err, &qe) {
		qe.kind, qe.why = ErrLockLost, "the validity had ended before Release began"
	}
	return err
}
