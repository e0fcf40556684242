package wire

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// The barrier (barrier.go), on real servers.

// TestBarrierKillsNoStranger: client IDs are a per-process counter, so
// after a master restarts the ID of the lane's old connection names some
// other client of the new process. A barrier that sent CLIENT KILL ID
// <old> alone would kill whoever has that ID now: another application's
// connection, a replica's link, a monitoring tool, another process's lock
// lane mid-batch. (It names the address too.)
func TestBarrierKillsNoStranger(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) { o.PoolSize = 4 }) // one lane
	t.Cleanup(func() { rdb.Close() })                                   // after the master's cleanup
	const timeout = 2 * time.Second
	m := newMaster(t, rdb, Config{NodeTimeout: timeout})
	if err := cycle(m, "k", timeout); err != nil {
		t.Fatal(err)
	}
	old := connID(m)
	if old == 0 {
		t.Fatal("the lane does not know its connection's ID")
	}

	if err := servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	// Another application connects to the restarted master; one of its
	// connections gets the ID the lane's old connection had.
	other := servers[0].Client(func(o *redis.Options) { o.PoolSize = 100 })
	defer other.Close()
	var victim *redis.Conn
	for victim == nil {
		cn := other.Conn()
		defer cn.Close()
		id, err := cn.ClientID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case id == old:
			victim = cn
		case id > old:
			t.Skipf("the restarted master's IDs passed %d already", old)
		}
	}

	// The lane's next request finds its connection closed and replaces it.
	if err := lock(m, "k2", "tok", timeout); err != nil {
		t.Fatal(err)
	}
	_ = unlock(m, "k2", "tok", timeout)
	if err := victim.Ping(ctx).Err(); err != nil {
		t.Fatalf("the other application's connection (ID %d on the restarted master) was killed by the lane's barrier: %v", old, err)
	}
}

// TestBarrierComesBackAfterABusyMaster: a master busy in a slow script (an
// application's, a FUNCTION's) answers -BUSY to every command but a few.
// When that happens to a lane's first batch on a connection, CLIENT INFO
// (and, on a new master, the CLIENT KILL probe) gets that error reply,
// which says nothing of whether the master allows the barrier: taken for
// "this master denies it", the lane would have no barrier for the Client's
// lifetime from a BUSY blip on, and order across replaced connections
// would rest on the clocks (extend.lua's late deadline), on a master that
// allows CLIENT KILL.
func TestBarrierComesBackAfterABusyMaster(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdb := servers[0].Client(func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
		o.PoolSize = 4 // one lane
	})
	t.Cleanup(func() { rdb.Close() }) // after the master's cleanup
	admin := servers[0].Client()
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "10").Err(); err != nil {
		t.Fatal(err)
	}
	const timeout = 2 * time.Second
	m := newMaster(t, rdb, Config{NodeTimeout: timeout})
	barrier := func() bool {
		time.Sleep(100 * time.Millisecond) // idle: no tick runs
		return m.st.killAllowed()          // the next connection will have the barrier
	}
	if err := cycle(m, "warm", timeout); err != nil {
		t.Fatal(err)
	}
	if !barrier() {
		t.Fatal("no barrier on a healthy master")
	}
	// Another application's slow script keeps the master busy for a moment.
	busy := make(chan error, 1)
	go func() {
		busy <- admin.Eval(ctx, "local n = 0 for i = 1, 60000000 do n = n + i end return 0", nil).Err()
	}()
	time.Sleep(50 * time.Millisecond)
	err := cycle(m, "during", timeout) // the lane's first batch on a connection: CLIENT INFO gets -BUSY
	t.Logf("a lock cycle while the master is busy: %v", err)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cycle(m, "after", timeout); err != nil {
			t.Fatalf("cycle %d after the script: %v", i, err)
		}
	}
	if !barrier() {
		t.Fatal("the master is healthy again and allows CLIENT KILL, but the lane never uses the barrier again")
	}
}
