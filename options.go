package redlock

import "time"

// Defaults. The node timeout default follows the Redis documentation's
// advice: small compared to the TTL, so a dead master costs little of the
// validity.
const (
	DefaultDriftFactor    = 0.01
	maxDefaultNodeTimeout = 500 * time.Millisecond
	// driftFloor is added to every drift allowance: 1 ms for Redis's
	// expiry precision and 1 ms of minimum clock drift.
	driftFloor = 2 * time.Millisecond
)

// An Option configures [New] and [NewSingle].
type Option interface{ apply(*config) }

type config struct {
	driftFactor float64
	keyPrefix   string
	nodeTimeout time.Duration // 0: ttl/10, at most 500ms
}

func defaultConfig() config { return config{driftFactor: DefaultDriftFactor} }

func (c *config) check() error {
	if !(c.driftFactor >= 0 && c.driftFactor < 1) { // also rejects NaN
		return invalid("drift factor must be in [0, 1), got %v", c.driftFactor)
	}
	if c.nodeTimeout < 0 {
		return invalid("node timeout must be > 0, got %v", c.nodeTimeout)
	}
	return nil
}

// drift is the clock-drift allowance subtracted from a lock's validity.
func (c *config) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.driftFactor) + driftFloor
}

// timeout bounds one request to one master for a lock of the given TTL.
func (c *config) timeout(ttl time.Duration) time.Duration {
	if c.nodeTimeout > 0 {
		return c.nodeTimeout
	}
	return min(ttl/10, maxDefaultNodeTimeout)
}

type driftFactor float64

func (f driftFactor) apply(c *config) { c.driftFactor = float64(f) }

// WithDriftFactor sets the share of the TTL allowed for clock drift between
// the client and the masters: validity = ttl - elapsed - (ttl*f + 2ms).
// Default 0.01; must be in [0, 1).
func WithDriftFactor(f float64) Option { return driftFactor(f) }

type keyPrefix string

func (p keyPrefix) apply(c *config) { c.keyPrefix = string(p) }

// WithKeyPrefix puts p before every lock key in Redis, so lock keys cannot
// collide with data keys. Default none. For a Redis Cluster, the prefix is
// part of the key's hash slot unless the key carries its own hash tag.
func WithKeyPrefix(p string) Option { return keyPrefix(p) }

type nodeTimeout time.Duration

func (d nodeTimeout) apply(c *config) {
	if d <= 0 {
		c.nodeTimeout = -1 // rejected by check; 0 would mean the default
		return
	}
	c.nodeTimeout = time.Duration(d)
}

// WithNodeTimeout bounds one request to one master. Default ttl/10, at most
// 500ms; must be > 0. Keep it well under the TTL: a request that times out on
// every master costs that much of the lock's validity.
func WithNodeTimeout(d time.Duration) Option { return nodeTimeout(d) }

// An ObtainOption configures one [Client.Obtain].
type ObtainOption interface{ applyObtain(*obtainConfig) }

type obtainConfig struct {
	retry RetryStrategy
}

type withRetry struct{ s RetryStrategy }

func (w withRetry) applyObtain(c *obtainConfig) { c.retry = w.s }

// WithRetry sets how Obtain retries after a failed attempt. Default
// [NoRetry]: one attempt. Retries never outlast the context's deadline.
func WithRetry(s RetryStrategy) ObtainOption { return withRetry{s} }
