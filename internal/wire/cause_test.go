package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestWireKeepsTheLastCauseOfAFailure: the master's state keeps the last
// failure that says why (a dial error), not a timeout; names it only for a
// failure since then; and the error that names it reaches it through
// errors.Is and errors.As.
func TestWireKeepsTheLastCauseOfAFailure(t *testing.T) {
	var st state
	before := time.Now()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	st.sawFailure(dial)
	st.sawFailure(context.DeadlineExceeded)        // says no more than a timeout
	st.sawFailure(os.ErrDeadlineExceeded)          // nor does a read's
	st.sawFailure(fmt.Errorf("%w: x", ErrNoReply)) // nor a request not answered
	if got := st.cause(before); got != dial {
		t.Fatalf("cause = %v, want the dial error", got)
	}
	timeout := fmt.Errorf("%w (timed out: %w)", ErrNoReply, context.DeadlineExceeded)
	err := withCause(timeout, &st, before)
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.Is(err, ErrNoReply) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v does not reach its parts", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("%v: no *net.OpError", err)
	}
	if got := withCause(timeout, &st, time.Now().Add(time.Millisecond)); got != timeout {
		t.Fatalf("a failure before the request was named: %v", got)
	}
	if got := withCause(ErrTaken, &st, before); got != ErrTaken {
		t.Fatalf("an answer was given a cause: %v", got)
	}
}

// TestOneDialHookPerGoRedisClient: go-redis cannot remove a hook, so the
// wires of however many Clients built over one go-redis client share the
// one dial hook added to it; every one of them sees a dial fail, and a
// closed one is let go.
func TestOneDialHookPerGoRedisClient(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	var ms []*Master
	wg := new(sync.WaitGroup)
	for range 19 {
		ms = append(ms, NewMaster(rdb, Config{Single: true, Workers: wg}))
	}
	ms = append(ms, newMaster(t, rdb, Config{}))
	for _, m := range ms[1:] {
		if m.dials != ms[0].dials {
			t.Fatal("two dial hooks on one go-redis client")
		}
	}
	before := time.Now()
	ms[0].dials.DialHook(func(context.Context, string, string) (net.Conn, error) {
		return nil, syscall.ECONNREFUSED
	})(context.Background(), "tcp", "127.0.0.1:1")
	for i, m := range ms {
		if m.st.cause(before) == nil {
			t.Fatalf("master %d did not see the dial fail", i)
		}
	}
	for _, m := range ms[:19] {
		m.Close()
	}
	wg.Wait()
	if n := len(*ms[0].dials.sts.Load()); n != 1 {
		t.Fatalf("%d states watched after 19 of 20 closed, want 1", n)
	}
	rdb2 := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb2.Close()
	if other := watchDials(rdb2, &state{}); other == ms[0].dials {
		t.Fatal("another go-redis client shares the hook")
	}
}
