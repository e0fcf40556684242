package redlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlocktest"
)

// buildReport is the code under test: it builds a month's report under a
// lock, skips quietly when another replica is building it, and fails
// loudly when the masters are down.
func buildReport(ctx context.Context, locks *redlock.Client, month string) (built bool, err error) {
	err = locks.Do(ctx, "report:"+month, time.Minute, func(ctx context.Context) error {
		return nil // build the report
	})
	if errors.Is(err, redlock.ErrTaken) {
		return false, nil
	}
	return err == nil, err
}

// A test of buildReport reaches each of its branches. In a _test.go file
// this is the body of func TestBuildReport(t *testing.T), and each Println
// is a check (if built || err != nil { t.Fatal(built, err) }).
func Example() {
	t := &exampleT{} // the test's *testing.T
	defer t.cleanup()
	ctx := context.Background() // t.Context()

	m := redlocktest.New(t, 3) // three in-process masters, stopped when the test ends
	m.Prefix = "lock:"         // the prefix the application's Client uses
	locks := m.Client(redlock.WithKeyPrefix("lock:"))

	m.Take("report:2026-11", time.Minute) // another replica holds the lock
	built, err := buildReport(ctx, locks, "2026-11")
	fmt.Println("held by another replica: built", built, "err", err)
	m.Free("report:2026-11")

	m.Down(0, 1) // a majority of the masters down
	_, err = buildReport(ctx, locks, "2026-11")
	fmt.Println("masters down: unavailable", errors.Is(err, redlock.ErrUnavailable))
	m.Up(0, 1)

	built, err = buildReport(ctx, locks, "2026-11")
	fmt.Println("masters back: built", built, "err", err, "released", m.Holder("report:2026-11") == "")
	// Output:
	// held by another replica: built false err <nil>
	// masters down: unavailable true
	// masters back: built true err <nil> released true
}

// exampleT stands in for the *testing.T that a test passes to
// redlocktest.New, so that the example runs outside a test: it has the
// methods the kit calls.
type exampleT struct {
	testing.TB // nil: it only supplies the interface's unexported method
	cleanups   []func()
}

func (t *exampleT) Helper()                           {}
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatalf(format string, args ...any) { log.Fatalf(format, args...) }

// cleanup runs the functions given to Cleanup, the last first, as the
// testing package does when a test ends.
func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
