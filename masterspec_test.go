package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// MasterOptions: the master specs it parses.

// TestMasterOptions: MasterOptions takes an address, a host, a redis:// URL
// with its user and password, and a unix:// socket, with MaxRetries -1,
// ContextTimeoutEnabled set and maintenance notifications off; it refuses a bad spec without showing its
// password; NewMasters makes a client per spec.
func TestMasterOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ spec, network, addr, user, password string }{
		{"10.0.0.7:6380", "tcp", "10.0.0.7:6380", "", ""},
		{"redis-a", "tcp", "redis-a:6379", "", ""},
		{"[::1]:7000", "tcp", "[::1]:7000", "", ""},
		{"redis://alice:s3cret@redis-b:6381/2", "tcp", "redis-b:6381", "alice", "s3cret"},
		{"unix:///run/redis.sock", "unix", "/run/redis.sock", "", ""},
	} {
		o, err := redlock.MasterOptions(tc.spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		if o.Network != tc.network || o.Addr != tc.addr || o.Username != tc.user || o.Password != tc.password {
			t.Errorf("%s: network %q addr %q user %q password %q", tc.spec, o.Network, o.Addr, o.Username, o.Password)
		}
		if o.MaxRetries != -1 || !o.ContextTimeoutEnabled {
			t.Errorf("%s: MaxRetries %d ContextTimeoutEnabled %v, want -1 and true", tc.spec, o.MaxRetries, o.ContextTimeoutEnabled)
		}
		if o.MaintNotificationsConfig == nil || o.MaintNotificationsConfig.Mode != maintnotifications.ModeDisabled {
			t.Errorf("%s: maintenance notifications %+v, want disabled", tc.spec, o.MaintNotificationsConfig)
		}
	}
	for _, bad := range []string{"", "redis://user:pa%ss@host:1", "redis://:sec/ret@host:1", "rediss://x:topsecret@[::1", "http://h:1"} {
		_, err := redlock.MasterOptions(bad)
		if !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("%q: %v, want ErrInvalidArgument", bad, err)
		}
		if err != nil && (strings.Contains(err.Error(), "pa%ss") || strings.Contains(err.Error(), "ss@host") || strings.Contains(err.Error(), "sec/ret") || strings.Contains(err.Error(), "topsecret")) {
			t.Errorf("%q: the error shows the password: %v", bad, err)
		}
	}
	clients, err := redlock.NewMasters("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3")
	if err != nil || len(clients) != 3 {
		t.Fatalf("NewMasters: %d clients, %v", len(clients), err)
	}
	for _, c := range clients {
		c.Close()
	}
}

// TestMasterOptionsClientsDialAtOnceWithoutARace: a client made from
// MasterOptions dials several connections at once (as a Client's lanes and
// a user's own commands do) against a real redis-server, which refuses
// go-redis's maintenance-notifications handshake, with no data race: -race
// fails the test otherwise.
func TestMasterOptionsClientsDialAtOnceWithoutARace(t *testing.T) {
	servers := redistest.Start(t, 1)
	for range 10 {
		o, err := redlock.MasterOptions(servers[0].Addr())
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(o)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				c := rdb.Conn()
				defer c.Close()
				if err := c.Ping(context.Background()).Err(); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		rdb.Close()
	}
}
