package redlock

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redlock-go/redlock/internal/redistest"
)

// TestWaitAfterCloseStartsNoSubscription: obtainWait (and WaitReleased)
// take the waker (wakerFor, which checks c.closed under c.mu) and only then
// join it (w.join, under w.mu), so Close can run to its end in between. A
// join after the waker stopped must start nothing: a subscription started
// then would be a goroutine Close no longer waits for, with its SUBSCRIBE
// connection, for the life of the process (the masters' clients are the
// application's, never closed by Close). The interleaving is forced here by
// calling the two halves in that order.
func TestWaitAfterCloseStartsNoSubscription(t *testing.T) {
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client()
	defer rdb.Close()
	c, err := NewSingle(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ignore := goleak.IgnoreCurrent()

	w := c.wakerFor() // a WithWait Obtain begins: the Client is open
	if w == nil {
		t.Fatal("no waker")
	}
	if err := c.Close(); err != nil { // Close runs to its end meanwhile
		t.Fatal(err)
	}
	x := w.join("k", false) // the Obtain goes on: join, ask (ErrClosed), leave
	w.leave(x, 0)

	time.Sleep(subLinger + 500*time.Millisecond) // longer than a subscription lingers
	n, err := rdb.PubSubNumSub(context.Background(), wakeChannel).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n[wakeChannel] != 0 {
		t.Errorf("a closed Client is still subscribed to %s on the master (%d subscribers)", wakeChannel, n[wakeChannel])
	}
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("a closed Client left goroutines: %v", err)
	}
	// Let the process's goleak pass for the other tests: end it by hand.
	w.mu.Lock()
	for id, s := range w.subs {
		close(s.stop)
		_ = s.ps.Close()
		delete(w.subs, id)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
