package redlock

import "time"

// GateOf is the master that waiters of key ask first (gateOf), for the
// tests of waiting that must announce a release elsewhere.
func GateOf(c *Client, key string) int { return c.gateOf(c.cfg.keyPrefix + key) }

type anyClientOptions struct{}

func (anyClientOptions) apply(c *config) { c.anyClient = true }

// AnyClientOptions makes New take masters whose clients it refuses
// (checkClientOptions: retries, reads not ended by the request's deadline),
// for the tests that run the library under such clients on purpose: reads
// bounded by ReadTimeout alone, a lane that is never inline.
func AnyClientOptions() Option { return anyClientOptions{} }

// QueuedInClient returns how many waiting Obtains of key c queues (its
// waiters of the key, in arrival order; the first, the head, asks the
// masters), for the tests of that order.
func QueuedInClient(c *Client, key string) int {
	w := wakeOf(c)
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if kw := w.keys[c.cfg.keyPrefix+key]; kw != nil {
		return len(kw.queue)
	}
	return 0
}

// Yields reports whether c's next waiter of key would still let another
// Client ask first: c's release of key gave that Client the turn, and the
// turn lead has not lapsed (handedTurn).
func Yields(c *Client, key string) bool {
	w := wakeOf(c)
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	until, ok := w.yields[c.cfg.keyPrefix+key]
	return ok && time.Now().Before(until)
}

// wakeOf returns c's waker, nil before its first wait; unlike wakerFor,
// it makes none.
func wakeOf(c *Client) *waker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wake
}
