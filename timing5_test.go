package redlock_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Fifth adversarial review: each test here fails on the code it was
// written against (dd0ca22), and its doc says what the defect is.

// TestDryPoolGivesTheApplicationNoVictim: a connection the lane gives up
// for a reason other than a socket error (a hook's or a limiter's refusal,
// a panic) is healthy to go-redis, so the lane keeps it out of the
// client's pool until a fresh connection has killed it: "the application
// never gets a connection the lane will kill" (transport.go drop, and
// TestBarrierKillsNoStrangerAfterARefusal). But take gives such victims
// back at once when the pool is dry (poolDry: no idle connection, the pool
// full), and they "stay to be killed": an application goroutine waiting
// for a connection of that pool gets the victim, healthy, and the lane's
// next fresh connection kills it by ID and address while the application
// uses it. Here a pool of two: the application holds one connection and
// waits for the other, which the lane held when a hook refused its batch.
//
// Suggested fix: never hand a victim to the pool while it is still to be
// killed. When the pool is dry, end it on its own connection instead (a
// command sent on it runs after whatever it still carries: e.g. CLIENT
// KILL ID of its own ID, then Close, which go-redis discards after the
// EOF), or give it back only once it is no victim any more.
func TestDryPoolGivesTheApplicationNoVictim(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) {
		o.PoolSize = 2 // one lane
		o.PoolTimeout = 5 * time.Second
		o.ContextTimeoutEnabled = true
	})
	defer rdb.Close()
	hook := &refuser{}
	rdb.AddHook(hook)
	c := newClient(t, []redis.UniversalClient{rdb}, redlock.WithNodeTimeout(300*time.Millisecond))
	l, err := c.Obtain(ctx, "k", time.Minute) // the lane holds a connection
	if err != nil {
		t.Fatal(err)
	}
	admin := redistest.Clients(t, servers)[0]
	var laneID int64
	for _, line := range strings.Split(admin.ClientList(ctx).Val(), "\n") {
		if strings.Contains(line, "cmd=set") {
			fmt.Sscanf(line[strings.Index(line, "id="):], "id=%d", &laneID)
		}
	}
	hook.armed.Store(true)
	if err := l.Release(ctx); err == nil { // the lane keeps its connection out of the pool
		t.Fatal("Release through a refusing hook succeeded")
	}
	app1 := rdb.Conn() // the application takes the pool's other connection
	defer app1.Close()
	if err := app1.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	app2 := rdb.Conn() // and waits for another
	defer app2.Close()
	got := make(chan error, 1)
	go func() { got <- app2.Ping(ctx).Err() }()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiting application's PING: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the application waited 3s for a connection")
	}
	id, err := app2.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if id != laneID {
		return // the application got a connection of its own: the victim was killed before it went back
	}
	app1.Close() // a connection is free again: the lane takes it and runs its barrier
	time.Sleep(500 * time.Millisecond)
	if err := app2.Ping(ctx).Err(); err != nil {
		t.Fatalf("the application's connection (client ID %d: the lane's, given up after its hook refused a batch, and handed to the application when the pool ran dry) was killed by the lane's barrier while the application used it: %v", id, err)
	}
}

// TestMastersListLeaksNoPartOfAPassword: a ',' may stand unencoded in a
// URL's user part (RFC 3986 sub-delims), so "redis://bob:Xq7,Zr9@host:port"
// is a valid URL with the password "Xq7,Zr9". The redlock command splits
// --masters on every ',' (cmd/redlock conn.go), so it hands
// MasterOptions "redis://bob:Xq7" and "Zr9@host:port". The first has no
// '@', so safeName takes "bob:Xq7" for its host and port, and the parser's
// message ("invalid port \":Xq7\" after host") is kept: the usage error
// repeats the first part of the password, twice. bench does the same
// (bench/main.go splits -masters on ','; parseMaster's error and
// redactArgs, which the report records, print "redis://bob:Xq7"), and
// bench's redactURL also leaves a password query parameter in full when
// the query does not parse (a ';', or a '%' that is no escape:
// "?password=s3cret;x"), which go-redis accepts.
//
// Suggested fix: split the list only at a ',' that begins a new master
// (the piece after it has a scheme, or no '@'), or take the flag
// repeatedly; and name a piece that does not parse by its position in the
// list, never by its text. In redactURL, hide the whole query when it does
// not parse.
func TestMastersListLeaksNoPartOfAPassword(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build cmd/redlock")
	}
	bin := filepath.Join(t.TempDir(), "redlock")
	if out, err := exec.Command(gobin, "build", "-o", bin, "./cmd/redlock").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/redlock: %v\n%s", err, out)
	}
	const password = "Xq7,Zr9"
	out, _ := exec.Command(bin, "status", "--masters", "redis://bob:"+password+"@127.0.0.1:1", "--key", "k").CombinedOutput()
	for _, part := range strings.Split(password, ",") {
		if strings.Contains(string(out), part) {
			t.Fatalf("redlock status with a password holding a ',' repeats %q of it:\n%s", part, out)
		}
	}
}
