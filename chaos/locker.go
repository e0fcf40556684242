package chaos

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

// A Locker is the lock under test as the scenarios drive it. [Redlock]
// adapts the library's Client; the suite's mutation checks drive
// deliberately broken locks through the same interface, to show that every
// MUST check fails when the property it backs is broken.
type Locker interface {
	// Obtain takes key for ttl, or fails with an error matching
	// redlock.ErrNotObtained.
	Obtain(ctx context.Context, key string, ttl time.Duration, opts ...Opt) (Held, error)
	// ObtainMulti takes every key of keys for ttl, all or none, as one
	// lock (redlock's Client.ObtainMulti), or fails with an error matching
	// redlock.ErrNotObtained.
	ObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...Opt) (Held, error)
	// Do runs fn under the lock while a watchdog renews it (redlock's
	// Client.Do).
	Do(ctx context.Context, key string, ttl time.Duration, fn func(context.Context) error, opts ...Opt) error
	// DoMulti is Do on a set of keys (redlock's Client.DoMulti).
	DoMulti(ctx context.Context, keys []string, ttl time.Duration, fn func(context.Context) error, opts ...Opt) error
	// WaitReleased waits until key is free on a quorum (redlock's
	// Client.WaitReleased).
	WaitReleased(ctx context.Context, key string) error
	// Attach and AttachMulti take over a lock held under token (redlock's
	// Client.Attach, Client.AttachMulti): a hand-over between clients.
	Attach(ctx context.Context, key, token string, ttl time.Duration, fence int64) (Held, error)
	AttachMulti(ctx context.Context, keys []string, token string, ttl time.Duration, fence int64) (Held, error)
	// Close ends the locker's work (redlock's Client.Close).
	Close() error
}

// A Held lock (redlock's *Lock).
type Held interface {
	Key() string
	Keys() []string
	Token() string
	Fence() int64
	Validity() time.Duration
	Extend(ctx context.Context, ttl time.Duration) error
	Release(ctx context.Context) error
	KeepAlive(ctx context.Context, opts ...Opt) (context.Context, func(), error)
	// Do runs fn while a watchdog renews the lock, then releases it
	// (redlock's Lock.Do).
	Do(ctx context.Context, fn func(context.Context) error, opts ...Opt) error
	// KeptUntil is, after an early Release of a lock held at least for a
	// while, until when the masters keep its key (redlock's
	// Lock.KeptUntil); zero otherwise.
	KeptUntil() time.Time
}

// Opts are the per-call options the scenarios use.
type Opts struct {
	Retry      time.Duration // retry after about this long (redlock.LinearBackoff); 0: one attempt
	RenewEvery time.Duration // the watchdog's interval; 0: the lock's default
	Wait       bool          // wait for a release until the context ends (redlock.WithWait)
	// HoldAtLeast keeps the key at least this long from the grant, also
	// when released sooner (redlock.WithHoldAtLeast).
	HoldAtLeast time.Duration
	// CancelMargin: the watchdog cancels the work once the validity left
	// is down to this while renewals fail (redlock.WithCancelMargin); 0:
	// the lock's default.
	CancelMargin time.Duration
}

// An Opt sets one of Opts.
type Opt func(*Opts)

// RetryEvery retries a failed attempt after about d (d/2 to 3d/2), until
// the context ends.
func RetryEvery(d time.Duration) Opt { return func(o *Opts) { o.Retry = d } }

// Wait waits for the lock until the context ends, woken by the holder's
// release (redlock.WithWait).
func Wait() Opt { return func(o *Opts) { o.Wait = true } }

// HoldAtLeast keeps the key at least d from the grant
// (redlock.WithHoldAtLeast).
func HoldAtLeast(d time.Duration) Opt { return func(o *Opts) { o.HoldAtLeast = d } }

// RenewEvery sets the watchdog's interval.
func RenewEvery(d time.Duration) Opt { return func(o *Opts) { o.RenewEvery = d } }

// CancelMargin sets the validity left at which the watchdog tells the work
// while renewals fail (redlock.WithCancelMargin).
func CancelMargin(d time.Duration) Opt { return func(o *Opts) { o.CancelMargin = d } }

// Collect applies opts.
func Collect(opts []Opt) Opts {
	var o Opts
	for _, f := range opts {
		f(&o)
	}
	return o
}

// A LockConfig is what a Locker is built with.
type LockConfig struct {
	NodeTimeout time.Duration // 0: the lock's default
	Prefix      string
	Fencing     bool
	// ReplicaAcks, with AckWait: a grant counts only once that many of the
	// master's replicas acknowledged it within AckWait (redlock's
	// WithReplicaAcks); 0: none.
	ReplicaAcks int
	AckWait     time.Duration
	// OnExtend, if set, hears of every Extend and renewal of the lock's,
	// with the context it ran with (a renewal's carries its watchdog's
	// values), when its requests were first sent (about) and the end of the
	// validity they were sent for. Not of an Attach: its caller records
	// it, a failed one included, which returns no lock.
	OnExtend func(ctx context.Context, start, served time.Time)
}

// A NewLocker builds a Locker over masters; one master means a
// single-instance lock.
type NewLocker func(masters []redis.UniversalClient, cfg LockConfig) (Locker, error)

// Redlock is the library: redlock.New over the masters, or redlock.NewSingle
// over one.
func Redlock(masters []redis.UniversalClient, cfg LockConfig) (Locker, error) {
	opts := []redlock.Option{redlock.WithKeyPrefix(cfg.Prefix)}
	if cfg.NodeTimeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(cfg.NodeTimeout))
	}
	if cfg.Fencing {
		opts = append(opts, redlock.WithFencing())
	}
	if cfg.ReplicaAcks > 0 {
		opts = append(opts, redlock.WithReplicaAcks(cfg.ReplicaAcks, cfg.AckWait))
	}
	if cfg.OnExtend != nil {
		opts = append(opts, redlock.WithObserver(extendObserver(cfg.OnExtend)))
	}
	var c *redlock.Client
	var err error
	if len(masters) == 1 {
		c, err = redlock.NewSingle(masters[0], opts...)
	} else {
		c, err = redlock.New(masters, opts...)
	}
	if err != nil {
		return nil, err
	}
	return libLocker{c}, nil
}

type libLocker struct{ c *redlock.Client }

func obtainOpts(opts []Opt) []redlock.ObtainOption {
	o := Collect(opts)
	var out []redlock.ObtainOption
	if o.Retry > 0 {
		out = append(out, redlock.WithRetry(redlock.LinearBackoff(o.Retry)))
	}
	if o.Wait {
		out = append(out, redlock.WithWait())
	}
	if o.RenewEvery > 0 {
		out = append(out, redlock.WithRenewEvery(o.RenewEvery))
	}
	if o.HoldAtLeast > 0 {
		out = append(out, redlock.WithHoldAtLeast(o.HoldAtLeast))
	}
	if o.CancelMargin > 0 {
		out = append(out, redlock.WithCancelMargin(o.CancelMargin))
	}
	return out
}

// extendObserver hands every Extend and renewal to a LockConfig's
// OnExtend: the call began Latency before the event (Observe runs right
// after it returns), for the validity it had then (Before).
type extendObserver func(ctx context.Context, start, served time.Time)

func (f extendObserver) Observe(ctx context.Context, e redlock.Event) {
	if ev, ok := e.(*redlock.ExtendEvent); ok {
		start := time.Now().Add(-ev.Latency)
		f(ctx, start, start.Add(ev.Before))
	}
}

func (l libLocker) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...Opt) (Held, error) {
	lock, err := l.c.Obtain(ctx, key, ttl, obtainOpts(opts)...)
	if err != nil {
		return nil, err
	}
	return libHeld{lock}, nil
}

func (l libLocker) ObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...Opt) (Held, error) {
	lock, err := l.c.ObtainMulti(ctx, keys, ttl, obtainOpts(opts)...)
	if err != nil {
		return nil, err
	}
	return libHeld{lock}, nil
}

func (l libLocker) Do(ctx context.Context, key string, ttl time.Duration, fn func(context.Context) error, opts ...Opt) error {
	return l.c.Do(ctx, key, ttl, fn, obtainOpts(opts)...)
}

func (l libLocker) DoMulti(ctx context.Context, keys []string, ttl time.Duration, fn func(context.Context) error, opts ...Opt) error {
	return l.c.DoMulti(ctx, keys, ttl, fn, obtainOpts(opts)...)
}

func (l libLocker) WaitReleased(ctx context.Context, key string) error {
	return l.c.WaitReleased(ctx, key)
}

func (l libLocker) Attach(ctx context.Context, key, token string, ttl time.Duration, fence int64) (Held, error) {
	lock, err := l.c.Attach(ctx, key, token, ttl, fence)
	if err != nil {
		return nil, err
	}
	return libHeld{lock}, nil
}

func (l libLocker) AttachMulti(ctx context.Context, keys []string, token string, ttl time.Duration, fence int64) (Held, error) {
	lock, err := l.c.AttachMulti(ctx, keys, token, ttl, fence)
	if err != nil {
		return nil, err
	}
	return libHeld{lock}, nil
}

func (l libLocker) Close() error { return l.c.Close() }

type libHeld struct{ *redlock.Lock }

func (h libHeld) KeepAlive(ctx context.Context, opts ...Opt) (context.Context, func(), error) {
	return h.Lock.KeepAlive(ctx, obtainOpts(opts)...)
}

func (h libHeld) Do(ctx context.Context, fn func(context.Context) error, opts ...Opt) error {
	return h.Lock.Do(ctx, fn, obtainOpts(opts)...)
}
