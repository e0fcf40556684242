package redlock

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/wake"
)

// A Client takes locks on a set of masters. Create it with [New] or
// [NewSingle]; it is safe for concurrent use. Close it when done: it owns a
// few goroutines per master that send requests, and requests still in
// flight when a call returns finish in the background. It renews the locks
// of all its watchdogs ([Client.Do], [Lock.KeepAlive]) from one timer, on
// up to 16 goroutines of its own while renewals are due: a held lock costs
// no goroutine.
type Client struct {
	nodes  []*node
	quorum int
	cfg    config
	epoch  time.Time      // the monotonic origin of every Lock's validity
	wg     sync.WaitGroup // the nodes' workers and the renewer's (renewer.go)

	closed   atomic.Bool
	mu       sync.Mutex     // orders Do's entry against Close
	dos      sync.WaitGroup // running Do calls and KeepAlive watchdogs
	closing  chan struct{}  // closed when Close starts
	finished chan struct{}  // closed when Close has finished

	sharded     bool   // a master shards keys by hash slot (Cluster, Ring)
	shardedMask uint64 // bit i: master i is a Redis Cluster (waiters.go)

	wake   *waker // made by the first wait (waiters.go); guarded by mu
	turnID string // this Client's id in the masters' turn queues (internal/wake/turn.go)

	renew atomic.Pointer[renewer] // runs the watchdogs (renewer.go)

	// Pools for the hot path; see round.go.
	rounds, timers sync.Pool
	ttlBox         atomic.Pointer[boxedTTL]
}

// New returns a Client for the Redlock algorithm over N independent masters:
// a lock is held when a quorum of N/2+1 masters granted it within its
// validity. Each master is any go-redis client: a standalone server, a
// Sentinel failover client or a whole Redis Cluster (not a *redis.Ring, whose
// keys move between shards). New never closes them.
//
// How many masters may be down: N - (N/2+1). One master tolerates none; 2
// tolerate none either (the quorum is both: two masters buy no availability
// over one, only the need for both); 3 and 4 tolerate one; 5 and 6 two; 7
// three. An odd N is the useful choice, an even one is valid.
//
// The masters must be independent: not replicas of each other, and not one
// server twice. New refuses two clients of one server (the same host and
// port, the loopback's names counted as one, or the same Unix socket),
// whatever their databases: databases of one server stop, restart and lose
// data together, so they would cast one server's vote twice. New cannot see
// other aliases (two DNS names of one host).
//
// What the library needs from the masters' clients, which New checks where
// it can read them (a *redis.Client, plain or Sentinel failover, and a
// *redis.ClusterClient); [MasterOptions] and [NewMasters] build clients
// that have them:
//   - MaxRetries: -1. go-redis otherwise retries a command that timed out;
//     a retried acquire can find its own key and report the lock taken.
//     New refuses a client that retries (MaxRetries 0 means go-redis's
//     default, 3). A Cluster client's MaxRedirects is left as it is: the
//     Cluster needs its redirects, and the Client undoes a late refusal
//     from it as its own acquire's.
//   - ContextTimeoutEnabled: true, so that a request's deadline also bounds
//     its socket read. Without it the client's ReadTimeout does: a frozen
//     master would hold the Client's connection to it that long, and
//     requests behind it would fail at once. New refuses it off. The
//     library cannot set either itself: go-redis reads both from the
//     options its connections share with the client, and changing them
//     would change the application's client.
//   - Connections: the Client keeps one connection of each standalone
//     master's pool while it uses it: it gives it back after 15s without
//     requests (1s without the barrier below), and at once when the pool
//     has no idle connection left. A Cluster master uses its pool per
//     request. While it has waiters ([WithWait], [Client.WaitReleased]) or
//     watchdogs ([Client.Do], [Lock.KeepAlive]), the Client also keeps a
//     subscription (a connection of its own) to each master (on a Cluster,
//     one per key waited for, and none for watchdogs), and 2s after.
//   - A read timeout (go-redis's default will do): New refuses a client
//     with ReadTimeout -1 or -2, which would let a frozen master hold the
//     Client forever.
//   - Hooks run for every command the Client sends; a hook must not keep a
//     command after it returns (commands are reused). New adds one hook of
//     its own to each standalone master's client, once per client however
//     many Clients use it (go-redis cannot remove one): it sees the client's
//     dials fail, so that an error can name the cause (a refused
//     connection, a TLS handshake). Its command hooks pass through, but a
//     client with any hook leaves go-redis's hook-free fast path of
//     autopipelining.
//   - CLIENT INFO and CLIENT KILL allowed to the client's user (the
//     defaults): a connection given up with requests in flight is killed
//     before the next request of its lane goes out, so one lock's requests
//     keep their order. Without them, a late acquire can keep a released
//     key until its TTL (a late Extend can neither cut a lock nor revive
//     one; see [Lock.Extend]).
//
// A refusal is an error matching [ErrInvalidArgument] that names the master
// (its index and address) and the fix.
//
// The lock is an efficiency lock: it makes duplicate work rare, not
// impossible (see the package doc). Use fencing tokens checked by the
// resource, a constraint or a consensus store when correctness matters.
func New(masters []redis.UniversalClient, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, invalid("nil option")
		}
		o.apply(&cfg)
	}
	if err := checkMasters(masters, cfg.anyClient); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.acks > 0 {
		if err := checkAcksMasters(masters); err != nil {
			return nil, err
		}
	}
	c := &Client{quorum: len(masters)/2 + 1, cfg: cfg, epoch: time.Now(), closing: make(chan struct{}), finished: make(chan struct{}), turnID: wake.NewID()}
	for i, m := range masters {
		if _, ok := m.(*redis.ClusterClient); ok {
			c.sharded = true
			c.shardedMask |= bit(i)
		}
		c.nodes = append(c.nodes, c.newNode(m, i, len(masters) == 1, func() { c.masterChanged(i) }))
	}
	c.initPools()
	return c, nil
}

// checkMasters refuses masters New cannot run a lock on: none, too many, a
// nil one, one whose reads never time out, a Ring, a client that retries
// or whose reads ignore the request's deadline (unless anyClient, a test's
// setting: export_test.go), the same client or server twice.
// (TestNewRefusesAClientThatRetries, TestNewRefusesAClientWhoseReadsIgnoreTheDeadline,
// TestNewRefusesTwoDatabasesOfOneServer, TestNewTakesClientsBuiltByMasterOptions)
func checkMasters(masters []redis.UniversalClient, anyClient bool) error {
	if len(masters) == 0 {
		return invalid("no masters")
	}
	if len(masters) > maxMasters {
		return invalid("%d masters: at most %d (a quorum lock runs on 3, 5 or 7)", len(masters), maxMasters)
	}
	for i, m := range masters {
		if m == nil {
			return invalid("master %d is nil", i)
		}
		if !boundedReads(m) {
			return invalid("master %d: its client has no read timeout (ReadTimeout -1 or -2): a master that stops answering would hold the Client forever; give it one (go-redis's default will do)", i)
		}
		if _, ok := m.(*redis.Ring); ok {
			return invalid("master %d is a *redis.Ring: a Ring moves keys between its shards when one leaves, which would hand a held lock's key to a shard that never saw it; use a Redis Cluster, or each shard as a master of its own", i)
		}
		if !anyClient {
			if err := checkClientOptions(m, i); err != nil {
				return err
			}
		}
		for j := range i {
			if masters[j] == m {
				return invalid("masters %d and %d are the same client", j, i)
			}
			if a, b := serverOf(masters[j]), serverOf(m); a != "" && a == b {
				return invalid("masters %d and %d are clients of the same server (%s): a quorum needs independent masters, and databases of one server stop, restart and lose data together, so that server would vote twice", j, i, a)
			}
		}
	}
	return nil
}

// checkClientOptions refuses master i's client when it retries commands or
// does not bound its reads by the request's deadline (see New). It reads
// the options of the clients it knows; another implementation of
// redis.UniversalClient passes.
func checkClientOptions(rdb redis.UniversalClient, i int) error {
	var retries int
	var ctxTimeout bool
	fix := "set MaxRetries: -1 and ContextTimeoutEnabled: true, or build it with redlock.MasterOptions / redlock.NewMasters"
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options()
		retries, ctxTimeout = o.MaxRetries, o.ContextTimeoutEnabled
		if o.Addr == "FailoverClient" {
			fix = "set MaxRetries: -1 and ContextTimeoutEnabled: true in its redis.FailoverOptions"
		}
	case *redis.ClusterClient:
		o := c.Options()
		retries, ctxTimeout = o.MaxRetries, o.ContextTimeoutEnabled
		fix = "set MaxRetries: -1 and ContextTimeoutEnabled: true in its redis.ClusterOptions"
	default:
		return nil
	}
	name := fmt.Sprintf("master %d (%s)", i, addrOf(rdb, i))
	if retries > 0 {
		return invalid("%s: its client retries commands (MaxRetries %d): a retried acquire can find its own key and report the lock taken; %s", name, retries, fix)
	}
	if !ctxTimeout {
		return invalid("%s: its client does not end a read at the request's deadline (ContextTimeoutEnabled false): a master that stops answering would hold the Client's connection to it for the client's ReadTimeout, and the requests behind it would fail at once; %s", name, fix)
	}
	return nil
}

// checkAcksMasters refuses, with WithReplicaAcks, a master whose WAIT could
// not share the write's connection.
func checkAcksMasters(masters []redis.UniversalClient) error {
	for i, m := range masters {
		switch m.(type) {
		case *redis.Client:
		case *redis.ClusterClient:
			return invalid("master %d is a Redis Cluster client: WithReplicaAcks needs its WAIT on the connection that carried the write, and go-redis sends a keyless WAIT of a Cluster pipeline to a shard of its own choosing, on a pooled connection", i)
		default:
			return invalid("master %d: WithReplicaAcks needs a *redis.Client (standalone or Sentinel), whose connection the WAIT can share with the write; got %T", i, m)
		}
	}
	return nil
}

// Close stops the client. Calls made after Close starts fail with
// [ErrClosed]. Running [Client.Do] calls and [Lock.KeepAlive] watchdogs see
// their work context cancelled with a cause matching ErrClosed; Close waits
// for each Do's fn to return and its lock to be released, then for the
// requests still in flight to finish or time out (a master that does not
// answer holds it for its client's ReadTimeout at most), and returns when
// every goroutine of the client has ended. It never closes the masters'
// clients. Close is idempotent; a Close called while another runs returns
// when that one does. Calling Close from a Do's fn deadlocks: Close waits
// for that Do.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed.Swap(true) {
		c.mu.Unlock()
		<-c.finished
		return nil
	}
	close(c.closing)
	w := c.wake
	c.mu.Unlock()
	c.renewerOf().close()
	c.dos.Wait()
	if w != nil {
		w.stop()
	}
	for _, n := range c.nodes {
		n.Close()
	}
	c.wg.Wait()
	close(c.finished)
	return nil
}

// told returns the masters (bit i) that answered the run_id question
// (wire.Master.Told): a lock obtained now can tell their restarts since.
func (c *Client) told() uint64 {
	var m uint64
	for i, n := range c.nodes {
		if n.Told() {
			m |= bit(i)
		}
	}
	return m
}

// boundedReads reports whether rdb's socket reads time out. go-redis keeps
// ReadTimeout 0 for "-1, no timeout" and -1 for "-2, no deadline at all".
func boundedReads(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ReadTimeout > 0
	case *redis.ClusterClient:
		return c.Options().ReadTimeout > 0
	}
	return true
}

// serverOf names the server behind a standalone client, by network and
// address (not database: databases of one server fail together), for
// telling duplicate masters apart; "" when it cannot tell (a Sentinel or
// Cluster client).
func serverOf(rdb redis.UniversalClient) string {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return ""
	}
	o := c.Options()
	if o.Addr == "" || o.Addr == "FailoverClient" {
		return ""
	}
	addr := o.Addr
	if host, port, err := net.SplitHostPort(addr); err == nil {
		// The loopback's names are one server; other aliases (DNS names,
		// several addresses of one host) New cannot see without asking.
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			addr = net.JoinHostPort("loopback", port)
		}
	}
	return o.Network + " " + addr
}
