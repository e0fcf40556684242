package chaos

import (
	"sync/atomic"
	"time"
)

// A Counter is the lost-update check (Jepsen's lock-set, Redisson's
// counter): each holder reads a shared int, sleeps, and writes it back plus
// one. Overlapping holders lose updates. The loads and stores are atomic so
// the race detector stays quiet; the read-modify-write is not, on purpose.
type Counter struct {
	v, done atomic.Int64
}

// Increment runs one critical section's update, holding for d between the
// read and the write.
func (c *Counter) Increment(d time.Duration) {
	v := c.v.Load()
	if d > 0 {
		time.Sleep(d)
	}
	c.v.Store(v + 1)
	c.done.Add(1)
}

// Lost is the number of increments that vanished: completed critical
// sections minus the counter's value.
func (c *Counter) Lost() int64 { return c.done.Load() - c.v.Load() }

// Done is the number of completed increments.
func (c *Counter) Done() int64 { return c.done.Load() }

// IncrementAll is one critical section over several counters (a lock on
// several keys, a counter per key): it reads them all, holds for d, and
// writes each back plus one.
func IncrementAll(cs []*Counter, d time.Duration) {
	vs := make([]int64, len(cs))
	for i, c := range cs {
		vs[i] = c.v.Load()
	}
	if d > 0 {
		time.Sleep(d)
	}
	for i, c := range cs {
		c.v.Store(vs[i] + 1)
		c.done.Add(1)
	}
}
