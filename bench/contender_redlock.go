package main

import (
	"context"
	"errors"
	"time"

	"github.com/redlock-go/redlock"
)

// redlockContender is redlock over N masters (New) or, at N=1, the
// one-master variant (NewSingle). Both use their defaults: one attempt, the
// default node timeout and drift factor.
type redlockContender struct {
	single bool
	c      *redlock.Client
	ttl    time.Duration
}

func (c *redlockContender) Setup(t target) error {
	var err error
	if c.single {
		c.c, err = redlock.NewSingle(t.Clients[0])
	} else {
		c.c, err = redlock.New(t.Clients)
	}
	c.ttl = t.TTL
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
	if err != nil {
		return redlockOutcome(err)
	}
	w.l = l
	return true, nil
}

// redlockOutcome maps a failed Obtain to the worker's outcome: a refusal by
// other owners (false, nil), or an error for anything else, such as too few
// masters answering.
func redlockOutcome(err error) (bool, error) {
	if redlockTaken(err) {
		return false, nil
	}
	return false, err
}

// redlockTaken reports whether a failed Obtain was refused by other owners:
// the library's own outcome, ErrTaken (their refusals alone ruled out the
// quorum), as opposed to ErrUnavailable (too few masters answered).
func redlockTaken(err error) bool {
	return errors.Is(err, redlock.ErrNotObtained) && errors.Is(err, redlock.ErrTaken)
}

func (w *redlockWorker) Unlock(ctx context.Context) error {
	err := w.l.Release(ctx)
	w.l = nil
	return err
}
