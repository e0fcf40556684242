package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redlock-go/redlock"
)

// masters starts n in-process Redis servers for the examples; a real program
// passes clients of its own independent Redis masters.
func masters(n int) (clients []redis.UniversalClient, stop func()) {
	var servers []*miniredis.Miniredis
	for range n {
		s := miniredis.NewMiniRedis()
		if err := s.Start(); err != nil {
			log.Fatal(err)
		}
		s.ClockTTL(true) // expire keys in real time, as Redis does
		servers = append(servers, s)
		// Maintenance notifications off, as MasterOptions sets them: go-redis
		// v9 asks for them on every new connection, miniredis (like Redis
		// 7) refuses, and go-redis's fallback then writes the
		// client's options while another connection of it dials (a data
		// race inside go-redis, which -race reports).
		clients = append(clients, redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}}))
	}
	return clients, func() {
		for i := range clients {
			clients[i].Close()
			servers[i].Close()
		}
	}
}

// newLocker is redlock.New over rdbs, for the examples.
func newLocker(rdbs []redis.UniversalClient, opts ...redlock.Option) *redlock.Client {
	locker, err := redlock.New(rdbs, opts...)
	if err != nil {
		log.Fatal(err)
	}
	return locker
}

// Try the lock once: a quorum lock over five independent masters. A lock
// held by another replica (ErrTaken) means skip; masters that do not
// answer (ErrUnavailable) are an outage, not a reason to skip silently.
func Example() {
	rdbs, stop := masters(5)
	defer stop()
	locker, err := redlock.New(rdbs, redlock.WithKeyPrefix("lock:"))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lock, err := locker.Obtain(ctx, "report:2026-11", 10*time.Second)
	switch {
	case errors.Is(err, redlock.ErrTaken):
		fmt.Println("another replica is building the report")
		return
	case err != nil: // ErrUnavailable, or the context ended
		log.Fatal(err)
	}
	fmt.Println("building the report; lock valid for more than 9s:", lock.Validity() > 9*time.Second)
	if err := lock.Release(ctx); err != nil {
		log.Print(err) // the keys expire with their TTL anyway
	}
	// Output:
	// building the report; lock valid for more than 9s: true
}

// One Redis: a standalone server, a Sentinel failover client or a Cluster.
func ExampleNewSingle() {
	rdbs, stop := masters(1)
	defer stop()
	locker, err := redlock.NewSingle(rdbs[0])
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lock, err := locker.Obtain(ctx, "nightly-job", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	_, err = locker.Obtain(ctx, "nightly-job", time.Minute)
	fmt.Println("second replica: taken:", errors.Is(err, redlock.ErrTaken))
	fmt.Println("release:", lock.Release(ctx))
	// Output:
	// second replica: taken: true
	// release: <nil>
}

// A master that fails over to its replica (Sentinel): a grant counts only
// once the replica acknowledged it, so the replica Sentinel promotes holds
// the key. Here the master has one replica. (Not run: it needs a Sentinel.)
func ExampleWithReplicaAcks() {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "locks",
		SentinelAddrs:         []string{"sentinel-1:26379", "sentinel-2:26379", "sentinel-3:26379"},
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	locker, err := redlock.NewSingle(rdb,
		redlock.WithNodeTimeout(400*time.Millisecond),
		redlock.WithReplicaAcks(1, 200*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lock, err := locker.Obtain(ctx, "nightly-job", time.Minute)
	var re *redlock.ReplicaError
	switch {
	case errors.As(err, &re):
		log.Printf("the replica did not acknowledge (%d of %d): not locked", re.Acked, re.Want)
		return
	case err != nil:
		log.Print(err)
		return
	}
	defer lock.Release(ctx)
}

// When the lock is not obtained, the error says why, and what each master
// answered.
func ExampleClient_Obtain() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs)
	defer locker.Close()
	ctx := context.Background()

	holder, err := locker.Obtain(ctx, "invoice:42", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	// Wait up to a second for it, retrying every 50ms or so.
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = locker.Obtain(wctx, "invoice:42", time.Minute, redlock.WithRetry(redlock.LinearBackoff(50*time.Millisecond)))
	fmt.Println("not obtained:", errors.Is(err, redlock.ErrNotObtained))
	fmt.Println("held by another owner:", errors.Is(err, redlock.ErrTaken))
	fmt.Println("masters unavailable:", errors.Is(err, redlock.ErrUnavailable))
	fmt.Println("the wait ended with the deadline:", errors.Is(err, context.DeadlineExceeded))
	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		// err names every master: "redlock: obtain: lock not obtained, held
		// by another owner (0 of 3 agreed, quorum 2): 127.0.0.1:6379: held
		// by another owner; ..."
		fmt.Printf("%s: quorum %d of %d masters\n", qe.Op, qe.Quorum, len(qe.Nodes))
	}
	if err := holder.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// not obtained: true
	// held by another owner: true
	// masters unavailable: false
	// the wait ended with the deadline: true
	// obtain: quorum 2 of 3 masters
}

// Extend a lock while the work runs longer than planned.
func ExampleLock_Extend() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs)
	defer locker.Close()
	ctx := context.Background()

	lock, err := locker.Obtain(ctx, "import:batch-7", 2*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// ... the import needs more time:
	switch err := lock.Extend(ctx, time.Minute); {
	case errors.Is(err, redlock.ErrLockLost):
		fmt.Println("lost the lock: stop and let the new holder finish")
	case err != nil:
		fmt.Println("masters did not answer; still held for", lock.Validity().Round(time.Second))
	default:
		fmt.Println("extended; valid for more than 50s:", lock.Validity() > 50*time.Second)
	}
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// extended; valid for more than 50s: true
}

// Do runs the work while a watchdog renews the lock, and tells the work
// through its context the moment the lock can no longer be trusted. It is
// the entry point for most work.
func ExampleClient_Do() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs, redlock.WithKeyPrefix("lock:"))
	defer locker.Close()

	err := locker.Do(context.Background(), "nightly-billing", 2*time.Second, func(ctx context.Context) error {
		for batch := range 5 { // longer than the TTL: the watchdog renews
			select {
			case <-ctx.Done():
				// Lost the lock (context.Cause(ctx) matches ErrLockLost):
				// stop before writing anything more.
				return context.Cause(ctx)
			case <-time.After(500 * time.Millisecond):
				fmt.Println("billed batch", batch)
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, redlock.ErrTaken):
		fmt.Println("another replica runs the billing")
	case errors.Is(err, redlock.ErrLockLost):
		fmt.Println("lost the lock midway: the batches after the loss were not billed")
	case err != nil: // masters unavailable, or the billing itself failed
		fmt.Println("billing failed:", err)
	default:
		fmt.Println("done")
	}
	// Output:
	// billed batch 0
	// billed batch 1
	// billed batch 2
	// billed batch 3
	// billed batch 4
	// done
}

// Lock.Do gives the work its lock: here, the fence that the resource checks
// on every write, so that a holder that paused past its lease cannot
// overwrite a newer holder's work.
func ExampleLock_Do() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs, redlock.WithFencing())
	defer locker.Close()
	ctx := context.Background()
	resource := rdbs[0] // where the account lives; any Redis will do

	lock, err := locker.Obtain(ctx, "account:42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	err = lock.Do(ctx, func(ctx context.Context) error {
		return redlock.FencedWrite(ctx, resource, "account:42:balance", lock.Fence(), "100")
	})
	if err != nil {
		log.Fatal(err)
	}
	// The next holder writes with a higher fence...
	next, err := locker.Obtain(ctx, "account:42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	err = next.Do(ctx, func(ctx context.Context) error {
		return redlock.FencedWrite(ctx, resource, "account:42:balance", next.Fence(), "90")
	})
	if err != nil {
		log.Fatal(err)
	}
	// ... and a write by the first holder, had it paused past its lease
	// and woken up now, is refused.
	err = redlock.FencedWrite(ctx, resource, "account:42:balance", lock.Fence(), "110")
	fmt.Println("stale write refused:", errors.Is(err, redlock.ErrStaleFence))
	value, fence, err := redlock.FencedRead(ctx, resource, "account:42:balance")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance", value, "written by the next holder:", fence == next.Fence())
	// Output:
	// stale write refused: true
	// balance 90 written by the next holder: true
}

// Move money between two accounts: lock both at once, all or none. A
// transfer the other way at the same moment locks the same two keys in
// the other order; neither can hold one key while it waits for the other,
// so they take turns and never deadlock. With fencing, each account's
// resource checks the lock's one fence, as for a lock on that account
// alone.
func ExampleClient_ObtainMulti() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs, redlock.WithFencing(), redlock.WithKeyPrefix("lock:"))
	defer locker.Close()
	ctx := context.Background()
	resource := rdbs[0] // where the accounts live

	// On a Redis Cluster the keys must share a hash slot: {bank}:... do.
	from, to := "{bank}:account:7", "{bank}:account:42"
	lock, err := locker.ObtainMulti(ctx, []string{from, to}, 10*time.Second,
		redlock.WithRetry(redlock.LinearBackoff(20*time.Millisecond)))
	if err != nil {
		log.Fatal(err)
	}
	err = lock.Do(ctx, func(ctx context.Context) error { // renewed while it runs, released after
		if err := redlock.FencedWrite(ctx, resource, from+":balance", lock.Fence(), "70"); err != nil {
			return err
		}
		return redlock.FencedWrite(ctx, resource, to+":balance", lock.Fence(), "130")
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("keys held:", lock.Keys())

	// Another owner holds one account: the set is refused, and the error
	// names the key that blocked it.
	other, err := locker.Obtain(ctx, to, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	_, err = locker.ObtainMulti(ctx, []string{"{bank}:account:9", to}, 10*time.Second)
	var qe *redlock.QuorumError
	if errors.Is(err, redlock.ErrTaken) && errors.As(err, &qe) {
		for _, n := range qe.Nodes { // the masters that answered before the outcome was known
			if n.Key != "" {
				fmt.Println("held by another owner:", n.Key)
				break
			}
		}
	}
	// The lone holder of account 42 got a higher fence than the transfer.
	fmt.Println("fence above the transfer's:", other.Fence() > lock.Fence())
	// Output:
	// keys held: [{bank}:account:7 {bank}:account:42]
	// held by another owner: {bank}:account:42
	// fence above the transfer's: true
}

// DoMulti is Do for a set of keys: a job that touches a fixed set of
// resources runs while it holds them all.
func ExampleClient_DoMulti() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs)
	defer locker.Close()
	ctx := context.Background()
	err := locker.DoMulti(ctx, []string{"printer:1", "printer:2", "scanner"}, 10*time.Second, func(ctx context.Context) error {
		fmt.Println("holding every device of the job")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// holding every device of the job
}

// KeepAlive renews a lock that outlives one function call, until stop.
func ExampleLock_KeepAlive() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs)
	defer locker.Close()
	ctx := context.Background()

	lock, err := locker.Obtain(ctx, "leader", 2*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	lctx, stopRenewing, err := lock.KeepAlive(ctx)
	if err != nil {
		log.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // longer than the TTL
	fmt.Println("still the leader:", lctx.Err() == nil && lock.Validity() > 0)
	stopRenewing() // first stop renewing, then release
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// still the leader: true
}

// Another process (or goroutine) takes over a lock by its key and token,
// the way `redlock run` hands REDLOCK_TOKEN to its command.
func ExampleClient_Attach() {
	rdbs, stop := masters(3)
	defer stop()
	ctx := context.Background()
	parent := newLocker(rdbs)
	defer parent.Close()
	lock, err := parent.Obtain(ctx, "migration", time.Minute)
	if err != nil {
		log.Fatal(err)
	}

	child := newLocker(rdbs) // in the other process
	defer child.Close()
	same, err := child.Attach(ctx, "migration", lock.Token(), time.Minute, 0)
	if err != nil {
		log.Fatal(err) // ErrLockLost: the token no longer holds the lock
	}
	fmt.Println("attached:", same.Token() == lock.Token())
	if err := same.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// attached: true
}

// Inspect shows who holds a key on every master.
func ExampleClient_Inspect() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs)
	defer locker.Close()
	ctx := context.Background()
	lock, err := locker.Obtain(ctx, "report", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	state, err := locker.Inspect(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	// Obtain returns once a quorum granted the lock: the last master's
	// grant may still be on its way, so n may be below len(state.Masters).
	token, n := state.Holder()
	fmt.Println("held by our token:", token == lock.Token())
	fmt.Println("on a quorum of the", len(state.Masters), "masters:", n >= state.Quorum)
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// held by our token: true
	// on a quorum of the 3 masters: true
}

// whileTaken retries while another owner holds the lock, and gives up at
// once when the masters are unavailable: a strategy of one's own.
type whileTaken struct{ every time.Duration }

func (s whileTaken) NextWait(attempts int, last error) (time.Duration, bool) {
	return s.every, errors.Is(last, redlock.ErrTaken)
}

// A retry strategy of one's own sees why the last attempt failed.
func ExampleRetryStrategy() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs)
	defer locker.Close()
	ctx := context.Background()

	holder, err := locker.Obtain(ctx, "k", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	time.AfterFunc(30*time.Millisecond, func() {
		if err := holder.Release(ctx); err != nil {
			log.Print(err)
		}
	})
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lock, err := locker.Obtain(wctx, "k", time.Minute, redlock.WithRetry(whileTaken{5 * time.Millisecond}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("obtained once the holder released it")
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// obtained once the holder released it
}
