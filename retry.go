package redlock

import (
	"math/rand/v2"
	"time"
)

// A RetryStrategy says whether and how long to wait before each further
// attempt of [Client.Obtain] (and [Client.Do]). Implement it to retry your
// own way; the built-ins ([LinearBackoff], [ExponentialBackoff],
// [LimitRetry], [NoRetry]) are ordinary implementations.
//
// A strategy is called by many Obtains at once: keep it free of per-call
// state (the attempt number and the last error come as arguments), so that
// one value may be shared. Whatever it answers, Obtain never waits past its
// context's deadline (a wait that would end after it is not started) nor
// after [Client.Close].
type RetryStrategy interface {
	// NextWait returns the pause before the next attempt, given the number
	// of attempts made so far (1 after the first) and the error the last
	// one failed with (it matches [ErrNotObtained], and [ErrTaken] or
	// [ErrUnavailable]); false stops retrying, and Obtain returns that
	// error.
	NextWait(attempts int, last error) (time.Duration, bool)
}

// checker is implemented by strategies whose parameters can be wrong;
// Obtain checks them before any request.
type checker interface{ check() error }

func checkStrategy(s RetryStrategy) error {
	if s == nil {
		return invalid("nil retry strategy")
	}
	if c, ok := s.(checker); ok {
		return c.check()
	}
	return nil
}

// NoRetry makes one attempt. It is the default.
func NoRetry() RetryStrategy { return noRetry{} }

type noRetry struct{}

var oneAttempt RetryStrategy = noRetry{} // boxed once

func (noRetry) NextWait(int, error) (time.Duration, bool) { return 0, false }

// LinearBackoff retries after about d each time: every wait is drawn
// uniformly from [d/2, 3d/2), so contenders that failed together do not
// retry together. It retries until the context ends, which for a context
// without a deadline means until the lock is obtained or the Client
// closes; bound it with a deadline or with [LimitRetry]. d must be > 0.
func LinearBackoff(d time.Duration) RetryStrategy { return linear(d) }

// ExponentialBackoff retries after waits that double from min up to max,
// each drawn uniformly from [w/2, w) for the current step w. Like
// [LinearBackoff] it retries until the context ends. It requires 0 < min
// <= max.
func ExponentialBackoff(min, max time.Duration) RetryStrategy { return exponential{min, max} }

// LimitRetry bounds s to attempts in all, the first one included:
// LimitRetry(LinearBackoff(d), 3) makes at most 3 attempts. attempts must
// be >= 1.
func LimitRetry(s RetryStrategy, attempts int) RetryStrategy {
	return limit{s: s, attempts: attempts}
}

type linear time.Duration

func (d linear) NextWait(int, error) (time.Duration, bool) {
	return jitter(time.Duration(d)/2, time.Duration(d)), true
}

func (d linear) check() error {
	if d <= 0 {
		return invalid("LinearBackoff needs a positive delay, got %v", time.Duration(d))
	}
	return nil
}

type exponential struct{ min, max time.Duration }

func (e exponential) NextWait(n int, _ error) (time.Duration, bool) {
	w := e.min
	for i := 1; i < n && w < e.max; i++ {
		w *= 2
	}
	w = min(w, e.max)
	return jitter(w/2, w/2), true
}

func (e exponential) check() error {
	if e.min <= 0 || e.max < e.min {
		return invalid("ExponentialBackoff needs 0 < min <= max, got min %v max %v", e.min, e.max)
	}
	return nil
}

type limit struct {
	s        RetryStrategy
	attempts int
}

func (l limit) NextWait(n int, last error) (time.Duration, bool) {
	if n >= l.attempts {
		return 0, false
	}
	return l.s.NextWait(n, last)
}

func (l limit) check() error {
	if l.s == nil {
		return invalid("LimitRetry needs a strategy, got nil")
	}
	if l.attempts < 1 {
		return invalid("LimitRetry needs attempts >= 1, got %d", l.attempts)
	}
	if l.attempts == 1 {
		return nil // the inner strategy is never asked
	}
	return checkStrategy(l.s)
}

// jitter returns base plus a uniform draw from [0, spread).
func jitter(base, spread time.Duration) time.Duration {
	if spread <= 0 {
		return base
	}
	return base + rand.N(spread)
}
