package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// Inspect: who holds a key on every master.

// TestInspectShowsEveryMaster: Inspect shows, per master, the token, TTL
// and fence of the key, or why the master did not answer, and Holder names
// the token that holds a quorum, if any.
func TestInspectShowsEveryMaster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers, clients, c := cluster(t, 3, redlock.WithKeyPrefix("lock:"), redlock.WithNodeTimeout(100*time.Millisecond))
	st, err := c.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if tok, n := st.Holder(); tok != "" || n != 0 {
		t.Fatalf("free key: holder %q on %d", tok, n)
	}
	l := obtain(t, c, "k", time.Minute)
	redistest.Eventually(t, func() error {
		st, err = c.Inspect(ctx, "k")
		if tok, n := st.Holder(); err != nil || tok != l.Token() || n != 3 {
			return errors.New("not on every master yet")
		}
		return nil
	})
	clients[2].Set(ctx, "lock:k", "stranger", 0)
	takeDown(t, "frozen", servers[1])
	st, err = c.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	m := st.Masters
	if m[0].Token != l.Token() || m[0].TTL <= 0 || m[0].TTL > time.Minute || m[1].Err == nil || m[2].Token != "stranger" || m[2].TTL != -1 {
		t.Fatalf("masters %+v", m)
	}
	if tok, n := st.Holder(); tok != "" || n != 1 {
		t.Fatalf("no token on a quorum: holder %q on %d", tok, n)
	}
}

// TestInspectReadsEveryKeyObtainTakes: Inspect reads the lock key and its
// fence counter in one script, which on a Redis Cluster must share a slot:
// a key Obtain takes without fencing, whose counter cannot share its slot
// ("job}1": a '}' without a hash tag), is still read, never refused as
// CROSSSLOT.
func TestInspectReadsEveryKeyObtainTakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rc := redistest.StartCluster(t, 3)
	c := newSingle(t, clusterClient(t, rc, func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true }))
	l := obtain(t, c, "job}1", time.Minute)
	defer l.Release(ctx)
	s, err := c.Inspect(ctx, "job}1")
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Masters[0]; m.Err != nil || m.Token != l.Token() {
		t.Fatalf("Inspect of a lock Obtain took: %+v", m)
	}
}
