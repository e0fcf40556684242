package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

// servers starts n in-process Redis servers for the examples and returns
// their addresses; a real program names its own independent masters.
func servers(n int) (addrs []string, stop func()) {
	var all []*miniredis.Miniredis
	for range n {
		s := miniredis.NewMiniRedis()
		if err := s.Start(); err != nil {
			log.Fatal(err)
		}
		s.ClockTTL(true) // expire keys in real time, as Redis does
		all = append(all, s)
		addrs = append(addrs, s.Addr())
	}
	return addrs, func() {
		for _, s := range all {
			s.Close()
		}
	}
}

// NewMasters makes the masters' clients from their addresses (or redis://,
// rediss:// and unix:// URLs), set as the library needs them.
func ExampleNewMasters() {
	addrs, stop := servers(3) // "redis-a:6379", "redis-b:6379", "redis-c:6379"
	defer stop()
	rdbs, err := redlock.NewMasters(addrs...)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { // after the Client: New never closes them
		for _, rdb := range rdbs {
			rdb.Close()
		}
	}()
	locker, err := redlock.New(rdbs)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lock, err := locker.Obtain(ctx, "report", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("obtained on a quorum of", len(rdbs), "masters")
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// obtained on a quorum of 3 masters
}

// New takes go-redis clients of its own to independent masters, with the
// two options the library needs; it refuses a client without them, and
// the error says which master and what to set.
func ExampleNew() {
	addrs, stop := servers(3)
	defer stop()
	var rdbs []redis.UniversalClient
	for _, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{
			Addr:                  addr,
			MaxRetries:            -1,   // a retried acquire could find its own key and report it taken
			ContextTimeoutEnabled: true, // a request's deadline bounds its socket read
		})
		defer rdb.Close()
		rdbs = append(rdbs, rdb)
	}
	locker, err := redlock.New(rdbs, redlock.WithKeyPrefix("lock:"))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	fmt.Println("a quorum lock over", len(rdbs), "masters")

	// go-redis's defaults retry a command that timed out: refused.
	retrying := redis.NewClient(&redis.Options{Addr: addrs[0]})
	defer retrying.Close()
	_, err = redlock.New([]redis.UniversalClient{retrying, rdbs[1], rdbs[2]})
	fmt.Println("refused:", errors.Is(err, redlock.ErrInvalidArgument))
	// Output:
	// a quorum lock over 3 masters
	// refused: true
}

// MasterOptions reads one master's spec into go-redis options set as the
// library needs them; change what else the application needs (TLS
// settings, pool size) before redis.NewClient.
func ExampleMasterOptions() {
	opt, err := redlock.MasterOptions("rediss://locker:s3cret@redis-a.internal:6380/2")
	if err != nil {
		log.Fatal(err)
	}
	opt.PoolSize = 20
	fmt.Println(opt.Addr, "db", opt.DB, "user", opt.Username, "TLS:", opt.TLSConfig != nil)
	fmt.Println("MaxRetries", opt.MaxRetries, "ContextTimeoutEnabled", opt.ContextTimeoutEnabled)
	rdb := redis.NewClient(opt) // connects on first use
	defer rdb.Close()
	// Output:
	// redis-a.internal:6380 db 2 user locker TLS: true
	// MaxRetries -1 ContextTimeoutEnabled true
}

// outcomes is an Observer of one's own: a line for each Obtain and
// Release, with the outcome a metric would be labelled with. Events it
// does not know (renewals, lost locks, masters) it ignores.
type outcomes struct{}

func (outcomes) Observe(ctx context.Context, e redlock.Event) {
	switch e := e.(type) {
	case *redlock.ObtainEvent:
		fmt.Println("obtain", e.Key, e.Outcome)
	case *redlock.ReleaseEvent:
		fmt.Println("release", e.Key, e.Outcome)
	}
}

// An Observer hears about every lock of a Client. redlock.SlogObserver
// logs them; the module redlockotel records metrics and spans.
func ExampleWithObserver() {
	rdbs, stop := masters(3)
	defer stop()
	locker := newLocker(rdbs, redlock.WithObserver(outcomes{}))
	defer locker.Close()
	ctx := context.Background()

	lock, err := locker.Obtain(ctx, "report", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	_, err = locker.Obtain(ctx, "report", time.Minute) // another caller
	if !errors.Is(err, redlock.ErrTaken) {
		log.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// obtain report obtained
	// obtain report taken
	// release report released
}
