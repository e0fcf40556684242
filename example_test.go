package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

// masters starts n in-process Redis servers for the examples; a real program
// passes clients for its own independent Redis masters.
func masters(n int) (clients []redis.UniversalClient, stop func()) {
	var servers []*miniredis.Miniredis
	for range n {
		s := miniredis.NewMiniRedis()
		if err := s.Start(); err != nil {
			panic(err)
		}
		servers = append(servers, s)
		clients = append(clients, redis.NewClient(&redis.Options{Addr: s.Addr()}))
	}
	return clients, func() {
		for i := range clients {
			clients[i].Close()
			servers[i].Close()
		}
	}
}

// A quorum lock over five independent masters.
func Example() {
	rdbs, stop := masters(5)
	defer stop()

	locker, err := redlock.New(rdbs, redlock.WithKeyPrefix("lock:"))
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lock, err := locker.Obtain(ctx, "report:2026-11", 10*time.Second)
	if errors.Is(err, redlock.ErrNotObtained) {
		fmt.Println("another replica is building the report")
		return
	}
	if err != nil {
		panic(err)
	}
	defer lock.Release(ctx)

	fmt.Println("building the report; lock valid for more than 9s:", lock.Validity() > 9*time.Second)
	// Output:
	// building the report; lock valid for more than 9s: true
}

// One Redis: a standalone server, a Sentinel failover client or a Cluster.
func ExampleNewSingle() {
	rdbs, stop := masters(1)
	defer stop()

	locker, err := redlock.NewSingle(rdbs[0])
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lock, err := locker.Obtain(ctx, "nightly-job", time.Minute)
	if err != nil {
		panic(err)
	}
	_, err = locker.Obtain(ctx, "nightly-job", time.Minute)
	fmt.Println("second replica:", err != nil, errors.Is(err, redlock.ErrNotObtained))
	fmt.Println("release:", lock.Release(ctx))
	// Output:
	// second replica: true true
	// release: <nil>
}

// When the lock is not obtained, the error says what each master answered.
func ExampleClient_Obtain() {
	rdbs, stop := masters(3)
	defer stop()
	locker, _ := redlock.New(rdbs)
	defer locker.Close()
	ctx := context.Background()

	holder, _ := locker.Obtain(ctx, "invoice:42", time.Minute)
	defer holder.Release(ctx)

	// Wait up to 50ms, retrying every 10ms or so.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := locker.Obtain(wctx, "invoice:42", time.Minute, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))

	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		// err names every master: "redlock: obtain: lock not obtained (0 of 3
		// agreed, quorum 2): 127.0.0.1:6379: held by another owner; ..."
		taken := 0
		for _, n := range qe.Nodes {
			if errors.Is(n.Err, redlock.ErrTaken) {
				taken++
			}
		}
		fmt.Println("not obtained:", errors.Is(err, redlock.ErrNotObtained))
		fmt.Printf("%s: quorum %d of %d; held by another owner on a quorum: %v\n",
			qe.Op, qe.Quorum, len(qe.Nodes), taken >= qe.Quorum)
	}
	// Output:
	// not obtained: true
	// obtain: quorum 2 of 3; held by another owner on a quorum: true
}

// Extend a lock while the work runs longer than planned.
func ExampleLock_Extend() {
	rdbs, stop := masters(3)
	defer stop()
	locker, _ := redlock.New(rdbs)
	defer locker.Close()
	ctx := context.Background()

	lock, err := locker.Obtain(ctx, "import:batch-7", 2*time.Second)
	if err != nil {
		panic(err)
	}
	defer lock.Release(ctx)

	// ... the import needs more time:
	switch err := lock.Extend(ctx, time.Minute); {
	case errors.Is(err, redlock.ErrLockLost):
		fmt.Println("lost the lock: stop and let the new holder finish")
	case err != nil:
		fmt.Println("masters did not answer; still held for", lock.Validity().Round(time.Minute))
	default:
		fmt.Println("extended; valid for more than 50s:", lock.Validity() > 50*time.Second)
	}
	// Output:
	// extended; valid for more than 50s: true
}

// Do runs the work while a watchdog renews the lock, and tells the work
// through its context the moment the lock can no longer be trusted.
func ExampleClient_Do() {
	rdbs, stop := masters(3)
	defer stop()
	locker, _ := redlock.New(rdbs, redlock.WithKeyPrefix("lock:"))
	defer locker.Close()

	err := locker.Do(context.Background(), "nightly-billing", 300*time.Millisecond, func(ctx context.Context) error {
		for batch := range 5 { // longer than the TTL: the watchdog renews
			select {
			case <-ctx.Done():
				// Lost the lock (context.Cause(ctx) matches ErrLockLost):
				// stop before writing anything more.
				return context.Cause(ctx)
			case <-time.After(100 * time.Millisecond):
				fmt.Println("billed batch", batch)
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, redlock.ErrNotObtained):
		fmt.Println("another replica runs the billing")
	case errors.Is(err, redlock.ErrLockLost):
		fmt.Println("lost the lock midway: the batches after the loss were not billed")
	case err != nil:
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
