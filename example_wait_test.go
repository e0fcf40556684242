package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redlock-go/redlock"
)

// Wait for a held lock: the Obtain returns once the holder releases it,
// woken by the release, without polling.
func ExampleWithWait() {
	rdbs, stop := masters(3)
	defer stop()
	first := newLocker(rdbs) // one replica
	defer first.Close()
	second := newLocker(rdbs) // another replica, in another process
	defer second.Close()
	ctx := context.Background()

	held, err := first.Obtain(ctx, "report:daily", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	released := make(chan struct{})
	go func() { // the first replica works, then releases
		defer close(released)
		time.Sleep(20 * time.Millisecond)
		fmt.Println("first replica: done, releasing")
		if err := held.Release(ctx); err != nil {
			log.Print(err)
		}
	}()

	// Bound the wait with a deadline: when it comes first, err matches
	// ErrTaken and context.DeadlineExceeded.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lock, err := second.Obtain(wctx, "report:daily", time.Minute, redlock.WithWait())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second replica: obtained")
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	<-released
	// Output:
	// first replica: done, releasing
	// second replica: obtained
}

// A worker that lost the race to rebuild a cache entry wants the result,
// not the lock: it waits for the winner's release, then reads the entry.
func ExampleClient_WaitReleased() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs)
	defer locker.Close()
	ctx := context.Background()
	cache := rdbs[0] // where the cache lives; any Redis will do

	// Another worker holds the lock and rebuilds the entry.
	rebuild, err := locker.Obtain(ctx, "rebuild:product:1", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	start, rebuilt := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(rebuilt)
		<-start
		if err := cache.Set(ctx, "product:1", "fresh", 0).Err(); err != nil {
			log.Print(err)
		}
		if err := rebuild.Release(ctx); err != nil {
			log.Print(err)
		}
	}()

	_, err = locker.Obtain(ctx, "rebuild:product:1", time.Minute)
	fmt.Println("lost the race:", errors.Is(err, redlock.ErrTaken))
	close(start)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := locker.WaitReleased(wctx, "rebuild:product:1"); err != nil {
		log.Fatal(err) // the deadline, ErrClosed, or ErrUnavailable
	}
	entry, err := cache.Get(ctx, "product:1").Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("product:1 is", entry)
	<-rebuilt
	// Output:
	// lost the race: true
	// product:1 is fresh
}
