package redlock

// GateOf is the master that waiters of key ask first (gateOf), for the
// tests of waiting that must announce a release elsewhere.
func GateOf(c *Client, key string) int { return c.gateOf(c.cfg.keyPrefix + key) }
