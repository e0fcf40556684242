package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// S24: the cancel margin. A holds three keys under Do, with the default
// margin and two of its own, when its network to a majority is cut; B
// polls for each key. A's work must be told at least the margin before B
// first obtains the key.
func TestS24CancelMargin(t *testing.T) {
	admit(t, alone)
	cancelMarginScenario(t, library)
}

func cancelMarginScenario(t *testing.T, sub *subject) {
	const ttl = 2 * time.Second
	r := newRow(t, sub, "S24 cancel-margin", "MUST",
		"3 keys under Do, TTL 2s, margins default (ttl/10) / 400ms / 600ms; A's requests to 3/5 blackholed at ttl/2; B polls each key every ~10ms",
		"A's ctx cancelled (ErrLockExpiring) at least the margin before B's first grant (margin_seen >= margin asked)")
	e := newEnv(t, sub, 5, nil)
	ams := e.masters("A")
	warm(t, ams, 4)
	a := e.lockClient(ams)
	b := e.lockClient(e.direct())
	type run struct {
		key      string
		margin   time.Duration // asked
		opts     []Opt
		held     chan struct{}
		bDone    chan struct{} // closed once B has its grant, or gave up
		cancelAt time.Time
		cause    error
		doErr    error
		grantAt  time.Time
		bErr     error
	}
	runs := []*run{
		{key: "m-default", margin: ttl / 10},
		{key: "m-400", margin: 400 * time.Millisecond, opts: []Opt{CancelMargin(400 * time.Millisecond)}},
		{key: "m-600", margin: 600 * time.Millisecond, opts: []Opt{CancelMargin(600 * time.Millisecond)}},
	}
	cut := make(chan struct{})
	var wg sync.WaitGroup
	for _, rn := range runs {
		rn.held = make(chan struct{})
		rn.bDone = make(chan struct{})
		wg.Go(func() {
			// Bounded: a Do that never gets the masters fails the row.
			ctx, cancel := context.WithTimeout(context.Background(), 5*ttl)
			defer cancel()
			rn.doErr = a.Do(ctx, rn.key, ttl, func(ctx context.Context) error {
				close(rn.held)
				<-cut
				select {
				case <-ctx.Done():
				case <-time.After(3 * ttl):
				}
				rn.cancelAt, rn.cause = time.Now(), context.Cause(ctx)
				// The work overruns its notice until B's grant: fn's return
				// would release the lock (Do does), and B then obtains by
				// A's Release, not by the keys' expiry the margin is about.
				select {
				case <-rn.bDone:
				case <-time.After(3 * ttl):
				}
				return nil
			}, append(rn.opts, RetryEvery(20*time.Millisecond))...)
		})
	}
	for _, rn := range runs {
		select {
		case <-rn.held:
		case <-time.After(5 * time.Second):
			close(cut)
			wg.Wait()
			t.Fatalf("A never held %s: %v", rn.key, rn.doErr)
		}
	}
	time.Sleep(ttl / 2) // a renewal of each has run
	for _, p := range e.group("A")[:3] {
		if err := p.BlackholeUp(); err != nil {
			t.Fatal(err)
		}
	}
	cutAt := time.Now()
	close(cut)
	for _, rn := range runs {
		wg.Go(func() { // B polls while A is cut off from the majority
			defer close(rn.bDone)
			bctx, cancel := context.WithTimeout(context.Background(), 3*ttl)
			defer cancel()
			l, err := b.Obtain(bctx, rn.key, ttl, RetryEvery(10*time.Millisecond))
			if err != nil {
				rn.bErr = err
				return
			}
			rn.grantAt = time.Now()
			l.Release(context.Background())
		})
	}
	wg.Wait()
	for _, p := range e.group("A") {
		p.Heal()
	}
	minOver := time.Duration(1<<63 - 1) // margin seen - margin asked, the least over the keys
	for _, rn := range runs {
		name := fmt.Sprintf("%s_", rn.key)
		r.set(name+"margin_asked", rn.margin)
		if !rn.cancelAt.IsZero() {
			r.set(name+"cancelled_after_cut", rn.cancelAt.Sub(cutAt))
		}
		if !rn.grantAt.IsZero() {
			r.set(name+"b_obtained_after_cut", rn.grantAt.Sub(cutAt))
		}
		r.must(!rn.cancelAt.IsZero() && rn.cancelAt.Before(cutAt.Add(ttl+slack)), "%s: A's ctx not cancelled within the TTL of the cut (cause %v)", rn.key, rn.cause)
		r.must(rn.bErr == nil, "%s: B never obtained after the cut: %v", rn.key, rn.bErr)
		if rn.cancelAt.IsZero() || rn.grantAt.IsZero() {
			continue
		}
		seen := rn.grantAt.Sub(rn.cancelAt)
		r.set(name+"margin_seen", seen)
		minOver = min(minOver, seen-rn.margin)
		r.must(seen >= rn.margin, "%s: margin_seen %v: A's work was told %v before B's first grant, want at least the margin %v", rn.key, seen, seen, rn.margin)
		r.must(errors.Is(rn.cause, redlock.ErrLockExpiring) && errors.Is(rn.cause, redlock.ErrLockLost), "%s: context.Cause = %v, want ErrLockExpiring and ErrLockLost", rn.key, rn.cause)
		r.must(errors.Is(rn.doErr, redlock.ErrLockExpiring), "%s: Do returned %v, want an error matching ErrLockExpiring", rn.key, rn.doErr)
	}
	if minOver < time.Duration(1<<63-1) {
		r.set("min_seen_minus_asked", minOver)
	}
}
