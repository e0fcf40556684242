package redistest

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds the wait for cluster_state:ok. A master refuses to report
// ok in its first 2s (CLUSTER_WRITABLE_DELAY in redis), so this is never instant.
const clusterTimeout = 30 * time.Second

const clusterSlots = 16384

// A Cluster is a Redis Cluster of masters only, one per Server, with the 16384
// slots split evenly in order. Servers may be killed, stopped and restarted like
// any other; a restarted node rejoins from its nodes.conf.
type Cluster struct {
	Servers []*Server
}

// NewCluster starts masters cluster-enabled servers, assigns the slots
// (CLUSTER ADDSLOTSRANGE), joins them (CLUSTER MEET) and waits, at most 30s,
// until every node reports cluster_state:ok, knows every node and sees all
// slots assigned. Expect about 2s: redis holds a new master out of the ok state
// that long. The caller must call [Cluster.Close].
func NewCluster(masters int) (*Cluster, error) {
	if masters < 1 {
		return nil, fmt.Errorf("redistest: NewCluster(%d): need at least one master", masters)
	}
	servers, err := NewServers(masters, Options{Cluster: true})
	if err != nil {
		return nil, err
	}
	c := &Cluster{Servers: servers}
	if err := c.form(); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

func (c *Cluster) form() error {
	n := len(c.Servers)
	for i, s := range c.Servers {
		lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		// Distinct epochs up front, as redis-cli --cluster create does, so no epoch
		// collision has to be resolved while the nodes meet.
		for _, cmd := range [][]string{
			{"CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i + 1)},
			{"CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)},
		} {
			if _, err := do(s.Addr(), time.Second, cmd...); err != nil {
				return fmt.Errorf("redistest: %s on %s: %w", cmd[1], s.Addr(), err)
			}
		}
	}
	first := c.Servers[0].Addr()
	for _, s := range c.Servers[1:] {
		if _, err := do(first, time.Second, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port()), strconv.Itoa(s.BusPort())); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET %s from %s: %w", s.Addr(), first, err)
		}
	}
	return c.WaitOK(clusterTimeout)
}

// WaitOK waits, at most timeout, until every node answers CLUSTER INFO with
// cluster_state:ok, all slots assigned and ok, and all nodes known.
func (c *Cluster) WaitOK(timeout time.Duration) error {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": strconv.Itoa(clusterSlots),
		"cluster_slots_ok":       strconv.Itoa(clusterSlots),
		"cluster_known_nodes":    strconv.Itoa(len(c.Servers)),
	}
	deadline := time.Now().Add(timeout)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		<-t.C
		lag := c.lagging(want)
		if lag == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: cluster not ok after %v: %w", timeout, lag)
		}
		t.Reset(50 * time.Millisecond)
	}
}

// lagging returns why the first node that is not yet in the wanted state is not, or nil.
func (c *Cluster) lagging(want map[string]string) error {
	for _, s := range c.Servers {
		info, err := do(s.Addr(), time.Second, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: %w", s.Addr(), err)
		}
		for k, v := range want {
			if got, _ := infoField(info, k); got != v {
				return fmt.Errorf("%s: %s:%s, want %s", s.Addr(), k, got, v)
			}
		}
	}
	return nil
}

// Addrs returns the nodes' addresses, in slot order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client returns a go-redis cluster client with the defaults of [Server.Client]
// and ContextTimeoutEnabled set: with MaxRetries -1, the settings
// redlock.New requires of a master's client. opts may change any field. The
// caller closes it.
func (c *Cluster) Client(opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	o := &redis.ClusterOptions{
		Addrs:                 c.Addrs(),
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		PoolSize:              8,
		DisableIdentity:       true,
		ContextTimeoutEnabled: true,
	}
	for _, f := range opts {
		f(o)
	}
	return redis.NewClusterClient(o)
}

// Close closes every server, in parallel. It is idempotent.
func (c *Cluster) Close() error {
	errs := make([]error, len(c.Servers))
	var wg sync.WaitGroup
	for i, s := range c.Servers {
		wg.Go(func() { errs[i] = s.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
