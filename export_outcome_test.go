package redlock

// Closing returns a channel closed once Close has begun on c.
func Closing(c *Client) <-chan struct{} { return c.closing }
