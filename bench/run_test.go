package main

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redistest"
)

// grantAll is a broken lock: every attempt succeeds. The overlap check must see it.
type grantAll struct{}

func (grantAll) Name() string                                       { return "grant-all" }
func (grantAll) Supports(int) bool                                  { return true }
func (grantAll) Setup([]redis.UniversalClient, time.Duration) error { return nil }
func (grantAll) NewWorker() worker                                  { return grantAll{} }
func (grantAll) Close() error                                       { return nil }
func (grantAll) Lock(context.Context, string) (bool, error)         { return true, nil }
func (grantAll) Unlock(context.Context) error                       { return nil }

func TestRunOneOverlapCheck(t *testing.T) {
	redistest.Require(t)
	ms, err := startMasters(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	ctx := context.Background()
	cfg := runConfig{Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, TTL: 10 * time.Second, Hold: 100 * time.Microsecond}
	cl := cell{N: 1, G: 16, Contended: true, HotKeys: 16, repeatSeed: 1}

	broken, err := runOne(ctx, ms, grantAll{}, cl, cfg, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if broken.Overlaps == 0 {
		t.Errorf("grant-all: %d cycles and no overlap seen", broken.Cycles)
	}

	for _, c := range []contender{&redislockContender{}, &redsyncContender{}} {
		r, err := runOne(ctx, ms, c, cl, cfg, "t2")
		if err != nil {
			t.Fatal(err)
		}
		if r.Cycles == 0 || r.Failures == 0 || r.Errors != 0 || r.Overlaps != 0 {
			t.Errorf("%s: cycles %d, failures %d, errors %d (%s), overlaps %d; want cycles and failures, no error, no overlap",
				c.Name(), r.Cycles, r.Failures, r.Errors, r.FirstErr, r.Overlaps)
		}
		if r.Lat.Count() != r.Attempts() || r.Mallocs == 0 || r.ServerCPU <= 0 || r.ClientCPU <= 0 {
			t.Errorf("%s: latencies %d for %d attempts, mallocs %d, server CPU %v, client CPU %v",
				c.Name(), r.Lat.Count(), r.Attempts(), r.Mallocs, r.ServerCPU, r.ClientCPU)
		}
	}
}
