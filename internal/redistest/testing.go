package redistest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvRequire names the environment variable that turns a missing redis-server
// from a skip into a failure. scripts/test.sh and CI set it to 1.
const EnvRequire = "REDLOCK_REQUIRE_REDIS"

// Require skips the test when no redis-server is available, or fails it when
// $REDLOCK_REQUIRE_REDIS is 1, so CI cannot pass by skipping.
func Require(tb testing.TB) {
	tb.Helper()
	if _, err := Binary(); err != nil {
		if os.Getenv(EnvRequire) == "1" {
			tb.Fatalf("%v (%s=1)", err, EnvRequire)
		}
		tb.Skipf("skipping: %v", err)
	}
}

// Start starts n servers in parallel, with opts[0] if given, and closes them in
// tb.Cleanup. It calls [Require] first and tb.Fatal on any start error.
func Start(tb testing.TB, n int, opts ...Options) []*Server {
	tb.Helper()
	Require(tb)
	var o Options
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		tb.Fatalf("redistest.Start: got %d Options, want at most 1", len(opts))
	}
	servers, err := NewServers(n, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		for _, s := range servers {
			if err := s.Close(); err != nil {
				tb.Errorf("redistest: close %s: %v", s.Addr(), err)
			}
		}
	})
	return servers
}

// Clients returns one [Server.Client] per server, closed in tb.Cleanup (before
// the servers, if they came from [Start] earlier in the same test), with
// ContextTimeoutEnabled set: with MaxRetries -1, the settings redlock.New
// requires of a master's client. Each client
// has sent one PING, so it holds an open connection and a test's first command
// does not pay for the dial and handshake (several round trips, which can exceed
// a few-millisecond node timeout under -race on a busy machine). It calls
// tb.Fatal if a server does not answer; use [Server.Client] for a cold client.
func Clients(tb testing.TB, servers []*Server) []redis.UniversalClient {
	tb.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	}
	tb.Cleanup(func() {
		for _, c := range clients {
			c.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, c := range clients {
		if err := c.Ping(ctx).Err(); err != nil {
			tb.Fatalf("redistest: PING %s: %v", servers[i].Addr(), err)
		}
	}
	return clients
}

// StartReplica starts a replica of master with [NewReplica] and closes it
// in tb.Cleanup. It calls tb.Fatal on any error.
func StartReplica(tb testing.TB, master *Server) *Server {
	tb.Helper()
	Require(tb)
	s, err := NewReplica(master, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("redistest: close %s: %v", s.Addr(), err)
		}
	})
	return s
}

// StartCluster starts a Redis Cluster of masters nodes and closes it in
// tb.Cleanup. It calls [Require] first and tb.Fatal on any error.
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	Require(tb)
	c, err := NewCluster(masters)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("redistest: close cluster: %v", err)
		}
	})
	return c
}

// Eventually polls check until it returns nil, for at most 5s, and fails tb
// with check's last error otherwise: for effects that follow a call's return
// (requests finishing in the background).
func Eventually(tb testing.TB, check func() error) {
	tb.Helper()
	var err error
	for range 500 {
		if err = check(); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatal(err)
}

// Within polls check every 10ms until it returns nil, and fails tb with
// check's last error once d has passed: a wait for a state that must come
// within d, which returns as soon as it has.
func Within(tb testing.TB, d time.Duration, check func() error) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
