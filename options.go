package redlock

import (
	"fmt"
	"time"
)

// Defaults. The node timeout default follows the Redis documentation's
// advice: small compared to the TTL, so a dead master costs little of the
// validity.
const (
	DefaultDriftFactor    = 0.01
	maxDefaultNodeTimeout = 500 * time.Millisecond
	// driftFloor is added to every drift allowance: 1 ms for Redis's
	// expiry precision and 1 ms of minimum clock drift.
	driftFloor = 2 * time.Millisecond
	// MinNodeTimeout is the least time a request to one master is given:
	// the default node timeout is never shorter, WithNodeTimeout refuses a
	// shorter one, and a TTL must leave more validity than it after the
	// drift allowance. A Client's first request to a master also dials it
	// (a TCP connect, go-redis's handshake, and the round trip in which the
	// lane learns its connection) before the request's own round trip. On
	// a loopback under the race detector that first Obtain took about 1ms,
	// and up to 16ms with the machine's two cores loaded several times
	// over; a LAN adds a fraction of a millisecond per round trip.
	// (TestTTLBelowTheFloorIsRefused, TestTTLAtTheFloorObtainsOnAFreshClient)
	MinNodeTimeout = 20 * time.Millisecond
)

// An Option configures [New] and [NewSingle].
type Option interface{ apply(*config) }

type config struct {
	driftFactor float64
	keyPrefix   string
	nodeTimeout time.Duration // 0: ttl/10, at least MinNodeTimeout, at most 500ms
	fencing     bool
	obs         Observer
	obsSet      bool
	reuse       bool // obs is a TransientObserver: its events are reused (observe.go)
	// WithReplicaAcks: replicas that must acknowledge each grant, and how
	// long a master waits for them (whole milliseconds); 0 without.
	acks    int
	ackWait time.Duration
	acksSet bool
	// backlog is WithRenewalBacklogLimit's limit; 0 without.
	backlog    time.Duration
	backlogSet bool
	// anyClient lets New take masters whose clients it would refuse
	// (checkClientOptions): a test's setting, export_test.go.
	anyClient bool
}

func defaultConfig() config { return config{driftFactor: DefaultDriftFactor} }

func (c *config) check() error {
	if !(c.driftFactor >= 0 && c.driftFactor < 1) { // also rejects NaN
		return invalid("drift factor must be in [0, 1), got %v", c.driftFactor)
	}
	if c.nodeTimeout < 0 {
		return invalid("node timeout must be > 0")
	}
	if c.nodeTimeout > 0 && c.nodeTimeout < MinNodeTimeout {
		return invalid("node timeout %v is below the floor of %v: a Client's first request to a master also dials it (a TCP connect, go-redis's handshake, a round trip to learn the connection), and must fit in it", c.nodeTimeout, MinNodeTimeout)
	}
	if c.obsSet && c.obs == nil {
		return invalid("nil observer")
	}
	if c.backlogSet && c.backlog <= 0 {
		return invalid("renewal backlog limit must be > 0, got %v (leave the option out for none)", c.backlog)
	}
	if c.acksSet {
		if c.acks < 1 {
			return invalid("replica acknowledgements: at least 1 replica, got %d (leave the option out for none)", c.acks)
		}
		if c.ackWait < time.Millisecond {
			return invalid("replica acknowledgement timeout must be at least 1ms, got %v", c.ackWait)
		}
		if r := c.ackWait % time.Millisecond; r != 0 {
			c.ackWait += time.Millisecond - r
		}
		if c.nodeTimeout > 0 && c.ackWait >= c.nodeTimeout {
			return invalid("replica acknowledgement timeout %v must be shorter than the node timeout %v: the write and its WAIT share one request to the master", c.ackWait, c.nodeTimeout)
		}
	}
	return nil
}

// checkAcks validates the acknowledgement timeout against the node timeout
// of a lock of ttl (the default node timeout depends on the TTL).
func (c *config) checkAcks(ttl time.Duration) error {
	if t := c.timeout(ttl); c.ackWait >= t {
		return invalid("replica acknowledgement timeout %v must be shorter than the node timeout %v of a %v TTL: the write and its WAIT share one request to the master; set WithNodeTimeout, or a longer TTL", c.ackWait, t, ttl)
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
	return min(max(ttl/10, MinNodeTimeout), maxDefaultNodeTimeout)
}

// checkTTLFloor refuses a TTL (whole milliseconds) that cannot be obtained on a
// Client's first request to a master: one whose validity after the drift
// allowance is no longer than MinNodeTimeout, the time that request is
// given to dial the master and be answered. Any grant would come too late
// to leave validity, and the call would fail as if the masters were down.
// (TestTTLBelowTheFloorIsRefused)
func (c *config) checkTTLFloor(ttl time.Duration) error {
	if c.workable(ttl) {
		return nil
	}
	least := ""
	for t := ttl + time.Millisecond; t <= time.Minute; t += time.Millisecond {
		if c.workable(t) {
			least = fmt.Sprintf("; use a TTL of at least %v", t)
			break
		}
	}
	d := c.drift(ttl)
	return invalid("ttl %v is too short: after the drift allowance of %v it leaves %v of validity, no more than the %v a request to a master is given at least (the first one also dials it)%s", ttl, d, max(0, ttl-d), MinNodeTimeout, least)
}

// workable reports whether a lock of ttl keeps validity past a request
// that took MinNodeTimeout.
func (c *config) workable(ttl time.Duration) bool {
	return ttl-c.drift(ttl) > MinNodeTimeout
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

func (d nodeTimeout) apply(c *config) { c.nodeTimeout = positive(time.Duration(d)) }

// WithNodeTimeout bounds one request to one master. Default ttl/10, at
// least [MinNodeTimeout] (20ms) and at most 500ms; it must be at least
// MinNodeTimeout: a Client's first request to a master also dials it (a TCP
// connect, go-redis's handshake, a round trip to learn the connection) and
// must be answered within it. Keep it well under the TTL: a request that
// times out on every master costs that much of the lock's validity.
//
// A lock's TTL must leave more than MinNodeTimeout of validity after the
// drift allowance (ttl*factor + 2ms): 23ms at the default drift factor.
// Every call that takes a TTL refuses a shorter one (ErrInvalidArgument,
// with the least TTL that works): its grants could not arrive in time.
func WithNodeTimeout(d time.Duration) Option { return nodeTimeout(d) }

type renewalBacklogLimit time.Duration

func (d renewalBacklogLimit) apply(c *config) { c.backlog, c.backlogSet = time.Duration(d), true }

// WithRenewalBacklogLimit bounds how far behind the Client's watchdogs may
// fall before it takes no more locks: while the renewal a watchdog last
// began was more than d past its time (see [BacklogEvent]), Obtain (and
// Do, DoMulti) fails at once, without asking the masters, with an error
// matching [ErrRenewalsLate] and [ErrNotObtained], and never
// [ErrUnavailable]: the
// masters are not at fault, the Client is overloaded (more locks held
// than its CPU renews in time). A new lock would only add renewals it
// cannot make, and each late renewal brings its lock nearer to being given
// up ([ErrLockExpiring]). Without the option Obtain never looks. d must be
// > 0; a fraction of the cancel margin of the shortest TTL held, such as
// 100ms, tells the overload before any lock is given up. A
// [BacklogEvent] tells an Observer when renewals fall behind and catch up,
// with or without it.
func WithRenewalBacklogLimit(d time.Duration) Option { return renewalBacklogLimit(d) }

type fencing struct{}

func (fencing) apply(c *config) { c.fencing = true }

// WithFencing gives every lock a fencing token, [Lock.Fence]: on each master
// the acquire also increments a counter kept beside the lock key, in the
// same Redis Cluster hash slot ("{key}:fence", or key+":fence" when the key
// has a hash tag), and the lock's fence is the largest counter among the
// masters that acquired, the others raised to it before Obtain returns.
// Counters never expire: one small key per lock key per master. Default off.
func WithFencing() Option { return fencing{} }

type replicaAcks struct {
	n       int
	timeout time.Duration
}

func (a replicaAcks) apply(c *config) { c.acks, c.ackWait, c.acksSet = a.n, a.timeout, true }

// WithReplicaAcks makes a master's grant count only once at least replicas
// of its replicas acknowledged it within timeout: after the acquire, and
// after every Extend (a watchdog's renewals included), the master's
// connection runs Redis's WAIT replicas timeout, and a master whose WAIT
// answers fewer counts as failed for that request (a [*ReplicaError] with
// how many acknowledged). It is for a master that fails over to its
// replicas (Sentinel): a replica promoted before it received the lock key
// would let a second holder in. Default off: nothing is waited for.
//
// What it does not do: WAIT does not make Redis strongly consistent. When
// a master has more replicas than the number asked for, a failover can
// still promote one that missed the write (Sentinel picks by its own
// rules, not by who acknowledged); an acknowledgement means the replica
// received the write, not that it wrote it to disk, so a replica that
// restarts without persistence loses the key; and a replica promoted after
// the lock's key expired on it holds nothing, as the master would not.
// Ask for as many replicas as every master has, so that whichever is
// promoted has the key; the price is that a master with a replica down
// grants nothing until it is back (or the replica is removed).
//
// WAITAOF (an fsync on the master and its replicas) is not used: it exists
// only from Redis 7.2, and it counts only replicas that run AOF, so on the
// common setup without AOF on replicas it would refuse every grant.
//
// A failed acquire is undone like any failed attempt: the key is released
// on the masters that granted it, so a later Obtain is not refused by a
// grant that never counted. A failed Extend is a failure, not a refusal: it
// matches [ErrUnavailable], never lengthens the validity and shortens it as
// any failed Extend does (see [Lock.Extend]). Releases are not waited for:
// a replica that missed one keeps the key until its TTL, a delay, not a
// second holder. Nor are [Client.WaitReleased]'s looks at a key, which
// grant nothing.
//
// It is an Option, for the whole Client, rather than an ObtainOption: the
// replicas are a property of the masters, not of one lock, and a lock's
// every renewal (a watchdog's too, which takes no options) must wait as
// its acquire did. With [New] every master waits for replicas of its own;
// a master with fewer replicas never grants. The requests of one batch
// share one WAIT at its end (WAIT covers every earlier write of the
// connection), so locks pay one WAIT per batch, and a Client without the
// option sends none. The WAIT blocks the master's connection, so other
// requests of the same batch (Releases) wait for it too.
//
// timeout is rounded up to whole milliseconds and must be shorter than the
// node timeout (checked by New with [WithNodeTimeout], else by each call
// against the TTL's default node timeout): the write and its WAIT share one
// request's deadline. Leave 100ms more: Redis answers a WAIT that timed out
// on its next cron tick (up to 100ms late at the default hz), and a WAIT
// is cut (down to half the time the request has left) so that its answer
// arrives before the request's deadline; an answer past it costs the
// connection (a fresh one is taken). The error says how long the master
// was given. replicas must be >= 1. The masters' users need WAIT
// allowed by their ACL. A Redis Cluster master is refused: go-redis sends a
// keyless WAIT in a Cluster pipeline to a shard of its choosing, on a pooled
// connection, so it cannot be made to follow the write.
func WithReplicaAcks(replicas int, timeout time.Duration) Option {
	return replicaAcks{replicas, timeout}
}

// An ObtainOption configures one call: how [Client.Obtain] retries
// ([WithRetry]), what its token says of the holder ([WithHolderInfo]), and
// how [Client.Do], [Lock.Do] and [Lock.KeepAlive] keep the lock
// ([WithRenewEvery], [WithMaxHold]). An option the call does not
// use is an error matching [ErrInvalidArgument], not silently ignored.
type ObtainOption interface{ applyObtain(*obtainConfig) }

type obtainConfig struct {
	retry       RetryStrategy // NoRetry unless set
	retrySet    bool
	wait        bool          // WithWait
	holdAtLeast time.Duration // 0: Release deletes at once
	renewEvery  time.Duration // 0: ttl/3
	maxHold     time.Duration // 0: no cap
	margin      time.Duration // WithCancelMargin, when marginSet
	marginSet   bool
	tell        time.Duration // the cancel margin in force: set by checkWatchdog
	set         *keySet       // the keys of ObtainMulti and DoMulti; nil for one key
	// holderInfo is WithHolderInfo's info, holderSet whether it was given;
	// tokenTail, once obtainOptions checked them, is what follows the
	// random part of every token the call makes (holderTail): "" without.
	holderInfo string
	holderSet  bool
	tokenTail  string
}

// The calls that take ObtainOptions, by what they use.
type optionUse uint8

const (
	forObtain   optionUse = 1 << iota // WithRetry
	forWatchdog                       // WithRenewEvery, WithMaxHold, WithCancelMargin
	forSet                            // ObtainMulti, DoMulti: not WithWait
)

// obtainOptions applies opts for a call that uses what use says.
func obtainOptions(opts []ObtainOption, use optionUse) (obtainConfig, error) {
	if len(opts) == 0 { // applying options moves oc to the heap
		return obtainConfig{retry: oneAttempt}, nil
	}
	oc := obtainConfig{retry: oneAttempt}
	for _, o := range opts {
		if o == nil {
			return oc, invalid("nil option")
		}
		o.applyObtain(&oc)
	}
	if oc.retrySet {
		if use&forObtain == 0 {
			return oc, invalid("WithRetry applies to Obtain and Do, which wait for the lock; this call does not")
		}
		if err := checkStrategy(oc.retry); err != nil {
			return oc, err
		}
	}
	if oc.wait && use&forObtain == 0 {
		return oc, invalid("WithWait applies to Obtain and Do, which wait for the lock; this call does not")
	}
	if oc.wait && use&forSet != 0 {
		return oc, invalid("WithWait applies to a lock on one key (Obtain, Do); ObtainMulti and DoMulti wait for a set with WithRetry")
	}
	if oc.wait && oc.retrySet {
		return oc, invalid("WithWait and WithRetry both say how to wait for the lock: pass one")
	}
	if oc.holdAtLeast != 0 && use&forObtain == 0 {
		return oc, invalid("WithHoldAtLeast applies to Obtain and Do, which take the lock; this call does not")
	}
	if oc.holdAtLeast < 0 {
		return oc, invalid("hold-at-least must be > 0")
	}
	if (oc.renewEvery != 0 || oc.maxHold != 0 || oc.marginSet) && use&forWatchdog == 0 {
		return oc, invalid("WithRenewEvery, WithMaxHold and WithCancelMargin apply to Do and KeepAlive, which renew the lock; Obtain does not")
	}
	if oc.holderSet {
		if use&forObtain == 0 {
			return oc, invalid("WithHolderInfo applies to Obtain, Do, ObtainMulti and DoMulti, which make the lock's token; this call does not")
		}
		if len(oc.holderInfo) > maxHolderInfo {
			return oc, invalid("holder info is %d bytes, more than the limit of %d", len(oc.holderInfo), maxHolderInfo)
		}
		oc.tokenTail = holderTail(oc.holderInfo)
	}
	return oc, nil
}

// checkWatchdog validates the options of Do and KeepAlive for a lock of ttl.
func (c *obtainConfig) checkWatchdog(ttl time.Duration, cfg *config) error {
	if c.renewEvery < 0 || c.renewEvery >= ttl {
		return invalid("renewal interval must be in (0, ttl %v), got %v", ttl, c.renewEvery)
	}
	// The first renewal starts after renewEvery and may take a node
	// timeout (a third of the validity at most, for huge node timeouts);
	// it must end before the validity does, or holds are lost on healthy
	// masters.
	if valid, margin := ttl-cfg.drift(ttl), renewMargin(ttl, cfg); c.renewEvery > 0 && c.renewEvery+margin >= valid {
		return invalid("renewal interval %v leaves %v before the validity of a %v TTL ends (%v), less than the %v a renewal may take: renew at most every %v", c.renewEvery, max(0, valid-c.renewEvery), ttl, valid, margin, max(0, valid-margin-time.Millisecond))
	}
	if c.maxHold < 0 {
		return invalid("max hold time must be > 0, got %v", c.maxHold)
	}
	tell, err := c.cancelMargin(ttl, cfg)
	c.tell = tell
	return err
}

// renewMargin is the time a renewal of a lock of ttl must be given before
// its validity ends: a node timeout, capped at a third of the validity.
func renewMargin(ttl time.Duration, cfg *config) time.Duration {
	return min(cfg.timeout(ttl), (ttl-cfg.drift(ttl))/3)
}

type withRetry struct{ s RetryStrategy }

func (w withRetry) applyObtain(c *obtainConfig) { c.retry, c.retrySet = w.s, true }

// WithRetry sets how Obtain retries after a failed attempt. Default
// [NoRetry]: one attempt. Retries never outlast the context's deadline.
func WithRetry(s RetryStrategy) ObtainOption { return withRetry{s} }

type withWait struct{}

func (withWait) applyObtain(c *obtainConfig) { c.wait = true }

// WithWait makes Obtain (and Do) wait for the lock until it is obtained or
// ctx ends, without polling. A waiter that finds the key held marks it as
// waited for (the key's value becomes the holder's token followed by "!"
// and the ids of the Clients waiting, the key's turn queue), and the
// release of a marked key is published on the master's wake
// channel ("redlock:wake"; on a Redis Cluster master, SPUBLISH on a
// channel named like the key); the waiter tries again when enough masters
// announced the release for a quorum to be free, or when a quorum of the
// keys that refused it could have expired, whichever comes first, so a
// lost announcement costs at most the holder's remaining TTL. The release
// reserves nothing: the key is free for whoever asks first, a try-once
// Obtain included.
//
// Order: the waiters of one Client and key take turns in the order they
// began to wait, and only the first of them asks the masters; across
// Clients, a release gives the turn to the first Client of the key's turn
// queue, which asks at once, and the others let it ask first. The turn
// reserves nothing either: a try-once Obtain may take the key first, and a
// Client whose turn goes unused holds the others up for a tenth of the
// node timeout (2 to 50 ms) at most. At
// N > 1 a woken waiter asks one master first (the same for every Client
// that names the masters alike) and the others once it granted, so that
// waiters woken together do not split the masters between them.
//
// Give ctx a deadline to bound the wait; [Client.Close] ends it
// ([ErrClosed]). The masters must allow PUBLISH and SUBSCRIBE (SPUBLISH and
// SSUBSCRIBE, Redis 7, on a Redis Cluster) to the clients' users; a Client
// keeps one subscription per master (per key on a Cluster) while it has
// waiters, and 2s after. It cannot be combined with [WithRetry].
//
// A key held by a lock on several keys ([Client.ObtainMulti]) is waited for
// like any other: the set's Release announces each of its keys a waiter
// marked. [Client.ObtainMulti] and [Client.DoMulti] themselves refuse
// WithWait ([ErrInvalidArgument]), also for a set of one key: a set waits
// with [WithRetry].
func WithWait() ObtainOption { return withWait{} }

type holderInfoOption string

func (h holderInfoOption) applyObtain(c *obtainConfig) { c.holderInfo, c.holderSet = string(h), true }

// WithHolderInfo puts info, a free text that says who holds the lock (a
// host, a process, a job), in the token of the lock the call obtains, so
// that [Client.Inspect] ([MasterState.HolderInfo]), the `redlock status`
// command and [Lock.HolderInfo] show it, and `redis-cli GET` of the key
// too. It applies to [Client.Obtain] (also WithWait), [Client.Do],
// [Client.ObtainMulti] and [Client.DoMulti]; [Lock.Do] and [Lock.KeepAlive]
// refuse it, as their lock has its token already.
//
// The token stays its 128 random bits from crypto/rand, 22 characters of
// URL-safe base64, followed by "~" and the info escaped: '%', '!' (the
// mark a waiter appends to a held key's value, see [WithWait]), '~',
// control characters and bytes of invalid UTF-8 are percent-encoded
// ("%21"), everything else (spaces, '=', UTF-8) stays readable. The info
// is no secret: whoever can read the key reads it. Every request of the
// lock carries the token, so keep the info short: at most 256 bytes
// (before escaping), or the call fails with an error matching
// [ErrInvalidArgument] before any request. Empty info means none: the
// token is the random part alone, as without the option.
func WithHolderInfo(info string) ObtainOption { return holderInfoOption(info) }

type renewEvery time.Duration

func (d renewEvery) applyObtain(c *obtainConfig) { c.renewEvery = positive(time.Duration(d)) }

// WithRenewEvery sets how often [Client.Do], [Lock.Do] and [Lock.KeepAlive]
// renew the lock. Default ttl/3. It must be > 0 and leave a renewal time to
// complete before the validity ends: at most ttl minus the drift allowance
// minus a node timeout (a third of the validity at most). After a failed
// renewal the watchdog retries sooner, until the validity runs out.
// [Client.Obtain] refuses it.
func WithRenewEvery(d time.Duration) ObtainOption { return renewEvery(d) }

type maxHold time.Duration

func (d maxHold) applyObtain(c *obtainConfig) { c.maxHold = positive(time.Duration(d)) }

// WithMaxHold caps the total time [Client.Do] and [Lock.KeepAlive] keep a
// lock: once d has passed since the lock was obtained, renewals stop and the
// work context is cancelled with a cause matching [ErrLockLost], so a stuck
// worker cannot hold a lock forever (the Redis documentation's liveness
// advice). Default: no cap; must be > 0. [Client.Obtain] refuses it.
func WithMaxHold(d time.Duration) ObtainOption { return maxHold(d) }

type holdAtLeast time.Duration

func (d holdAtLeast) applyObtain(c *obtainConfig) { c.holdAtLeast = positive(time.Duration(d)) }

// WithHoldAtLeast keeps the lock for at least d from when it was obtained,
// also when it is released sooner: a Release (and Do's) before then leaves
// the key in place, its TTL set to what remains of d, instead of deleting
// it, and [Lock.KeptUntil] says until when. It is ShedLock's "lock at least
// for": every replica runs the same schedule on clocks a little apart, and a
// job that ends fast must not let a replica whose timer fires late run it a
// second time. Keep d below the schedule's period. Default 0 (Release
// deletes at once); must be > 0.
func WithHoldAtLeast(d time.Duration) ObtainOption { return holdAtLeast(d) }

// positive maps d <= 0 to -1, which the checks reject (0 means "default").
func positive(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
