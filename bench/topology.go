package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redlock-go/redlock/internal/redistest"
)

// A cell is one point of the matrix.
type cell struct {
	N         int           // masters, or independent clusters when Cluster
	Shards    int           // masters of each cluster (Cluster only)
	Cluster   bool          // each master is a Redis Cluster
	G         int           // goroutines
	Contended bool          // HotKeys hot keys instead of a fresh key per cycle
	Latency   time.Duration // added each way between the client and every master
	HotKeys   int
	// repeatSeed seeds the goroutines' choice of hot keys in one repeat.
	repeatSeed uint64
}

func (c cell) Name() string {
	mode := "uncontended"
	if c.Contended {
		mode = "contended"
	}
	where := fmt.Sprintf("n%d", c.N)
	if c.Cluster {
		where = fmt.Sprintf("c%dx%d", c.N, c.Shards)
	}
	name := fmt.Sprintf("%s-g%d-%s", where, c.G, mode)
	if c.Latency > 0 {
		name += "-lat" + strings.ReplaceAll(c.Latency.String(), "µ", "u")
	}
	return name
}

// endpoints is what one cell's contenders connect to, and the servers behind it.
type endpoints struct {
	opts     []*redis.Options // standalone masters, directly or through delay proxies
	clusters [][]string       // cluster cells: the node addresses of each cluster
	// admin reaches every server process behind the cell directly: INFO and cleanup.
	admin  []*redis.Client
	writes *atomic.Uint64 // latency cells: chunks the delay proxies forwarded
	rttUs  float64        // median PING round trip to the first master, as the contenders see it
}

// clients returns fresh go-redis clients for one run, built alike for every
// contender: the master's options, PoolSize, ContextTimeoutEnabled (so a
// call's deadline bounds its socket reads) and MaxRetries -1 (a command is
// not sent again by go-redis on its own), as the library README advises.
func (ep *endpoints) clients(poolSize int) []redis.UniversalClient {
	var cs []redis.UniversalClient
	for _, addrs := range ep.clusters {
		cs = append(cs, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: poolSize, ContextTimeoutEnabled: true, MaxRetries: -1,
			MaintNotificationsConfig: noMaintNotifications()}))
	}
	for _, o := range ep.opts {
		c := *o
		c.PoolSize, c.ContextTimeoutEnabled, c.MaxRetries = poolSize, true, -1
		cs = append(cs, newClient(c))
	}
	return cs
}

// newClient is redis.NewClient with maintenance notifications off, for
// every client of the harness. In go-redis v9.23 a client and the Conns
// taken from it (redlock's lanes, or a test's) race on that option when its
// handshake fails (on Redis 7, in the default auto mode), which -race
// reports. The handshake happens once per connection: it costs nothing
// measured here.
func newClient(o redis.Options) *redis.Client {
	o.MaintNotificationsConfig = noMaintNotifications()
	return redis.NewClient(&o)
}

func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// extras are what some cells need beyond the masters, made on first use.
type extras struct {
	latency      map[time.Duration]*latencySet
	clusters     []*redistest.Cluster
	cadmin       []*redis.Client // every node of every cluster
	clusterRTTus float64         // PING round trip to the first node
}

// A latencySet is one delay proxy in front of each master, all on one delay line.
type latencySet struct {
	line    *delayLine
	proxies []*delayProxy
	rttUs   float64
}

func (e *extras) Close() error {
	var errs []error
	for _, ls := range e.latency {
		for _, p := range ls.proxies {
			errs = append(errs, p.Close())
		}
		ls.line.Close()
	}
	for _, c := range e.cadmin {
		errs = append(errs, c.Close())
	}
	for _, c := range e.clusters {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// endpoints returns what cell c runs against, starting proxies or clusters
// the first time a cell needs them (only around servers the harness owns).
func (m *masterSet) endpoints(ctx context.Context, c cell) (*endpoints, error) {
	if c.Cluster {
		if !m.owned {
			return nil, errors.New("cluster cells need the harness's own servers")
		}
		if err := m.startClusters(ctx, c.N, c.Shards); err != nil {
			return nil, err
		}
		ep := &endpoints{admin: m.extras.cadmin[:c.N*c.Shards], rttUs: m.extras.clusterRTTus}
		for _, cl := range m.extras.clusters[:c.N] {
			ep.clusters = append(ep.clusters, cl.Addrs())
		}
		return ep, nil
	}
	if c.N > len(m.opts) {
		return nil, fmt.Errorf("%s needs %d masters, %d given", c.Name(), c.N, len(m.opts))
	}
	ep := &endpoints{opts: m.opts[:c.N], admin: m.admin[:c.N], rttUs: -1}
	if len(m.info.Masters) > 0 {
		ep.rttUs = m.info.Masters[0].RTTus
	}
	if c.Latency <= 0 {
		return ep, nil
	}
	if !m.owned {
		return nil, errors.New("latency cells need the harness's own servers")
	}
	ls, err := m.latencySet(ctx, c.Latency)
	if err != nil {
		return nil, err
	}
	ep.opts = nil
	for _, p := range ls.proxies[:c.N] {
		ep.opts = append(ep.opts, &redis.Options{Addr: p.Addr()})
	}
	ep.writes, ep.rttUs = &ls.line.writes, ls.rttUs
	return ep, nil
}

// latencySet puts a delay proxy in front of every master and measures the
// round trip through the first.
func (m *masterSet) latencySet(ctx context.Context, d time.Duration) (*latencySet, error) {
	if ls := m.extras.latency[d]; ls != nil {
		return ls, nil
	}
	ls := &latencySet{line: newDelayLine(d)}
	if m.extras.latency == nil {
		m.extras.latency = map[time.Duration]*latencySet{}
	}
	m.extras.latency[d] = ls // closed with the extras, even if a proxy fails
	for _, o := range m.opts {
		p, err := newDelayProxy(o.Addr, ls.line)
		if err != nil {
			return nil, err
		}
		ls.proxies = append(ls.proxies, p)
	}
	c := newClient(redis.Options{Addr: ls.proxies[0].Addr()})
	defer c.Close()
	rtt, err := pingRTT(ctx, c, 50)
	if err != nil {
		return nil, fmt.Errorf("PING through the %v proxy: %w", d, err)
	}
	ls.rttUs = float64(rtt) / 1e3
	return ls, nil
}

// startClusters starts n independent clusters of shards masters each, once.
func (m *masterSet) startClusters(ctx context.Context, n, shards int) error {
	for len(m.extras.clusters) < n {
		fmt.Fprintf(logOut, "bench: starting Redis Cluster %d of %d (%d shards)\n", len(m.extras.clusters)+1, n, shards)
		cl, err := redistest.NewCluster(shards)
		if err != nil {
			return fmt.Errorf("start cluster: %w", err)
		}
		m.extras.clusters = append(m.extras.clusters, cl)
		for _, addr := range cl.Addrs() {
			m.extras.cadmin = append(m.extras.cadmin, newClient(redis.Options{Addr: addr, PoolSize: 2}))
		}
	}
	rtt, err := pingRTT(ctx, m.extras.cadmin[0], 20)
	if err != nil {
		return err
	}
	m.extras.clusterRTTus = float64(rtt) / 1e3
	return nil
}

// A serverSample is what one server has done so far: CPU seconds (INFO
// cpu), commands executed (INFO commandstats) and reads from client sockets
// (INFO stats total_reads_processed: commands per read is the depth of the
// batches the server receives).
type serverSample struct {
	cpu          float64
	calls, reads uint64
}

// serverStats samples each server, in one INFO call each.
func serverStats(ctx context.Context, admin []*redis.Client) ([]serverSample, error) {
	var out []serverSample
	for _, c := range admin {
		info, err := c.Info(ctx, "cpu", "stats", "commandstats").Result()
		if err != nil {
			return nil, err
		}
		s, err := parseInfoCPU(info)
		if err != nil {
			return nil, err
		}
		reads, _ := strconv.ParseUint(infoValue(info, "total_reads_processed"), 10, 64)
		out = append(out, serverSample{cpu: s, calls: parseCommandCalls(info), reads: reads})
	}
	return out, nil
}

// parseCommandCalls sums calls= over the cmdstat_ lines of INFO commandstats.
func parseCommandCalls(info string) uint64 {
	var sum uint64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(strings.TrimSpace(line), "calls=")
		if !ok || !strings.HasPrefix(strings.TrimSpace(line), "cmdstat_") {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseUint(v, 10, 64)
		if err == nil {
			sum += n
		}
	}
	return sum
}
