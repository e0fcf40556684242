package redlock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The errors an operator reads: each master's NodeError names the last
// real cause seen of that master (a refused connection, WRONGPASS, NOPERM,
// READONLY), in its text and through errors.Is and errors.As.

// refusedAddr returns a loopback address nobody listens on: a dial there
// is refused at once.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// refusedClient is a client of s's kind (bounded reads) pointed at addr,
// where nobody listens, with go-redis's own dial retries (5, 100ms apart):
// go-redis then goes on dialing past a short request's deadline, on a
// goroutine of its own, and the request itself only hears that its
// deadline passed.
func refusedClient(t *testing.T, s *redistest.Server, addr string) *redis.Client {
	t.Helper()
	return clientOf(t, s, bounded, func(o *redis.Options) {
		o.Addr = addr
		o.DialerRetries = 0 // go-redis's default
		o.DialerRetryTimeout = 0
	})
}

// causeOf returns the NodeError of addr in err's QuorumError.
func causeOf(t *testing.T, err error, addr string) redlock.NodeError {
	t.Helper()
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("no QuorumError in %v", err)
	}
	for _, n := range qe.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	t.Fatalf("no master %s in %v", addr, err)
	return redlock.NodeError{}
}

// refused checks that err names a refused connection for each of addrs,
// in its text, and that errors.Is and errors.As reach it.
func refused(t *testing.T, what string, err error, addrs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("%s: errors.Is(err, ECONNREFUSED) = false: %v", what, err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "dial" {
		t.Errorf("%s: errors.As(err, *net.OpError) found no dial error: %v", what, err)
	}
	for _, a := range addrs {
		n := causeOf(t, err, a)
		if !errors.Is(n.Err, syscall.ECONNREFUSED) || !strings.Contains(n.String(), "connection refused") {
			t.Errorf("%s: master %s does not name its refused connection: %s", what, a, n)
		}
	}
}

// TestRefusedMastersNameTheirCause: with two of three masters refusing
// connections, Obtain's error names the refused connection of each, not
// only the timeout, on the first Obtain (go-redis still dialing when the
// node timeout ends) and the next; so does a single master's, and an
// Extend's.
func TestRefusedMastersNameTheirCause(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, 1)[0]
	down1, down2 := refusedAddr(t), refusedAddr(t)
	c := newClient(t, []redis.UniversalClient{pinged(t, s, bounded), refusedClient(t, s, down1), refusedClient(t, s, down2)},
		redlock.WithNodeTimeout(200*time.Millisecond))
	ctx := context.Background()
	for i := range 2 {
		_, err := c.Obtain(ctx, "refused", time.Minute)
		if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrUnavailable) {
			t.Fatalf("Obtain %d: %v, want ErrNotObtained and ErrUnavailable", i+1, err)
		}
		refused(t, "Obtain", err, down1, down2)
		t.Logf("Obtain %d: %v", i+1, err)
	}

	single := newSingle(t, refusedClient(t, s, down1), redlock.WithNodeTimeout(200*time.Millisecond))
	for i := range 2 {
		_, err := single.Obtain(ctx, "refused", time.Minute)
		if !errors.Is(err, redlock.ErrUnavailable) {
			t.Fatalf("single Obtain %d: %v, want ErrUnavailable", i+1, err)
		}
		refused(t, "single Obtain", err, down1)
		t.Logf("single Obtain %d: %v", i+1, err)
	}
}

// TestExtendNamesTheCauseOfKilledMasters: an Extend (a renewal's request)
// after two of three masters died names their refused connections.
func TestExtendNamesTheCauseOfKilledMasters(t *testing.T) {
	t.Parallel()
	servers := redistest.Start(t, 3)
	clients := make([]redis.UniversalClient, 3)
	for i, s := range servers {
		clients[i] = pinged(t, s, bounded, func(o *redis.Options) { o.DialerRetries = 0 })
	}
	c := newClient(t, clients, redlock.WithNodeTimeout(200*time.Millisecond))
	l := obtain(t, c, "extend-refused", time.Minute)
	for _, s := range servers[1:] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	for range 3 { // the first may meet the closed connections (EOF) instead
		if err = l.Extend(context.Background(), time.Minute); errors.Is(err, syscall.ECONNREFUSED) {
			break
		}
	}
	if !errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("Extend: %v, want ErrUnavailable", err)
	}
	refused(t, "Extend", err, servers[1].Addr(), servers[2].Addr())
	t.Logf("Extend: %v", err)
}

// TestWrongPasswordNamesItsCause: a master whose password is wrong is
// named with its WRONGPASS, which errors.As finds as a redis.Error.
func TestWrongPasswordNamesItsCause(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, 1)[0]
	aclUser(t, s, "locker", []string{"~*", "&*", "+@all"}) // password "pw"
	single := newSingle(t, clientOf(t, s, bounded, func(o *redis.Options) { o.Username, o.Password = "locker", "wrong" }),
		redlock.WithNodeTimeout(200*time.Millisecond))
	_, err := single.Obtain(context.Background(), "wrongpass", time.Minute)
	if !errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("Obtain: %v, want ErrUnavailable", err)
	}
	var re redis.Error
	if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), "WRONGPASS") || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("Obtain: %v, want a WRONGPASS reachable by errors.As", err)
	}
	t.Logf("Obtain: %v", err)
}

// TestRefusedCommandNamesItsCause: a user the ACL denies the lock's
// commands is named with its NOPERM; a replica taken for a master with its
// READONLY.
func TestRefusedCommandNamesItsCause(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, 1)[0]
	denied := aclUser(t, s, "nolock", []string{"~*", "&*", "+@all", "-set", "-evalsha", "-eval"})
	c := newSingle(t, denied, redlock.WithNodeTimeout(200*time.Millisecond))
	_, err := c.Obtain(context.Background(), "noperm", time.Minute)
	var re redis.Error
	if !errors.Is(err, redlock.ErrUnavailable) || !errors.As(err, &re) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("Obtain as a user denied SET: %v, want ErrUnavailable with a NOPERM reachable by errors.As", err)
	}
	t.Logf("NOPERM: %v", err)

	replica := redistest.StartReplica(t, s)
	r := newSingle(t, pinged(t, replica, bounded), redlock.WithNodeTimeout(200*time.Millisecond))
	_, err = r.Obtain(context.Background(), "readonly", time.Minute)
	if !errors.Is(err, redlock.ErrUnavailable) || !errors.As(err, &re) || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("Obtain on a replica: %v, want ErrUnavailable with a READONLY reachable by errors.As", err)
	}
	t.Logf("READONLY: %v", err)
}
