package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// A failover env is one master, one replica that replicates through a
// proxy (the replication link, which the scenario can stall), and a
// Sentinel that watches them (quorum 1, down after 200ms). Clients reach
// the master through go-redis's failover client.
type failoverEnv struct {
	t                         *testing.T
	master, replica, sentinel *redistest.Server
	link                      *Proxy // the replica's connection to the master
	net                       *Net
	rdbs                      []*redis.Client
}

const (
	sentinelMaster = "m"
	downAfter      = 200 * time.Millisecond
	// The scenario's node timeout and acknowledgement wait: Redis answers
	// a WAIT that timed out up to 100ms late (its cron tick), so the
	// suite's 50ms node timeout leaves no room for one.
	failoverNodeTimeout = 250 * time.Millisecond
	failoverAckWait     = 100 * time.Millisecond
)

func newFailoverEnv(t *testing.T) *failoverEnv {
	t.Helper()
	redistest.Require(t)
	e := &failoverEnv{t: t, net: NewNet()}
	t.Cleanup(e.close)
	var err error
	// A diskless sync waits 5s by default for more replicas to join it.
	if e.master, err = redistest.NewServer(redistest.Options{Args: []string{"--repl-diskless-sync-delay", "0"}}); err != nil {
		t.Fatal(err)
	}
	if e.link, err = e.net.Proxy("replication", e.master.Addr()); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(e.link.Addr())
	if e.replica, err = redistest.NewServer(redistest.Options{Args: []string{"--replicaof", host, port}}); err != nil {
		t.Fatal(err)
	}
	e.waitReplicaOnline()
	if e.sentinel, err = redistest.NewServer(redistest.Options{Sentinel: []string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1", sentinelMaster, e.master.Port()),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", sentinelMaster, downAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s 5000", sentinelMaster),
	}}); err != nil {
		t.Fatal(err)
	}
	e.waitSentinelSeesReplica()
	return e
}

func (e *failoverEnv) close() {
	for _, c := range e.rdbs {
		c.Close()
	}
	e.net.Close()
	for _, s := range []*redistest.Server{e.sentinel, e.replica, e.master} {
		if s != nil {
			s.Close()
		}
	}
}

// poll runs check every 20ms until it returns nil, for at most d.
func (e *failoverEnv) poll(d time.Duration, what string, check func(ctx context.Context) error) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := check(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *failoverEnv) plain(addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, Protocol: 2, DisableIdentity: true, DialTimeout: time.Second, ReadTimeout: time.Second})
	e.rdbs = append(e.rdbs, c)
	return c
}

func (e *failoverEnv) waitReplicaOnline() {
	m := e.plain(e.master.Addr())
	want := "port=" + strconv.Itoa(e.replica.Port()) + ",state=online"
	e.poll(10*time.Second, "the replica's first sync", func(ctx context.Context) error {
		info, err := m.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, want) {
			return errors.New("not online yet")
		}
		// Its first acknowledgement can take tens of milliseconds after
		// the sync on a busy machine: not in A's first WAIT.
		var acked *redis.Cmd
		if _, err := m.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "chaos:sync", "1", 0)
			p.Del(ctx, "chaos:sync")
			acked = p.Do(ctx, "wait", 1, 400)
			return nil
		}); err != nil {
			return err
		}
		if n, _ := acked.Int(); n != 1 {
			return errors.New("no acknowledgement yet")
		}
		return nil
	})
}

func (e *failoverEnv) waitSentinelSeesReplica() {
	s := redis.NewSentinelClient(&redis.Options{Addr: e.sentinel.Addr(), Protocol: 2, DisableIdentity: true})
	defer s.Close()
	port := strconv.Itoa(e.replica.Port())
	e.poll(10*time.Second, "the Sentinel learning of the replica", func(ctx context.Context) error {
		rs, err := s.Replicas(ctx, sentinelMaster).Result()
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r["port"] == port && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return nil
			}
		}
		return fmt.Errorf("replicas %v", rs)
	})
}

// waitPromoted waits until the Sentinel names the replica the master and
// the replica says it is one; it returns when that was seen.
func (e *failoverEnv) waitPromoted() time.Time {
	s := redis.NewSentinelClient(&redis.Options{Addr: e.sentinel.Addr(), Protocol: 2, DisableIdentity: true})
	defer s.Close()
	r := e.plain(e.replica.Addr())
	e.poll(15*time.Second, "the Sentinel's failover to the replica", func(ctx context.Context) error {
		addr, err := s.GetMasterAddrByName(ctx, sentinelMaster).Result()
		if err != nil {
			return err
		}
		if len(addr) != 2 || addr[1] != strconv.Itoa(e.replica.Port()) {
			return fmt.Errorf("the Sentinel names %v", addr)
		}
		role, err := r.Do(ctx, "role").Slice()
		if err != nil {
			return err
		}
		if len(role) == 0 || role[0] != "master" {
			return fmt.Errorf("the replica's role is %v", role)
		}
		return nil
	})
	return time.Now()
}

// failoverClient is a go-redis Sentinel failover client with the suite's
// settings (socket timeouts twice the node timeout, context deadlines
// honoured, no command retries).
func (e *failoverEnv) failoverClient() *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            sentinelMaster,
		SentinelAddrs:         []string{e.sentinel.Addr()},
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           2 * failoverNodeTimeout,
		ReadTimeout:           2 * failoverNodeTimeout,
		WriteTimeout:          2 * failoverNodeTimeout,
		PoolTimeout:           2 * failoverNodeTimeout,
		ContextTimeoutEnabled: true,
		PoolSize:              8,
		Protocol:              2,
		DisableIdentity:       true,
	})
	e.rdbs = append(e.rdbs, c)
	return c
}

// TestS16ReplicaFailover: NewSingle over a Sentinel-managed master whose
// replica misses the lock key, then is promoted.
func TestS16ReplicaFailover(t *testing.T) {
	admit(t, light)
	replicaFailover(t, library)
}

func replicaFailover(t *testing.T, sub *subject) {
	const ttl = 8 * time.Second
	for _, v := range []struct {
		name, kind, fault, expected string
		acks, stall                 bool
	}{
		{"no-acks", "DOCUMENTS", "replication link stalled; A obtains; master SIGKILLed; replica promoted by Sentinel", "B obtains while A valid", false, true},
		{"acks-link-stalled", "MUST", "same, A WithReplicaAcks(1, 100ms)", "A's Obtain fails (0 of 1 acknowledged), no key left; 0 promised overlaps", true, true},
		{"acks-replica-up", "MUST", "A WithReplicaAcks(1, 100ms), link healthy; master SIGKILLed; replica promoted", "A holds; B refused (ErrTaken) after the failover while A valid", true, false},
	} {
		if !sub.runs(v.name) {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			r := newRow(t, sub, "S16 replica-failover/"+v.name, v.kind, v.fault, v.expected)
			e := newFailoverEnv(t)
			cfg := LockConfig{NodeTimeout: failoverNodeTimeout, Prefix: "chaos:"}
			if v.acks {
				cfg.ReplicaAcks, cfg.AckWait = 1, failoverAckWait
			}
			a, err := sub.locker()([]redis.UniversalClient{e.failoverClient()}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			// B never waits for replicas: after the failover the promoted
			// master has none, and B is the intruder anyway.
			b, err := sub.locker()([]redis.UniversalClient{e.failoverClient()}, LockConfig{NodeTimeout: failoverNodeTimeout, Prefix: "chaos:"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			warm(t, []redis.UniversalClient{e.failoverClient()}, 1)

			var stall *Toxic
			if v.stall {
				if stall, err = e.link.Stall(Down); err != nil {
					t.Fatal(err)
				}
			}
			ledger := &Ledger{}
			lockA, aErr := a.Obtain(context.Background(), "k", ttl)
			a0 := time.Now()
			var aUntil time.Time
			if aErr == nil {
				aUntil = a0.Add(lockA.Validity())
				ledger.Record(Interval{Key: "k", Holder: lockA.Token(), Start: a0, End: aUntil, ValidUntil: aUntil})
				r.set("a_validity", lockA.Validity())
			} else {
				r.set("a_error", aErr.Error())
			}
			keyLeft := int64(-1)
			if v.acks && v.stall {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				keyLeft, _ = e.plain(e.master.Addr()).Exists(ctx, "chaos:k").Result()
				cancel()
			}
			e.master.Kill()
			killed := time.Now()
			if stall != nil {
				if err := stall.Remove(); err != nil {
					t.Fatal(err)
				}
			}
			promoted := e.waitPromoted()
			r.set("failover", promoted.Sub(killed))
			replicaHasA := false
			if aErr == nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				tok, _ := e.plain(e.replica.Addr()).Get(ctx, "chaos:k").Result()
				cancel()
				replicaHasA = tok == lockA.Token()
				r.set("promoted_replica_holds_a", replicaHasA)
			}

			// B tries until A's validity ends (no-acks: until it gets in),
			// at most 3s after the promotion.
			bEnd := promoted.Add(3 * time.Second)
			if aErr == nil && aUntil.Before(bEnd) {
				bEnd = aUntil
			}
			ctx, cancel := context.WithDeadline(context.Background(), bEnd)
			lockB, bErr := b.Obtain(ctx, "k", ttl, RetryEvery(20*time.Millisecond))
			cancel()
			if bErr == nil {
				b0 := time.Now()
				ledger.Record(Interval{Key: "k", Holder: lockB.Token(), Start: b0, End: b0.Add(time.Millisecond), ValidUntil: b0.Add(lockB.Validity())})
				r.set("b_obtained_after_promotion", b0.Sub(promoted))
				if aErr == nil {
					r.set("b_inside_a_validity_by", aUntil.Sub(b0))
				}
				lockB.Release(context.Background())
			} else {
				r.set("b_obtained_after_promotion_ms", "never")
			}
			st := ledger.Stats()
			r.set("promised_overlaps", st.PromisedOverlaps)

			switch v.name {
			case "no-acks":
				r.documents(st.PromisedOverlaps >= 1, "B: %v; A: %v", bErr, aErr)
			case "acks-link-stalled":
				var re *redlock.ReplicaError
				r.must(aErr != nil && errors.Is(aErr, redlock.ErrNotObtained) && errors.Is(aErr, redlock.ErrUnavailable) && errors.As(aErr, &re) && re.Acked == 0,
					"A's Obtain with the replication link stalled: %v, want ErrNotObtained, ErrUnavailable and a ReplicaError with 0 acknowledged", aErr)
				r.must(keyLeft == 0, "the master held %d lock keys after A's failed Obtain, want 0 (undone)", keyLeft)
				r.must(st.PromisedOverlaps == 0, "promised_overlaps=%d", st.PromisedOverlaps)
				r.must(bErr == nil, "B could not obtain the free key after the failover: %v", bErr)
			case "acks-replica-up":
				r.must(aErr == nil, "A's Obtain with the replica up: %v", aErr)
				r.must(replicaHasA, "the promoted replica does not hold A's key: an acknowledged grant was lost")
				r.must(st.PromisedOverlaps == 0, "promised_overlaps=%d (B inside A's validity)", st.PromisedOverlaps)
				r.must(bErr == nil || errors.Is(bErr, redlock.ErrTaken), "B's refusal after the failover: %v, want ErrTaken", bErr)
				if lockA != nil {
					lockA.Release(context.Background())
				}
			}
		})
	}
}

// flagObserve lets the rows that bound how soon something happens (S21,
// S23) watch on past their bound, to measure when it did: the verdict
// still reads the bound.
var flagObserve = flag.Duration("chaos.observe", 0, "how long S21 and S23 watch past their bound, to measure (not judge) what came later")

// heardBound is how soon after a change of master, or a subscription's
// silent cut coming to light, a watchdog must renew (or tell its work):
// the Client's probe of its subscriptions runs every 250ms, a renewal
// takes a round trip; a second for a loaded machine.
const heardBound = time.Second

// TestS21FailoverOldMasterUp: NewSingle over a Sentinel failover client,
// a lock held under KeepAlive (TTL 30s, renewals every 9s); SENTINEL
// FAILOVER promotes the replica and demotes the old master, which stays
// up: nothing breaks the Client's subscription, which stays on the old
// master. The lock's key must be renewed (or re-taken) on the new master,
// or its work told, within heardBound of the promotion: the new master is
// where a replica that missed the key, or a lagging one, would let another
// Client in.
func TestS21FailoverOldMasterUp(t *testing.T) {
	admit(t, light)
	failoverOldMasterUp(t, library)
}

func failoverOldMasterUp(t *testing.T, sub *subject) {
	const ttl, every = 30 * time.Second, 9 * time.Second
	r := newRow(t, sub, "S21 failover-old-master-up", "MUST",
		fmt.Sprintf("NewSingle over a Sentinel failover client; A holds (TTL %v) under KeepAlive renewing every %v; SENTINEL FAILOVER: the replica promoted, the old master demoted (REPLICAOF), not killed", ttl, every),
		fmt.Sprintf("within %v of the promotion a renewal of A's reaches the new master (witness), or A's work is told", heardBound))
	e := newFailoverEnv(t)
	w, err := NewWitness([]string{e.master.Addr(), e.replica.Addr()}, "chaos:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	w.Replicated(e.link.Addr(), e.master.Addr(), e.replica.Addr())
	a, err := sub.locker()([]redis.UniversalClient{e.failoverClient()}, LockConfig{NodeTimeout: failoverNodeTimeout, Prefix: "chaos:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	ctx := context.Background()
	lock, err := a.Obtain(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop, err := lock.KeepAlive(ctx, RenewEvery(every))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	master, replica := e.plain(e.master.Addr()), e.plain(e.replica.Addr())
	numsub := func(c *redis.Client) int64 {
		n, _ := c.PubSubNumSub(ctx, "redlock:wake").Result()
		return n["redlock:wake"]
	}
	if sub.mutant == "" {
		e.poll(5*time.Second, "A's subscription on the master", func(ctx context.Context) error {
			if numsub(master) < 1 {
				return errors.New("no wake subscriber")
			}
			return nil
		})
	}
	e.poll(5*time.Second, "A's key on the replica", func(ctx context.Context) error {
		if v, _ := replica.Get(ctx, "chaos:k").Result(); v != lock.Token() {
			return fmt.Errorf("the replica holds %q", v)
		}
		return nil
	})
	s := redis.NewSentinelClient(&redis.Options{Addr: e.sentinel.Addr(), Protocol: 2, DisableIdentity: true})
	defer s.Close()
	if err := s.Failover(ctx, sentinelMaster).Err(); err != nil {
		t.Fatal(err)
	}
	failover := time.Now()
	promoted := e.waitPromoted()
	r.set("failover", promoted.Sub(failover))

	// Watch: A's renewal on the new master (witness, master 1), or A's
	// work told.
	renewedOnNew := func() (time.Time, bool) {
		for _, ev := range w.Events(lock.Token()) {
			if ev.Master == 1 && (ev.Kind == EvExtend || ev.Kind == EvRetake) && ev.At >= failover.UnixMicro() {
				return time.UnixMicro(ev.At), true
			}
		}
		return time.Time{}, false
	}
	deadline := promoted.Add(heardBound + slack)
	var renewed, told time.Time
	var subsAtBound int64 = -1
	for watchEnd := deadline.Add(*flagObserve); time.Now().Before(watchEnd); {
		if at, ok := renewedOnNew(); ok {
			renewed = at
		}
		if wctx.Err() != nil {
			told = time.Now()
		}
		if !renewed.IsZero() || !told.IsZero() {
			break
		}
		if subsAtBound < 0 && time.Now().After(deadline) {
			subsAtBound = numsub(replica)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if subsAtBound < 0 {
		subsAtBound = numsub(replica)
	}
	r.set("new_master_wake_subscribers", subsAtBound)
	r.set("old_master_wake_subscribers", numsub(master))
	since := func(t time.Time) any {
		if t.IsZero() {
			return fmt.Sprintf("never (watched %v)", time.Since(promoted).Round(time.Millisecond))
		}
		return t.Sub(promoted)
	}
	r.set("renewed_on_new_master_after_promotion", since(renewed))
	r.set("told_after_promotion", since(told))
	if !told.IsZero() {
		r.note("A's work told: %v", context.Cause(wctx))
	}
	first := renewed
	if first.IsZero() || (!told.IsZero() && told.Before(first)) {
		first = told
	}
	r.must(!first.IsZero() && first.Before(deadline),
		"A's lock was neither renewed on the new master nor its work told within %v of the promotion (renewed: %v, told: %v; wake subscribers on the new master: %d)",
		heardBound, since(renewed), since(told), subsAtBound)
	stop()
	lock.Release(ctx)
}
