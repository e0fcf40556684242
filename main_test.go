package redlock

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quiet drops go-redis's log lines: the fault tests make it log every
// refused dial.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	if os.Getenv("REDLOCK_TEST_CHILD") == "1" {
		// A child process of a test whose go-redis hook panics for good
		// (TestCloseReturnsWhenAProbeMeetsAPanickingReconnect): what it
		// leaves blocked is the point, not a leak.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
