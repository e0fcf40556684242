//go:build chaos_refdo

package chaos

// A chaos-side stand-in for Client.Do, used only to exercise the Do
// scenarios' harness before the library has Do: go test -tags chaos_refdo.
// It is not the library's Do and proves nothing about it.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock"
)

type refDoer struct{ c *redlock.Client }

func init() {
	doOf = func(c *redlock.Client) (doer, bool) { return refDoer{c}, true }
}

func (d refDoer) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error, opts ...redlock.ObtainOption) error {
	lock, err := d.c.Obtain(ctx, key, ttl, opts...)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		renew := time.NewTimer(ttl / 3)
		defer renew.Stop()
		expire := time.NewTimer(lock.Validity())
		defer expire.Stop()
		for {
			select {
			case <-stop:
				return
			case <-expire.C:
				cancel(fmt.Errorf("%w: validity ran out", redlock.ErrLockLost))
				return
			case <-renew.C:
				rctx, rc := context.WithTimeout(context.Background(), ttl/3)
				err := lock.Extend(rctx, ttl)
				rc()
				if errors.Is(err, redlock.ErrLockLost) {
					cancel(err)
					return
				}
				if err == nil {
					expire.Reset(lock.Validity())
					renew.Reset(ttl / 3)
				} else {
					renew.Reset(ttl / 10)
				}
			}
		}
	}()
	ferr := fn(wctx)
	close(stop)
	<-done
	lost := context.Cause(wctx)
	cancel(nil)
	rerr := lock.Release(context.Background())
	if errors.Is(lost, redlock.ErrLockLost) {
		return errors.Join(ferr, lost)
	}
	if errors.Is(rerr, redlock.ErrLockLost) {
		return errors.Join(ferr, rerr)
	}
	return ferr
}
