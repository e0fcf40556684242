package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock"
)

// redlockContender is redlock over N masters (New) or, at N=1, the
// one-master variant (NewSingle). Both use their defaults: one attempt, the
// default node timeout and drift factor.
type redlockContender struct {
	single   bool
	observed bool // with an Observer that counts the events
	keys     int  // > 0: ObtainMulti of that many keys per lock
	c        *redlock.Client
	ttl      time.Duration
	prefix   string
}

func (c *redlockContender) Setup(t target) error {
	var opts []redlock.Option
	if c.observed {
		opts = append(opts, redlock.WithObserver(&counting{}))
	}
	var err error
	if c.single {
		c.c, err = redlock.NewSingle(t.Clients[0], opts...)
	} else {
		c.c, err = redlock.New(t.Clients, opts...)
	}
	c.ttl, c.prefix = t.TTL, t.Prefix
	return err
}

func (c *redlockContender) NewWorker() worker {
	return &redlockWorker{c: c, set: make([]string, c.keys)}
}

func (c *redlockContender) Close() error {
	err := c.c.Close()
	c.c = nil
	return err
}

type redlockWorker struct {
	c   *redlockContender
	l   *redlock.Lock
	set []string // the keys of a set contender's lock, rewritten for each
}

func (w *redlockWorker) Lock(ctx context.Context, key string) (bool, error) {
	var l *redlock.Lock
	var err error
	if len(w.set) == 0 {
		l, err = w.c.c.Obtain(ctx, key, w.c.ttl)
	} else {
		l, err = w.c.c.ObtainMulti(ctx, w.setOf(key), w.c.ttl)
	}
	if err != nil {
		return redlockOutcome(err)
	}
	w.l = l
	return true, nil
}

// setOf returns the set locked for key: keys under the run's prefix that
// share one hash tag, the rest of key, so that the set is in one slot of a
// Cluster and sets of different keys spread over the slots.
func (w *redlockWorker) setOf(key string) []string {
	tag := w.c.prefix + "{" + strings.TrimPrefix(key, w.c.prefix) + "}:"
	for i := range w.set {
		w.set[i] = tag + strconv.Itoa(i)
	}
	return w.set
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

// counting is an Observer as cheap as a real one can be: it counts events
// by kind and outcome, the way a metrics exporter's counters would.
type counting struct {
	obtains, releases, others [8]atomic.Int64
}

func (o *counting) Observe(_ context.Context, e redlock.Event) {
	switch e := e.(type) {
	case *redlock.ObtainEvent:
		o.obtains[outcomeIndex(e.Outcome)].Add(1)
	case *redlock.ReleaseEvent:
		o.releases[outcomeIndex(e.Outcome)].Add(1)
	default:
		o.others[0].Add(1)
	}
}

func outcomeIndex(o redlock.Outcome) int {
	switch o {
	case redlock.Obtained, redlock.Released:
		return 0
	case redlock.Taken:
		return 1
	case redlock.Unavailable:
		return 2
	case redlock.Lost:
		return 3
	default:
		return 4
	}
}
