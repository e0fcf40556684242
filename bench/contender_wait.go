package main

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redlock-go/redlock"
)

// waitBound bounds one waiting Lock: a waiter still waiting when the run
// stops (nobody releases any more) must end; a wait that long is an error
// in the report, as it is starvation.
const waitBound = 5 * time.Second

// waitClients is how many clients of its own a waiting contender spreads
// its waiters over, round robin: standing for as many processes.
const waitClients = 4

// --- redlock, waiting (WithWait) or polling (LinearBackoff(1ms)) ---

type redlockWaitContender struct {
	wait bool
	cs   []*redlock.Client
	ttl  time.Duration
	next atomic.Int64
	opt  redlock.ObtainOption
}

func (c *redlockWaitContender) Setup(t target) error {
	c.ttl = t.TTL
	c.opt = redlock.WithRetry(redlock.LinearBackoff(time.Millisecond))
	if c.wait {
		c.opt = redlock.WithWait()
	}
	for range waitClients {
		rc, err := redlock.New(t.Clients)
		if err != nil {
			return err
		}
		c.cs = append(c.cs, rc)
	}
	return nil
}

func (c *redlockWaitContender) NewWorker() worker {
	return &redlockWaitWorker{c: c, rc: c.cs[c.next.Add(1)%waitClients]}
}

func (c *redlockWaitContender) Close() error {
	var errs []error
	for _, rc := range c.cs {
		errs = append(errs, rc.Close())
	}
	return errors.Join(errs...)
}

type redlockWaitWorker struct {
	c  *redlockWaitContender
	rc *redlock.Client
	l  *redlock.Lock
}

func (w *redlockWaitWorker) Lock(ctx context.Context, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	l, err := w.rc.Obtain(ctx, key, w.c.ttl, w.c.opt)
	if err != nil {
		return redlockOutcome(err)
	}
	w.l = l
	return true, nil
}

func (w *redlockWaitWorker) Unlock(ctx context.Context) error {
	err := w.l.Release(ctx)
	w.l = nil
	return err
}

// --- redsync, polling every 1ms ---

type redsyncWaitContender struct {
	rss  []*redsync.Redsync
	opts []redsync.Option
	n    int
	next atomic.Int64
}

func (c *redsyncWaitContender) Setup(t target) error {
	pools := make([]redsyncredis.Pool, len(t.Clients))
	for i, m := range t.Clients {
		pools[i] = goredis.NewPool(m)
	}
	for range waitClients {
		c.rss = append(c.rss, redsync.New(pools...))
	}
	c.n = len(pools)
	c.opts = []redsync.Option{redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(time.Millisecond), redsync.WithExpiry(t.TTL)}
	return nil
}

func (c *redsyncWaitContender) NewWorker() worker {
	return &redsyncWorker{c: &redsyncContender{rs: c.rss[c.next.Add(1)%waitClients], n: c.n, opts: c.opts}}
}
func (c *redsyncWaitContender) Close() error { return nil }

// --- redislock, polling every 1ms ---

type redislockWaitContender struct {
	cs   []*redislockContender
	next atomic.Int64
}

func (c *redislockWaitContender) Setup(t target) error {
	for range waitClients {
		rc := &redislockContender{c: redislock.New(t.Clients[0]), ttl: t.TTL,
			opts: &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}}
		c.cs = append(c.cs, rc)
	}
	return nil
}

func (c *redislockWaitContender) NewWorker() worker {
	return &redislockWorker{c: c.cs[c.next.Add(1)%waitClients]}
}
func (c *redislockWaitContender) Close() error { return nil }

// --- rueidislock, WithContext: woken by invalidations ---

type rueidislockWaitContender struct {
	cs   []*rueidislockContender
	next atomic.Int64
}

func (c *rueidislockWaitContender) Setup(t target) error {
	for range waitClients {
		rc := &rueidislockContender{}
		if err := rc.Setup(t); err != nil {
			return err
		}
		c.cs = append(c.cs, rc)
	}
	return nil
}

func (c *rueidislockWaitContender) NewWorker() worker {
	return &rueidislockWaitWorker{c: c.cs[c.next.Add(1)%waitClients]}
}

func (c *rueidislockWaitContender) Close() error {
	for _, rc := range c.cs {
		rc.Close()
	}
	return nil
}

type rueidislockWaitWorker struct {
	c      *rueidislockContender
	cancel context.CancelFunc
}

func (w *rueidislockWaitWorker) Lock(ctx context.Context, key string) (bool, error) {
	// The lock lives as long as the context it was taken with: cancel the
	// bound only at the unlock.
	ctx, cancel := context.WithTimeout(ctx, waitBound)
	_, unlock, err := w.c.l.WithContext(ctx, strings.TrimPrefix(key, w.c.prefix))
	if err != nil {
		cancel()
		return false, err
	}
	w.cancel = func() { unlock(); cancel() }
	return true, nil
}

func (w *rueidislockWaitWorker) Unlock(context.Context) error {
	w.cancel()
	w.cancel = nil
	return nil
}
