package redlock

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
