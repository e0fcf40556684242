package main

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// A contender is one lock library under test. Setup gets the masters of a
// cell (fresh go-redis clients, the same options for every contender); each
// goroutine then gets its own worker.
type contender interface {
	Name() string
	// Supports reports whether the contender runs with n masters.
	Supports(n int) bool
	Setup(masters []redis.UniversalClient, ttl time.Duration) error
	NewWorker() worker
	// Close releases what Setup made; it does not close the masters.
	Close() error
}

// A worker takes and releases one lock at a time; it is used by one goroutine.
type worker interface {
	// Lock makes one attempt. It returns false and a nil error when the lock
	// is held by someone else (the attempt failed), and an error for anything else.
	Lock(ctx context.Context, key string) (bool, error)
	// Unlock releases the lock the last successful Lock took.
	Unlock(ctx context.Context) error
}

// allContenders lists every contender, in the order the report shows them.
func allContenders() []contender {
	return append(redlockContenders(), &redsyncContender{}, &redislockContender{})
}

// --- github.com/go-redsync/redsync/v4 ---

type redsyncContender struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

func (*redsyncContender) Name() string      { return "redsync" }
func (*redsyncContender) Supports(int) bool { return true }

func (c *redsyncContender) Setup(masters []redis.UniversalClient, ttl time.Duration) error {
	pools := make([]redsyncredis.Pool, len(masters))
	for i, m := range masters {
		pools[i] = goredis.NewPool(m)
	}
	c.rs = redsync.New(pools...)
	c.opts = []redsync.Option{redsync.WithTries(1), redsync.WithExpiry(ttl)}
	return nil
}

func (c *redsyncContender) NewWorker() worker { return &redsyncWorker{c: c} }
func (c *redsyncContender) Close() error      { return nil }

type redsyncWorker struct {
	c *redsyncContender
	m *redsync.Mutex
}

func (w *redsyncWorker) Lock(ctx context.Context, key string) (bool, error) {
	m := w.c.rs.NewMutex(key, w.c.opts...)
	if err := m.LockContext(ctx); err != nil {
		// With one try, a lock held elsewhere comes back as ErrTaken,
		// ErrNodeTaken (joined) or ErrFailed; a RedisError is a real failure.
		if _, ok := errors.AsType[*redsync.RedisError](err); ok {
			return false, err
		}
		return false, nil
	}
	w.m = m
	return true, nil
}

func (w *redsyncWorker) Unlock(ctx context.Context) error {
	ok, err := w.m.UnlockContext(ctx)
	w.m = nil
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("redsync: unlock not confirmed by a quorum")
	}
	return nil
}

// --- github.com/bsm/redislock (one master) ---

type redislockContender struct {
	c    *redislock.Client
	opts *redislock.Options
	ttl  time.Duration
}

func (*redislockContender) Name() string        { return "redislock" }
func (*redislockContender) Supports(n int) bool { return n == 1 }

func (c *redislockContender) Setup(masters []redis.UniversalClient, ttl time.Duration) error {
	c.c = redislock.New(masters[0])
	c.opts = &redislock.Options{RetryStrategy: redislock.NoRetry()}
	c.ttl = ttl
	return nil
}

func (c *redislockContender) NewWorker() worker { return &redislockWorker{c: c} }
func (c *redislockContender) Close() error      { return nil }

type redislockWorker struct {
	c *redislockContender
	l *redislock.Lock
}

func (w *redislockWorker) Lock(ctx context.Context, key string) (bool, error) {
	l, err := w.c.c.Obtain(ctx, key, w.c.ttl, w.c.opts)
	if errors.Is(err, redislock.ErrNotObtained) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	w.l = l
	return true, nil
}

func (w *redislockWorker) Unlock(ctx context.Context) error {
	err := w.l.Release(ctx)
	w.l = nil
	return err
}
