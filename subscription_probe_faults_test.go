package redlock_test

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// TestCloseReturnsWhenAProbeMeetsAPanickingReconnect: a subscription's
// connection breaks and go-redis dials again inside Receive, under the
// PubSub's own mutex; the dial hook is slow, then panics, which leaves that
// mutex locked for good (waker.run drops such a PubSub and never closes
// it). While that dial runs, the subscription is still confirmed, and the
// probe finds the Client's own channel gone from the master (its
// connection was killed): it must not close that PubSub and wait on its
// mutex for ever, holding Close with it. Run in a child process: the
// Close of that PubSub stays blocked on its mutex (the go-redis hook's
// panic left it locked), a goroutine goleak would rightly report.
func TestCloseReturnsWhenAProbeMeetsAPanickingReconnect(t *testing.T) {
	if os.Getenv("REDLOCK_TEST_CHILD") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCloseReturnsWhenAProbeMeetsAPanickingReconnect$", "-test.count=1")
		cmd.Env = append(os.Environ(), "REDLOCK_TEST_CHILD=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("child: %v\n%s", err, out)
		}
		return
	}
	hook := &dialHook{}
	clients, b, _, ch, cancel := waitingClient(t, hook)
	defer cancel()
	time.Sleep(3 * probeEveryForTests) // the probe has run, its connection is pooled
	var dials atomic.Int32
	slowPanic := func() {
		if dials.Add(1) == 1 { // the PubSub's dial again, inside Receive
			time.Sleep(4 * probeEveryForTests) // the probe runs meanwhile
			panic("dial hook panics")
		}
	}
	hook.f.Store(&slowPanic)
	if err := clients[0].ClientKillByFilter(t.Context(), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * probeEveryForTests) // the dial panicked
	hook.f.Store(nil)
	closed := make(chan struct{})
	go func() {
		b.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<20)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "(*waker)") {
				t.Logf("%s", g)
			}
		}
		t.Fatal("Close hangs: the probe closed a PubSub whose reconnect panicked under its mutex")
	}
	if w := outcome(t, ch, 5*time.Second); !errors.Is(w.err, redlock.ErrClosed) {
		t.Errorf("waiting Obtain after Close: %v, want ErrClosed", w.err)
	}
}
