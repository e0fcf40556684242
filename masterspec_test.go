package redlock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redlock-go/redlock"
)

// MasterOptions: the master specs it parses.

// TestMasterOptions: MasterOptions takes an address, a host, a redis:// URL
// with its user and password, and a unix:// socket, with MaxRetries -1 and
// ContextTimeoutEnabled set; it refuses a bad spec without showing its
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
