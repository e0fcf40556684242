package redlock_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Helpers of the package's external tests: waiting for states, servers,
// clients and Clients, and reading the masters. Faults, clocks and the
// states of locks and watchdogs are in helpers_fault_test.go, the waiters'
// helpers in helpers_wait_test.go, the go-redis hooks and Observers the
// tests plug in in helpers_hooks_test.go.
//
// The tests wait for states (redistest.Eventually, redistest.Within, and
// the helpers built on them: delivered, landed, freed, lapsed, marked,
// subscribed, queuedN), not for a fixed time. Real time passes only where
// the scenario needs it: work under a lock (work), a window in which
// something must not happen (never), a TTL, a hold, a pause or a node
// timeout that must run out (each with its reason).

// init runs twice as many parallel tests as there are CPUs, unless the
// command line sets -parallel: the tests mostly wait (on a TTL, a node
// timeout, a Redis Cluster that takes 2s to come up), and go test's
// default, GOMAXPROCS, leaves a 2-core machine idle half the run. The
// tests that assert a tight bound on time, allocations or goroutines are
// not parallel: they run alone, before the parallel ones.
func init() {
	testing.Init() // registers the flags; go test's own call then does nothing
	if f := flag.Lookup("test.parallel"); f != nil && f.Value.String() == strconv.Itoa(runtime.GOMAXPROCS(0)) {
		f.Value.Set(strconv.Itoa(2 * runtime.GOMAXPROCS(0)))
	}
}

// work stands for the work done under a lock (or before it): d of real
// time passes, as a holder would spend it.
func work(d time.Duration) { time.Sleep(d) }

// never checks, every 10ms for d, that check holds, and fails the test at
// the first error: a state that must not change while real time passes
// (no ask, no renewal, no stray key).
func never(t *testing.T, d time.Duration, check func() error) {
	t.Helper()
	for end := time.Now().Add(d); ; {
		if err := check(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(end) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Servers, clients and Clients.

// newClient is redlock.New over masters, closed when the test ends. It
// takes any client settings (redlock.AnyClientOptions): the tests build
// clients whose reads end at ReadTimeout alone on purpose (clientOf's
// default), besides those New takes.
func newClient(t *testing.T, masters []redis.UniversalClient, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.New(masters, append([]redlock.Option{redlock.AnyClientOptions()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newSingle is redlock.NewSingle over rdb, closed when the test ends; it
// takes any client settings, as newClient does.
func newSingle(t *testing.T, rdb redis.UniversalClient, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.NewSingle(rdb, append([]redlock.Option{redlock.AnyClientOptions()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// cluster starts n masters and a Client over them. Its node timeout is
// generous (tests share a busy 2-core machine) unless opts set another.
func cluster(t *testing.T, n int, opts ...redlock.Option) ([]*redistest.Server, []redis.UniversalClient, *redlock.Client) {
	t.Helper()
	servers := redistest.Start(t, n)
	clients := redistest.Clients(t, servers)
	opts = append([]redlock.Option{redlock.WithNodeTimeout(500 * time.Millisecond)}, opts...)
	return servers, clients, newClient(t, clients, opts...)
}

// clientOf returns a go-redis client of s (Server.Client, with opts),
// closed when the test ends. It has sent nothing yet.
func clientOf(t *testing.T, s *redistest.Server, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	rdb := s.Client(opts...)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// pinged is clientOf, after one PING: the client holds an open connection.
func pinged(t *testing.T, s *redistest.Server, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	rdb := clientOf(t, s, opts...)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return rdb
}

// bounded sets ContextTimeoutEnabled, as the README advises: a read ends
// at the request's deadline, not at the client's ReadTimeout.
func bounded(o *redis.Options) { o.ContextTimeoutEnabled = true }

// oneLane sets a pool of 4 connections: the Client runs one lane to the
// master (a lane per 4 connections of the pool, up to 8).
func oneLane(o *redis.Options) { o.PoolSize = 4 }

// boundedClients returns a pinged client per server whose reads end at the
// request's deadline (bounded).
func boundedClients(t *testing.T, servers []*redistest.Server) []redis.UniversalClient {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = pinged(t, s, bounded)
	}
	return clients
}

// proxyTo starts a Proxy to addr, closed when the test ends.
func proxyTo(t *testing.T, addr string) *redistest.Proxy {
	t.Helper()
	p, err := redistest.NewProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// proxied returns, per server, a pinged client whose connections go through
// a Proxy the test controls, bounded when bound is set.
func proxied(t *testing.T, servers []*redistest.Server, bound bool, opts ...func(*redis.Options)) ([]redis.UniversalClient, []*redistest.Proxy) {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	proxies := make([]*redistest.Proxy, len(servers))
	for i, s := range servers {
		p := proxyTo(t, s.Addr())
		clients[i] = pinged(t, s, append([]func(*redis.Options){func(o *redis.Options) {
			o.Addr = p.Addr()
			o.ContextTimeoutEnabled = bound
		}}, opts...)...)
		proxies[i] = p
	}
	return clients, proxies
}

// aclUser creates on s a user name, password "pw", with rules, and returns
// a pinged, bounded client that logs in as it (opts may change that).
func aclUser(t *testing.T, s *redistest.Server, name string, rules []string, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	admin := clientOf(t, s)
	args := append([]any{"acl", "setuser", name, "on", ">pw"}, anys(rules)...)
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	return pinged(t, s, append([]func(*redis.Options){bounded, func(o *redis.Options) { o.Username, o.Password = name, "pw" }}, opts...)...)
}

func anys(ss []string) []any {
	as := make([]any, len(ss))
	for i, s := range ss {
		as[i] = s
	}
	return as
}

// noKillUser creates, on each master, a user that may do everything but
// CLIENT KILL (a common hardening; managed services often deny it too), and
// returns bounded clients that log in as it through a proxy each.
func noKillUser(t *testing.T, servers []*redistest.Server) ([]redis.UniversalClient, []*redistest.Proxy) {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	proxies := make([]*redistest.Proxy, len(servers))
	for i, s := range servers {
		p := proxyTo(t, s.Addr())
		clients[i] = aclUser(t, s, "locker", []string{"~*", "&*", "+@all", "-client|kill"}, func(o *redis.Options) { o.Addr = p.Addr() })
		proxies[i] = p
	}
	return clients, proxies
}

// noInfoUser returns a bounded client of s that logs in as a user who may
// do everything but INFO: the Client then measures no clock offset.
func noInfoUser(t *testing.T, s *redistest.Server) redis.UniversalClient {
	t.Helper()
	return aclUser(t, s, "noinfo", []string{"~*", "&*", "+@all", "-info"})
}

// warm obtains and releases a lock with each Client: their lanes hold a
// connection to every master that answered.
func warm(t *testing.T, cs ...*redlock.Client) {
	t.Helper()
	ctx := context.Background()
	for _, c := range cs {
		l, err := c.Obtain(ctx, "warm", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// obtain is c.Obtain of key for ttl, which must succeed.
func obtain(t *testing.T, c *redlock.Client, key string, ttl time.Duration, opts ...redlock.ObtainOption) *redlock.Lock {
	t.Helper()
	l, err := c.Obtain(context.Background(), key, ttl, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// replicated starts a master with a replica, and returns both and a client
// of the master (counting its WAITs).
func replicated(t *testing.T) (master, replica *redistest.Server, rdb *redis.Client, wc *waitCounter) {
	t.Helper()
	master = redistest.Start(t, 1)[0]
	replica = redistest.StartReplica(t, master)
	rdb = clientOf(t, master)
	wc = &waitCounter{t: t}
	rdb.AddHook(wc)
	return master, replica, rdb, wc
}

// The node timeout and the acknowledgement timeout of the replica tests.
const (
	ackNodeTimeout = 400 * time.Millisecond
	ackWait        = 100 * time.Millisecond
)

// slowThird starts three masters, the third behind a proxy, warms the
// Client up (connections taken, scripts loaded on every master), and
// returns the Client, the servers, the proxy and a direct client of the
// third master.
func slowThird(t *testing.T, opts ...redlock.Option) (*redlock.Client, []*redistest.Server, *redistest.Proxy, *redis.Client) {
	t.Helper()
	servers := redistest.Start(t, 3)
	slow, proxies := proxied(t, servers[2:], true)
	direct := clientOf(t, servers[2])
	c := newClient(t, append(redistest.Clients(t, servers[:2]), slow[0]), append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
	warm(t, c)
	redistest.Eventually(t, func() error { // the slow master's Release may still be on its way
		if n, _ := direct.Exists(context.Background(), "warm").Result(); n != 0 {
			return errors.New("warm still on the slow master")
		}
		return nil
	})
	return c, servers, proxies[0], direct
}

// sentinelPair starts a master, its replica and a Sentinel watching them
// (name "m", quick to fail over), and returns them with a function that
// waits until the Sentinel names port as the master. It returns once the
// Sentinel names the master and knows the replica, its link up: it can be
// promoted.
func sentinelPair(t *testing.T) (master, replica, sentinel *redistest.Server, says func(port int)) {
	t.Helper()
	master = redistest.Start(t, 1)[0]
	replica = redistest.StartReplica(t, master)
	sentinel = redistest.Start(t, 1, redistest.Options{Sentinel: []string{
		fmt.Sprintf("sentinel monitor m 127.0.0.1 %d 1", master.Port()),
		"sentinel down-after-milliseconds m 200",
		"sentinel failover-timeout m 5000",
	}})[0]
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
	t.Cleanup(func() { sc.Close() })
	says = func(port int) {
		t.Helper()
		redistest.Eventually(t, func() error {
			addr, err := sc.GetMasterAddrByName(context.Background(), "m").Result()
			if err != nil || len(addr) != 2 || addr[1] != strconv.Itoa(port) {
				return fmt.Errorf("the Sentinel names %v as the master (%v), want port %d", addr, err, port)
			}
			return nil
		})
	}
	says(master.Port())
	redistest.Eventually(t, func() error {
		rs, err := sc.Replicas(context.Background(), "m").Result()
		for _, r := range rs {
			if r["port"] == strconv.Itoa(replica.Port()) && r["master-link-status"] == "ok" {
				return nil
			}
		}
		return fmt.Errorf("the Sentinel knows no replica with its link up: %v (%v)", rs, err)
	})
	return master, replica, sentinel, says
}

// failoverClient is a go-redis Sentinel failover client of the master the
// Sentinel names "m", closed when the test ends.
func failoverClient(t *testing.T, sentinel *redistest.Server) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "m",
		SentinelAddrs:         []string{sentinel.Addr()},
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterClient is rc.Client(opts...), closed when the test ends.
func clusterClient(t *testing.T, rc *redistest.Cluster, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	cc := rc.Client(opts...)
	t.Cleanup(func() { cc.Close() })
	return cc
}

// frozenColdCluster starts a one-shard Redis Cluster and freezes it before
// any client has loaded its slot map: a Cluster that is down (frozen,
// partitioned) when the application starts.
func frozenColdCluster(t *testing.T) *redistest.Cluster {
	t.Helper()
	cl := redistest.StartCluster(t, 1)
	takeDown(t, "frozen", cl.Servers...)
	return cl
}

// redlockBinary builds the redlock command (cmd/redlock) and returns its
// path. It skips without a go command.
func redlockBinary(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build cmd/redlock")
	}
	bin := filepath.Join(t.TempDir(), "redlock")
	if out, err := exec.Command(gobin, "build", "-o", bin, "./cmd/redlock").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/redlock: %v\n%s", err, out)
	}
	return bin
}

// Reading the masters.

// get returns key's value on the master, "" when absent.
func get(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	v, err := rdb.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// holdersOf returns, per master, the value of key ("" when absent).
func holdersOf(t *testing.T, clients []redis.UniversalClient, key string) []string {
	t.Helper()
	vs := make([]string, len(clients))
	for i, c := range clients {
		vs[i] = get(t, c, key)
	}
	return vs
}

// count returns how many of vs are v.
func count(vs []string, v string) int {
	n := 0
	for _, x := range vs {
		if x == v {
			n++
		}
	}
	return n
}

// holdsAll reports how many masters hold every key of keys for token.
func holdsAll(t *testing.T, clients []redis.UniversalClient, token string, keys ...string) int {
	t.Helper()
	n := 0
	for _, c := range clients {
		all := true
		for _, k := range keys {
			all = all && get(t, c, k) == token
		}
		if all {
			n++
		}
	}
	return n
}

// held waits until token holds key on n masters (Obtain and Extend return
// at a quorum: the last master's request may still be on its way).
func held(t *testing.T, clients []redis.UniversalClient, key, token string, n int) {
	t.Helper()
	redistest.Eventually(t, func() error {
		if vs := holdersOf(t, clients, key); count(vs, token) != n {
			return fmt.Errorf("masters hold %s = %q, want %q on %d", key, vs, token, n)
		}
		return nil
	})
}

// freed waits, at most d, until no master holds key for token (a Release
// returns at a quorum, a kept or late one comes later); it fails otherwise.
func freed(t *testing.T, d time.Duration, clients []redis.UniversalClient, key, token string) {
	t.Helper()
	redistest.Within(t, d, func() error {
		if vs := holdersOf(t, clients, key); count(vs, token) > 0 {
			return fmt.Errorf("%v on: masters hold %s = %q, want no key of %q", d, key, vs, token)
		}
		return nil
	})
}

// info returns the integer after prefix in the master's INFO section.
func info(t *testing.T, rdb redis.UniversalClient, section, prefix, end string) (int64, bool) {
	t.Helper()
	s, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(s) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			if i := strings.Index(rest, end); i >= 0 {
				rest = rest[:i]
			}
			n, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return n, true
		}
	}
	return 0, false
}

// calls returns how many times the master ran cmd (INFO commandstats).
func calls(t *testing.T, rdb redis.UniversalClient, cmd string) int64 {
	t.Helper()
	n, _ := info(t, rdb, "commandstats", "cmdstat_"+cmd+":calls=", ",")
	return n
}

// scriptsRun counts the scripts the masters ran (EVALSHA and EVAL): a
// waiting Obtain's asks, the Extends and the Releases.
func scriptsRun(t *testing.T, masters ...redis.UniversalClient) (n int64) {
	t.Helper()
	for _, m := range masters {
		n += calls(t, m, "evalsha") + calls(t, m, "eval")
	}
	return n
}

// renewalsRun counts the renewals (and Extends) of held keys that the
// masters ran: the PEXPIREs of the extend scripts, which carry them one
// or many to a call.
func renewalsRun(t *testing.T, masters ...redis.UniversalClient) (n int64) {
	t.Helper()
	for _, m := range masters {
		n += calls(t, m, "pexpire")
	}
	return n
}

// asksOn counts what the masters ran for waiters and holders: plain SETs
// (a woken waiter's ask) and scripts (a waiter's ask, a release, an undo).
func asksOn(t *testing.T, masters []redis.UniversalClient) (n int64) {
	t.Helper()
	for _, m := range masters {
		n += calls(t, m, "set")
	}
	return n + scriptsRun(t, masters...)
}

// settled waits until the master has run want SETs in all (the last
// attempt's may still be on its way when Obtain returns), and checks that
// no more come within a moment.
func settled(t *testing.T, rdb redis.UniversalClient, want int64) {
	t.Helper()
	check := func() error {
		if got := calls(t, rdb, "set"); got != want {
			return fmt.Errorf("%d SETs reached the master, want %d", got, want)
		}
		return nil
	}
	redistest.Eventually(t, check)
	never(t, 20*time.Millisecond, check) // a retry past the budget would come now
}

// connsReceived returns how many connections the master has accepted.
func connsReceived(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	n, ok := info(t, rdb, "stats", "total_connections_received:", "\r")
	if !ok {
		t.Fatal("no total_connections_received")
	}
	return n
}

// subscribers returns how many clients of the master subscribe to channel
// (sharded: SSUBSCRIBE, a Redis Cluster's per-key channels).
func subscribers(t *testing.T, rdb redis.UniversalClient, channel string, sharded bool) int64 {
	t.Helper()
	var n map[string]int64
	var err error
	if sharded {
		n, err = rdb.PubSubShardNumSub(context.Background(), channel).Result()
	} else {
		n, err = rdb.PubSubNumSub(context.Background(), channel).Result()
	}
	if err != nil {
		t.Fatal(err)
	}
	return n[channel]
}

// laneWorkers counts the running lane workers of every Client.
func laneWorkers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "redlock.(*lane).work(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// lowestSlots returns the slot range that starts at slot 0, as the
// cluster reports it: redistest gives it to a cluster's first server.
func lowestSlots(t *testing.T, cc *redis.ClusterClient) (lo, hi int64) {
	t.Helper()
	shards, err := cc.ClusterShards(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shards {
		for _, r := range s.Slots {
			if r.Start == 0 {
				return 0, r.End
			}
		}
	}
	t.Fatalf("no shard serves slot 0: %v", shards)
	return 0, 0
}

// describe names a command briefly: its name and arguments, scripts elided.
func describe(c redis.Cmder) string {
	var b strings.Builder
	for i, a := range c.Args() {
		if i > 0 {
			b.WriteByte(' ')
		}
		s := fmt.Sprint(a)
		if len(s) > 12 {
			s = s[:12] + "..."
		}
		b.WriteString(s)
	}
	return b.String()
}

// yield lets the other goroutines run n times over: points in their
// progress that vary with n, reached without waiting on the clock.
func yield(n int) {
	for range n * 20 {
		runtime.Gosched()
	}
}
