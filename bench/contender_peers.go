package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// --- github.com/go-redsync/redsync/v4 ---

type redsyncContender struct {
	rs   *redsync.Redsync
	n    int
	opts []redsync.Option
}

func (c *redsyncContender) Setup(t target) error {
	pools := make([]redsyncredis.Pool, len(t.Clients))
	for i, m := range t.Clients {
		pools[i] = goredis.NewPool(m)
	}
	c.rs = redsync.New(pools...)
	c.n = len(pools)
	c.opts = []redsync.Option{redsync.WithTries(1), redsync.WithExpiry(t.TTL)}
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
		if redsyncTaken(err, w.c.n) {
			return false, nil
		}
		return false, err
	}
	w.m = m
	return true, nil
}

// redsyncTaken reports whether a failed LockContext (one try) was refused by
// other owners alone: an ErrTaken (a quorum of masters said taken), or enough
// ErrNodeTaken among the joined node errors. ErrFailed on its own means the
// masters agreed but the validity ran out: an error, not a refusal.
func redsyncTaken(err error, n int) bool {
	taken := 0
	quorumTaken := false
	walkErrors(err, func(e error) {
		switch e.(type) {
		case *redsync.ErrTaken, redsync.ErrTaken:
			quorumTaken = true
		case *redsync.ErrNodeTaken, redsync.ErrNodeTaken:
			taken++
		}
	})
	return quorumTaken || refusedByOwners(taken, n)
}

func (w *redsyncWorker) Unlock(ctx context.Context) error {
	ok, err := w.m.UnlockContext(ctx)
	w.m = nil
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("redsync: %w", errNotConfirmed)
	}
	return nil
}

// --- github.com/bsm/redislock (one master) ---

type redislockContender struct {
	c    *redislock.Client
	opts *redislock.Options
	ttl  time.Duration
}

func (c *redislockContender) Setup(t target) error {
	c.c = redislock.New(t.Clients[0])
	c.opts = &redislock.Options{RetryStrategy: redislock.NoRetry()}
	c.ttl = t.TTL
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
		// One master, no retry: its SET NX found the key.
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

// --- github.com/redis/rueidis/rueidislock (one master) ---

type rueidislockContender struct {
	l      rueidislock.Locker
	prefix string
}

func (c *rueidislockContender) Setup(t target) error {
	o := t.Options[0]
	// Its keys are KeyPrefix:0:name; keep them under the run's prefix.
	c.prefix = t.Prefix
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{
			InitAddress: []string{o.Addr},
			Username:    o.Username,
			Password:    o.Password,
			SelectDB:    o.DB,
			TLSConfig:   o.TLSConfig,
		},
		KeyPrefix:   strings.TrimSuffix(t.Prefix, ":") + ":rueidislock",
		KeyValidity: t.TTL,
		// Its timeout of one key's request (default 20ms, which a loaded
		// machine exceeds): redlock's default node timeout for this TTL.
		TryNextAfter:   min(t.TTL/10, 500*time.Millisecond),
		KeyMajority:    1,
		NoLoopTracking: true, // its README's advice for Redis >= 7.0.5
	})
	if err != nil {
		return err
	}
	c.l = l
	return nil
}

func (c *rueidislockContender) NewWorker() worker { return &rueidislockWorker{c: c} }

func (c *rueidislockContender) Close() error {
	c.l.Close()
	return nil
}

type rueidislockWorker struct {
	c      *rueidislockContender
	cancel context.CancelFunc
}

func (w *rueidislockWorker) Lock(ctx context.Context, key string) (bool, error) {
	_, cancel, err := w.c.l.TryWithContext(ctx, strings.TrimPrefix(key, w.c.prefix))
	if errors.Is(err, rueidislock.ErrNotLocked) {
		// KeyMajority 1: its one key is held by another owner.
		return false, nil
	}
	if err != nil {
		return false, err
	}
	w.cancel = cancel
	return true, nil
}

// Unlock cancels the lock's context, which deletes the key and waits for it;
// rueidislock reports no release error.
func (w *rueidislockWorker) Unlock(context.Context) error {
	w.cancel()
	w.cancel = nil
	return nil
}
