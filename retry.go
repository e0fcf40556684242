package redlock

import (
	"math/rand/v2"
	"time"
)

// A RetryStrategy says how long to wait before each further attempt of
// [Client.Obtain]. Strategies are immutable values without per-call state:
// one may be shared by any number of concurrent calls. Every strategy stops
// at the context's deadline: a wait that would end past it is not started.
type RetryStrategy interface {
	// wait returns the pause before attempt n+1, given n attempts made
	// (n >= 1), and false when no further attempt is allowed.
	wait(n int) (time.Duration, bool)
	check() error
}

// NoRetry makes one attempt. It is the default.
func NoRetry() RetryStrategy { return noRetry }

var noRetry RetryStrategy = limit{s: linear(0), attempts: 1} // immutable

// LinearBackoff retries after about d each time: every wait is drawn
// uniformly from [d/2, 3d/2), so contenders that failed together do not
// retry together. It retries until the context ends; wrap it in
// [LimitRetry] to bound the attempts. d must be > 0.
func LinearBackoff(d time.Duration) RetryStrategy { return linear(d) }

// ExponentialBackoff retries after waits that double from min up to max,
// each drawn uniformly from [w/2, w) for the current step w. It retries until
// the context ends; wrap it in [LimitRetry] to bound the attempts.
// It requires 0 < min <= max.
func ExponentialBackoff(min, max time.Duration) RetryStrategy { return exponential{min, max} }

// LimitRetry bounds s to attempts in all, the first one included:
// LimitRetry(LinearBackoff(d), 3) makes at most 3 attempts. attempts must
// be >= 1.
func LimitRetry(s RetryStrategy, attempts int) RetryStrategy {
	return limit{s: s, attempts: attempts}
}

type linear time.Duration

func (d linear) wait(int) (time.Duration, bool) {
	return jitter(time.Duration(d)/2, time.Duration(d)), true
}

func (d linear) check() error {
	if d <= 0 {
		return invalid("LinearBackoff needs a positive delay, got %v", time.Duration(d))
	}
	return nil
}

type exponential struct{ min, max time.Duration }

func (e exponential) wait(n int) (time.Duration, bool) {
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

func (l limit) wait(n int) (time.Duration, bool) {
	if n >= l.attempts {
		return 0, false
	}
	return l.s.wait(n)
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
	return l.s.check()
}

// jitter returns base plus a uniform draw from [0, spread).
func jitter(base, spread time.Duration) time.Duration {
	if spread <= 0 {
		return base
	}
	return base + rand.N(spread)
}
