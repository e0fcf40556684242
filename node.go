package redlock

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/wire"
)

// A node is one master as the lock logic sees it: its wire (internal/wire:
// the requests' encoding, the lane that batches them, the transport over
// go-redis), its name in errors, and what the Client keeps of it.
type node struct {
	*wire.Master
	addr    string
	down    atomic.Bool // the master stopped answering (kept with an Observer only)
	resends bool        // its client may send a command more than once itself (resending)
}

// newNode starts the wire to master i, rdb (single: the Client's only
// master); changed runs when a lane sees the master's run_id change.
func (c *Client) newNode(rdb redis.UniversalClient, i int, single bool, changed func()) *node {
	n := &node{addr: addrOf(rdb, i), resends: resending(rdb)}
	n.Master = wire.NewMaster(rdb, wire.Config{
		Single:      single,
		NodeTimeout: c.cfg.nodeTimeout,
		Acks:        c.cfg.acks,
		AckWait:     c.cfg.ackWait,
		ConnIdle:    connIdle,
		Changed:     changed,
		Workers:     &c.wg,
	})
	return n
}

// connIdle is how long a lane keeps its connection without using it
// (wire.DefaultConnIdle); a variable for the tests.
var connIdle = wire.DefaultConnIdle

// undoNeeded reports whether a failed attempt's acquire that got err may
// have left its key on the master: not when the master refused (another
// owner holds the key), and not when the acquire was never sent. A late
// refusal (after the round decided) from a client that may send a command
// more than once itself (go-redis retries after a timeout, Cluster
// redirects) may be our own first SET refusing the second, so it gets the
// undo. A prompt one gets none: a retry that answers within the deadline
// needs a connection broken mid-command, and the clients' settings the
// package documents (MaxRetries -1) rule it out; sending a Release for
// every refusal would double a contended master's work.
func (n *node) undoNeeded(err error, late bool) bool {
	switch err {
	case ErrTaken:
		return late && n.resends
	case errStalled, errQueued, errSkipped, ErrClosed:
		return false
	}
	return true
}

// resending reports whether rdb may send a command again by itself after a
// failure: go-redis retries and, on a Cluster, follows redirects and retries
// on another node. (Options holds them as go-redis set them up: -1, "none",
// is 0 there, and a Cluster's MaxRetries none is -1.)
func resending(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().MaxRetries > 0
	case *redis.ClusterClient:
		o := c.Options()
		return o.MaxRetries > 0 || o.MaxRedirects > 0
	}
	return true
}

// addrOf names a master in errors by the address its client knows.
func addrOf(rdb redis.UniversalClient, i int) string {
	switch c := rdb.(type) {
	case *redis.Client:
		if a := c.Options().Addr; a != "" && a != "FailoverClient" {
			return a
		}
	case *redis.ClusterClient:
		if a := c.Options().Addrs; len(a) > 0 {
			return strings.Join(a, ",")
		}
	case *redis.Ring:
		addrs := make([]string, 0, len(c.Options().Addrs))
		for _, a := range c.Options().Addrs {
			addrs = append(addrs, a)
		}
		sort.Strings(addrs)
		if len(addrs) > 0 {
			return strings.Join(addrs, ",")
		}
	}
	return fmt.Sprintf("master[%d]", i)
}

// maxMasters is the most masters a Client takes: each has a bit in a
// uint64 mask (bit).
const maxMasters = wire.MaxMasters

// bit is master i's bit in a mask of masters; 0 past the 64th, which New
// refuses.
func bit(i int) uint64 { return wire.Bit(i) }
