package redlock_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// refusedWith checks that err is New's refusal and says every part of want.
func refusedWith(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("%s: %v, want ErrInvalidArgument", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("%s: %v, want it to say %q", what, err, w)
		}
	}
}

// TestNewRefusesAClientThatRetries: a master whose go-redis client retries
// commands (go-redis's default for a standalone or Sentinel client) is
// refused by New and NewSingle, naming the master and the fix; a retried
// acquire can find its own key and report the lock taken.
func TestNewRefusesAClientThatRetries(t *testing.T) {
	t.Parallel()
	std := redis.NewClient(&redis.Options{Addr: "10.0.0.7:6379", ContextTimeoutEnabled: true})
	defer std.Close()
	ok := redis.NewClient(&redis.Options{Addr: "10.0.0.8:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer ok.Close()
	_, err := redlock.New([]redis.UniversalClient{ok, std})
	refusedWith(t, "New with a client that retries", err, "master 1 (10.0.0.7:6379)", "retries commands (MaxRetries 3)", "set MaxRetries: -1 and ContextTimeoutEnabled: true", "redlock.MasterOptions")
	t.Log(err)
	_, err = redlock.NewSingle(std)
	refusedWith(t, "NewSingle with a client that retries", err, "master 0 (10.0.0.7:6379)", "MaxRetries 3")

	fo := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"10.0.0.9:26379"}, ContextTimeoutEnabled: true})
	defer fo.Close()
	_, err = redlock.NewSingle(fo)
	refusedWith(t, "NewSingle with a Sentinel client that retries", err, "MaxRetries 3", "redis.FailoverOptions")

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"10.0.0.10:7000"}, MaxRetries: 2, ContextTimeoutEnabled: true})
	defer cc.Close()
	_, err = redlock.NewSingle(cc)
	refusedWith(t, "NewSingle with a Cluster client that retries", err, "MaxRetries 2", "redis.ClusterOptions")
}

// TestNewRefusesAClientWhoseReadsIgnoreTheDeadline: a master whose client
// does not end a read at the request's deadline (ContextTimeoutEnabled
// false, go-redis's default) is refused, standalone, Sentinel or Cluster.
func TestNewRefusesAClientWhoseReadsIgnoreTheDeadline(t *testing.T) {
	t.Parallel()
	std := redis.NewClient(&redis.Options{Addr: "10.0.0.7:6379", MaxRetries: -1})
	defer std.Close()
	_, err := redlock.NewSingle(std)
	refusedWith(t, "NewSingle with reads bounded by ReadTimeout alone", err, "master 0 (10.0.0.7:6379)", "ContextTimeoutEnabled false", "set MaxRetries: -1 and ContextTimeoutEnabled: true")
	t.Log(err)

	fo := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"10.0.0.9:26379"}, MaxRetries: -1})
	defer fo.Close()
	_, err = redlock.NewSingle(fo)
	refusedWith(t, "NewSingle with a Sentinel client", err, "ContextTimeoutEnabled false", "redis.FailoverOptions")

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"10.0.0.10:7000"}})
	defer cc.Close()
	_, err = redlock.NewSingle(cc)
	refusedWith(t, "NewSingle with a Cluster client", err, "ContextTimeoutEnabled false", "redis.ClusterOptions")
}

// TestNewTakesClientsBuiltByMasterOptions: the clients MasterOptions and
// NewMasters build, and Sentinel and Cluster clients set as New's doc
// says, are taken.
func TestNewTakesClientsBuiltByMasterOptions(t *testing.T) {
	t.Parallel()
	masters, err := redlock.NewMasters("10.0.0.7:6379", "redis://10.0.0.8:6379/2", "unix:///tmp/redlock-new-test.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, m := range masters {
			m.Close()
		}
	}()
	c, err := redlock.New(masters)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	fo := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"10.0.0.9:26379"}, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer fo.Close()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"10.0.0.10:7000"}, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer cc.Close()
	c, err = redlock.New([]redis.UniversalClient{fo, cc, masters[0]})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestNewRefusesTwoDatabasesOfOneServer: two databases of one server (by
// TCP address or Unix socket) stop, restart and lose data together, so New
// refuses them as two masters, saying why.
func TestNewRefusesTwoDatabasesOfOneServer(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "redis.sock")
	for _, specs := range [][]string{
		{"redis://127.0.0.1:6379/0", "redis://10.0.0.8:6379", "redis://127.0.0.1:6379/1"},
		{"unix://" + sock + "?db=0", "unix://" + sock + "?db=3"},
		{"localhost:6379", "redis://127.0.0.1:6379/5"},
	} {
		masters, err := redlock.NewMasters(specs...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = redlock.New(masters)
		refusedWith(t, fmt.Sprintf("New(%v)", specs), err, "same server", "independent masters", "databases of one server")
		t.Log(err)
		for _, m := range masters {
			m.Close()
		}
	}
}

// TestRedistestClientsAreTakenByNew: the tests' clients of real servers
// (redistest.Clients) have the settings New requires.
func TestRedistestClientsAreTakenByNew(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 1)
	c, err := redlock.New(redistest.Clients(t, servers))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
