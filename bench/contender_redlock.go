package main

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// redlockContenders returns redlock over N masters (New) and, as a separate
// contender at N=1, the one-master variant (NewSingle). Both use their defaults:
// one attempt, the default node timeout and drift factor.
func redlockContenders() []contender {
	return []contender{&redlockContender{}, &redlockContender{single: true}}
}

type redlockContender struct {
	single bool
	c      *redlock.Client
	ttl    time.Duration
}

func (c *redlockContender) Name() string {
	if c.single {
		return "redlock-single"
	}
	return "redlock"
}

func (c *redlockContender) Supports(n int) bool { return !c.single || n == 1 }

func (c *redlockContender) Setup(masters []redis.UniversalClient, ttl time.Duration) error {
	var err error
	if c.single {
		c.c, err = redlock.NewSingle(masters[0])
	} else {
		c.c, err = redlock.New(masters)
	}
	c.ttl = ttl
	return err
}

func (c *redlockContender) NewWorker() worker { return &redlockWorker{c: c} }

func (c *redlockContender) Close() error {
	err := c.c.Close()
	c.c = nil
	return err
}

type redlockWorker struct {
	c *redlockContender
	l *redlock.Lock
}

func (w *redlockWorker) Lock(ctx context.Context, key string) (bool, error) {
	l, err := w.c.c.Obtain(ctx, key, w.c.ttl)
	if errors.Is(err, redlock.ErrNotObtained) {
		// Held elsewhere, or no quorum: an attempt that failed. Node errors
		// inside it (a timeout) still count here, as for the peers.
		return false, nil
	}
	if err != nil {
		return false, err
	}
	w.l = l
	return true, nil
}

func (w *redlockWorker) Unlock(ctx context.Context) error {
	err := w.l.Release(ctx)
	w.l = nil
	return err
}
