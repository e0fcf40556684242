package redlock

// Closing reports whether Close has begun on c.
func Closing(c *Client) bool { return c.closed.Load() }
