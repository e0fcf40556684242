package redlock

import (
	"errors"
	"fmt"
	"time"
)

// The cancel margin: the part of a lock's validity that a watchdog leaves
// the work to stop in, when renewals fail.
//
// Rules, each with the test that fails when it breaks:
//   - While renewals fail, the work's context is cancelled once the
//     validity left is down to the margin, not later, also while a renewal
//     hangs on a frozen master: a renewal is given until that point, never
//     past it (TestWorkIsToldTheMarginBeforeTheValidityEnds,
//     TestWorkIsToldTheDefaultMarginBeforeTheValidityEnds).
//   - Renewals that succeed keep the validity above the margin: healthy
//     masters never get the work cancelled early, with the default margin
//     or one near the largest allowed
//     (TestHealthyRenewalsNeverCancelTheWorkEarly).
//   - A margin below 0, of the TTL or more, or that leaves a renewal no
//     time before it is refused, by Do, Lock.Do and KeepAlive alike
//     (TestCancelMarginOutsideItsRangeIsRefused).
//   - A validity that came down to the margin without a failed renewal
//     (the caller's own Extend shortened it, a late KeepAlive) gets one
//     renewal first, given what is left of it, and is kept on healthy
//     masters (TestWatchdogFollowsAShortenedValidity).
//   - A lost lock (a refusal) still cancels the work at once with
//     ErrLockLost alone, never ErrLockExpiring
//     (TestALostLockIsNotToldAsExpiring).

// ErrLockExpiring is the cause of a watchdog's work context (that of
// [Client.Do], [Lock.Do] or [Lock.KeepAlive]) when renewals failed until
// the lock's validity was down to its cancel margin ([WithCancelMargin]).
// The lock was still valid then, for about that margin: the time the work
// has to stop before the keys can expire on the masters and another owner
// can take the lock. Such a cause matches [ErrLockLost] too, since the
// watchdog gives the lock up (no renewal follows), so code that stops on
// ErrLockLost stops on it; match ErrLockExpiring to tell it from a lock
// already lost.
var ErrLockExpiring = errors.New("redlock: lock expiring")

// maxDefaultCancelMargin caps the default cancel margin: stopping work
// rarely takes longer, and a long TTL is chosen to ride out long outages.
const maxDefaultCancelMargin = 10 * time.Second

type cancelMargin time.Duration

func (m cancelMargin) applyObtain(c *obtainConfig) { c.margin, c.marginSet = time.Duration(m), true }

// WithCancelMargin makes [Client.Do], [Lock.Do] and [Lock.KeepAlive]
// cancel the work's context once the lock's validity left is down to d
// while renewals fail (masters down, slow or frozen), instead of when the
// validity has run out: the work then has d to stop before the keys can
// expire on the masters and another owner can take the lock. The
// context's cause then matches [ErrLockExpiring] and [ErrLockLost], and
// the watchdog stops renewing. A renewal refused (another owner, the key
// gone from too many masters) still cancels the work at once, with a
// cause matching ErrLockLost alone. d = 0 cancels at the validity's end.
//
// Default: ttl/10, at most 10s, and at most half the time a failing
// renewal schedule has before it (the validity, ttl minus the drift
// allowance, minus the renewal interval, minus a node timeout). Healthy
// renewals, every ttl/3 on average (on a grid of at most ttl/24, so two
// of them may be ttl/3 + ttl/24 apart), keep the validity above 5/8 of
// the TTL, far from the margin; failing ones get the remaining half of
// the TTL or more, several tries (every ttl/12, each taking at most a
// node timeout), before the work is told: a single failed renewal never
// cancels it.
//
// d must be >= 0 and leave a renewal time to complete before the validity
// is down to it: renewal interval + node timeout (a third of the
// validity at most) + d must be under the validity, ttl minus the drift
// allowance; so also under the TTL. Otherwise the call returns an error
// matching [ErrInvalidArgument]. The renewals themselves are scheduled to
// end before the margin. The [Observer] gets a [LostEvent] with Reason
// [RanOut] and the cause. [Client.Obtain] refuses it (ErrInvalidArgument).
func WithCancelMargin(d time.Duration) ObtainOption { return cancelMargin(d) }

// cancelMargin returns the cancel margin c sets (the last
// WithCancelMargin), else the default, for a lock of ttl; an error
// matching ErrInvalidArgument when the margin set is out of range.
func (c *obtainConfig) cancelMargin(ttl time.Duration, cfg *config) (time.Duration, error) {
	every := c.renewEvery
	if every == 0 {
		every = ttl / 3
	}
	valid := ttl - cfg.drift(ttl)
	renew := renewMargin(ttl, cfg)
	if !c.marginSet {
		return max(0, min(ttl/10, maxDefaultCancelMargin, (valid-every-renew)/2)), nil
	}
	d := c.margin
	if d < 0 || d >= ttl {
		return 0, invalid("cancel margin must be in [0, ttl %v), got %v", ttl, d)
	}
	if d > 0 && every+renew+d >= valid {
		return 0, invalid("cancel margin %v leaves no time for a renewal every %v, which may take %v, before the validity of a %v TTL (%v) is down to it: at most %v", d, every, renew, ttl, valid, max(0, valid-every-renew-time.Millisecond))
	}
	return d, nil
}

// expiring is the cause of a work context whose validity left, v, is down
// to its cancel margin while renewals fail (last: the last one's error, or
// nil when none completed in time).
func expiring(v, margin time.Duration, last error) error {
	if last != nil {
		return fmt.Errorf("%w (%w): renewals failed until %v of the validity was left, within the cancel margin of %v: %w", ErrLockLost, unprefixed{ErrLockExpiring}, v.Round(time.Millisecond), margin, unprefixed{last})
	}
	return fmt.Errorf("%w (%w): no renewal completed before the validity was down to %v, within the cancel margin of %v (was the process paused?)", ErrLockLost, unprefixed{ErrLockExpiring}, v.Round(time.Millisecond), margin)
}
