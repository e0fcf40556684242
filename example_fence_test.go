package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

// The resource refuses a stale holder: a holder that paused past its lease
// wakes up and writes with its old fence, after the next holder wrote with
// a higher one.
func ExampleFencedWrite() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs, redlock.WithFencing())
	defer locker.Close()
	ctx := context.Background()
	resource := rdbs[0] // where the account lives; any Redis will do

	paused, err := locker.Obtain(ctx, "account:42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// Its lease ends while it is paused (here: released, to the same effect),
	// and the next holder writes.
	if err := paused.Release(ctx); err != nil {
		log.Fatal(err)
	}
	next, err := locker.Obtain(ctx, "account:42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if err := redlock.FencedWrite(ctx, resource, "account:42:balance", next.Fence(), "90"); err != nil {
		log.Fatal(err)
	}
	if err := next.Release(ctx); err != nil {
		log.Fatal(err)
	}

	// The paused holder wakes up and writes, unaware.
	err = redlock.FencedWrite(ctx, resource, "account:42:balance", paused.Fence(), "110")
	fmt.Println(err)
	var stale *redlock.StaleFenceError
	if errors.As(err, &stale) && errors.Is(err, redlock.ErrStaleFence) {
		fmt.Println("refused: fence", stale.Fence, "is below", stale.Highest)
	}
	// Output:
	// redlock: stale fence: write to "account:42:balance" with fence 1 refused, the resource has seen fence 2
	// refused: fence 1 is below 2
}

// FencedRead returns what the last accepted FencedWrite stored, and the
// fence it was written with; redis.Nil before any write.
func ExampleFencedRead() {
	rdbs, stop := masters(1)
	defer stop()
	locker := newLocker(rdbs, redlock.WithFencing())
	defer locker.Close()
	ctx := context.Background()
	resource := rdbs[0]

	_, _, err := redlock.FencedRead(ctx, resource, "account:7:balance")
	fmt.Println("never written:", errors.Is(err, redis.Nil))

	lock, err := locker.Obtain(ctx, "account:7", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if err := redlock.FencedWrite(ctx, resource, "account:7:balance", lock.Fence(), "70"); err != nil {
		log.Fatal(err)
	}
	value, fence, err := redlock.FencedRead(ctx, resource, "account:7:balance")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance", value, "written under our fence:", fence == lock.Fence())
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// never written: true
	// balance 70 written under our fence: true
}
