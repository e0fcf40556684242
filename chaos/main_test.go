package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helperMain(h)) // a worker subprocess (S14), not the suite
	}
	redis.SetLogger(quietLogger{}) // dial failures are the point here, not news
	flag.Parse()
	unlimitParallel()
	dir := buildShim()
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	if err := writeResults(os.Stdout, "out"); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: writing results:", err)
	}
	os.Exit(code)
}
