package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// autopipeContender is the Redlock a speed-minded user could write on
// go-redis v9.23's own automatic pipelining instead of taking a library: one
// deferred autopipeliner (AsyncAutoPipeline, experimental, go-redis's
// defaults) per master, SET NX PX sent to every master at once, then every
// reply awaited, the quorum and validity checked, and a compare-and-delete
// EVALSHA to release. It has no per-request deadline (a frozen master holds
// the call until go-redis's socket timeout) and always waits for the slowest
// master, where redlock decides at quorum.
type autopipeContender struct {
	aps    []*redis.AutoPipeliner
	ttl    time.Duration
	quorum int
	drift  time.Duration
}

// autopipeRelease deletes the key only if it still holds our token.
var autopipeRelease = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)

func (c *autopipeContender) Setup(t target) error {
	for _, m := range t.Clients {
		apc, ok := m.(interface {
			AsyncAutoPipeline() (*redis.AutoPipeliner, error)
		})
		if !ok {
			return fmt.Errorf("%T has no AsyncAutoPipeline", m)
		}
		ap, err := apc.AsyncAutoPipeline()
		if err != nil {
			return err
		}
		c.aps = append(c.aps, ap)
		if err := autopipeRelease.Load(context.Background(), m).Err(); err != nil {
			return err
		}
	}
	c.ttl = t.TTL
	c.quorum = len(c.aps)/2 + 1
	c.drift = t.TTL/100 + 2*time.Millisecond // the Redis documentation's clock drift allowance
	return nil
}

func (c *autopipeContender) NewWorker() worker {
	n := len(c.aps)
	return &autopipeWorker{c: c, set: make([]*redis.BoolCmd, n), refused: make([]bool, n), del: make([]*redis.Cmd, n)}
}

// Close closes the autopipeliners (the clients stay open).
func (c *autopipeContender) Close() error {
	var errs []error
	for _, ap := range c.aps {
		errs = append(errs, ap.Close())
	}
	c.aps = nil
	return errors.Join(errs...)
}

type autopipeWorker struct {
	c        *autopipeContender
	set      []*redis.BoolCmd
	refused  []bool
	del      []*redis.Cmd
	key, tok string
}

func (w *autopipeWorker) Lock(ctx context.Context, key string) (bool, error) {
	var b [16]byte
	rand.Read(b[:])
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	start := time.Now()
	for i, ap := range w.c.aps {
		w.set[i] = ap.SetNX(ctx, key, tok, w.c.ttl) // queued; sent by the pipeliner
	}
	granted, taken := 0, 0
	var errs []error
	for i, cmd := range w.set {
		ok, err := cmd.Result() // blocks until this master's reply
		w.refused[i] = err == nil && !ok
		switch {
		case err != nil:
			errs = append(errs, err)
		case ok:
			granted++
		default:
			taken++
		}
	}
	if granted >= w.c.quorum && time.Since(start) < w.c.ttl-w.c.drift {
		w.key, w.tok = key, tok
		return true, nil
	}
	// Failed: undo the SET wherever it may have landed.
	_, _ = w.release(ctx, key, tok, w.refused)
	if refusedByOwners(taken, len(w.c.aps)) {
		return false, nil
	}
	if len(errs) == 0 {
		return false, fmt.Errorf("autopipeline: %d of %d granted, quorum %d, but the validity ran out", granted, len(w.c.aps), w.c.quorum)
	}
	return false, fmt.Errorf("autopipeline: %d of %d granted, quorum %d: %w", granted, len(w.c.aps), w.c.quorum, errors.Join(errs...))
}

// release sends the compare-and-delete to every master not skipped and
// returns how many deleted the key.
func (w *autopipeWorker) release(ctx context.Context, key, tok string, skip []bool) (int, error) {
	keys := []string{key}
	for i, ap := range w.c.aps {
		w.del[i] = nil
		if skip == nil || !skip[i] {
			w.del[i] = ap.EvalSha(ctx, autopipeRelease.Hash(), keys, tok)
		}
	}
	deleted := 0
	var errs []error
	for _, cmd := range w.del {
		if cmd == nil {
			continue
		}
		n, err := cmd.Int()
		if err != nil {
			errs = append(errs, err)
		}
		deleted += n
	}
	return deleted, errors.Join(errs...)
}

func (w *autopipeWorker) Unlock(ctx context.Context) error {
	deleted, err := w.release(ctx, w.key, w.tok, nil)
	w.key, w.tok = "", ""
	if err != nil {
		return err
	}
	if deleted < w.c.quorum {
		return fmt.Errorf("autopipeline: %w (%d deleted)", errNotConfirmed, deleted)
	}
	return nil
}
