package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redlock-go/redlock"
)

// A scheduled job that every replica starts at the same minute, on clocks a
// little apart: the lock stays held for at least part of the schedule's
// period, so a replica whose timer fires late finds it taken, although the
// job ended long before.
func ExampleWithHoldAtLeast() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs)
	defer locker.Close()

	runHourly := func(replica string) {
		err := locker.Do(context.Background(), "job:hourly-report", 10*time.Second, func(ctx context.Context) error {
			fmt.Println(replica, "runs the job")
			return nil // a job that ends fast
		}, redlock.WithHoldAtLeast(50*time.Minute))
		switch {
		case errors.Is(err, redlock.ErrTaken):
			fmt.Println(replica, "skips: the job ran this hour")
		case err != nil:
			log.Fatal(err)
		}
	}
	runHourly("replica A")
	runHourly("replica B") // its timer fired a little late
	// Output:
	// replica A runs the job
	// replica B skips: the job ran this hour
}
