package redlock_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

// What a call costs: round trips (one, also after a pause) and allocations.

// TestScriptsLoadInTheSamePipeline: the first script request to a master
// loads every script and runs in one round trip, so a slow master (round
// trip over a sixth of the node timeout) can still release.
func TestScriptsLoadInTheSamePipeline(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	clients := redistest.Clients(t, servers)
	trips := &counts{}
	clients[0].AddHook(trips)
	c := newClient(t, clients)
	l := obtain(t, c, "k", time.Minute)
	before := trips.trips.Load()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := trips.trips.Load() - before; got != 1 {
		t.Fatalf("the first Release took %d round trips, want 1", got)
	}
}

// TestExtendAfterAPauseIsOneRoundTrip: an Extend after a pause (as between
// two renewals) takes one round trip, not two: the lane kept its
// connection, and no round trip to set one up (CLIENT INFO) comes before
// the batch. On a master 40ms away, a second round trip would take a fifth
// of the default node timeout of a 2s lock. Round trips are counted, not
// timed: a loaded machine slows them, it does not add any.
func TestExtendAfterAPauseIsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdbs, proxies := proxied(t, servers, false, oneLane)
	p := proxies[0]
	trips := &lockTrips{}
	rdbs[0].AddHook(trips)
	c := newClient(t, rdbs, redlock.WithNodeTimeout(time.Second))
	l := obtain(t, c, "k", time.Minute)
	if err := l.Extend(ctx, time.Minute); err != nil { // scripts loaded
		t.Fatal(err)
	}
	p.DelayOpen(20*time.Millisecond, 20*time.Millisecond) // a 40ms round trip
	for i := range 5 {
		work(100 * time.Millisecond) // the lane idles, as between two renewals
		lock, setup := trips.trips()
		start := time.Now()
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if l2, s2 := trips.trips(); l2-lock != 1 || s2 != setup {
			t.Fatalf("Extend %d after a pause: %d round trips with the script and %d to set a connection up (%v on a master 40ms away), want one in all", i, l2-lock, s2-setup, took.Round(time.Millisecond))
		}
	}
}

// TestRenewalAfterItsPauseIsOneRoundTrip: a watchdog's renewal, every
// ttl/3, comes after the lane idled since the last one: it takes one round
// trip, with no round trip to set a connection up (CLIENT INFO) before it.
// Here a lock of 3.6s, renewed every 1.2s, on a master 40ms away. The same
// holds for any lock taken after a second of idleness:
// TestSporadicObtainIsOneRoundTrip.
func TestRenewalAfterItsPauseIsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	rdbs, proxies := proxied(t, servers, false, oneLane)
	trips := &lockTrips{}
	rdbs[0].AddHook(trips)
	rec := &recorder{}
	c := newClient(t, rdbs, redlock.WithNodeTimeout(time.Second), redlock.WithObserver(rec))
	const ttl = 3600 * time.Millisecond
	l := obtain(t, c, "k", ttl)
	if err := l.Extend(ctx, ttl); err != nil { // scripts loaded
		t.Fatal(err)
	}
	proxies[0].DelayOpen(20*time.Millisecond, 20*time.Millisecond) // a 40ms round trip
	lock, setup := trips.trips()
	_, stop, err := l.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	renewals := func() []*redlock.ExtendEvent {
		var rs []*redlock.ExtendEvent
		for _, e := range all[*redlock.ExtendEvent](rec) {
			if e.Renewal {
				rs = append(rs, e)
			}
		}
		return rs
	}
	redistest.Within(t, 2*ttl, func() error {
		if n := len(renewals()); n < 2 {
			return fmt.Errorf("%d renewals, want 2", n)
		}
		return nil
	})
	stop()
	var worst time.Duration
	rs := renewals()
	for _, e := range rs {
		worst = max(worst, e.Latency)
	}
	if l2, s2 := trips.trips(); l2-lock != int64(len(rs)) || s2 != setup {
		t.Fatalf("%d renewals every %v: %d round trips with the script and %d to set a connection up (up to %v on a master 40ms away), want one per renewal", len(rs), ttl/3, l2-lock, s2-setup, worst.Round(time.Millisecond))
	}
}

// TestSporadicObtainIsOneRoundTrip: a lock taken now and then (here after
// 1.2s idle) on masters 40ms away takes one round trip on each master, and
// its Release another: no round trip to set a connection up (CLIENT INFO)
// comes before them.
func TestSporadicObtainIsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	clients, proxies := proxied(t, servers, true)
	trips := make([]*lockTrips, len(clients))
	for i, rdb := range clients {
		trips[i] = &lockTrips{}
		rdb.AddHook(trips[i])
	}
	c := newClient(t, clients, redlock.WithNodeTimeout(time.Second))
	l := obtain(t, c, "warm", time.Minute)
	if err := l.Extend(ctx, time.Minute); err != nil { // scripts loaded
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		p.DelayOpen(20*time.Millisecond, 20*time.Millisecond) // a 40ms round trip
	}
	for range 2 {
		time.Sleep(1200 * time.Millisecond) // now and then: the lanes idle past a second
		var lock, setup [3]int64
		for i, h := range trips {
			lock[i], setup[i] = h.trips()
		}
		start := time.Now()
		l := obtain(t, c, "k", time.Minute)
		took := time.Since(start)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, func() error { // Obtain and Release return at a quorum: the third master follows
			for i, h := range trips {
				if l2, s2 := h.trips(); l2-lock[i] != 2 || s2 != setup[i] {
					return fmt.Errorf("an Obtain and a Release after 1.2s idle (the Obtain took %v on masters 40ms away): master %d saw %d round trips with a lock command and %d to set a connection up, want one each", took.Round(time.Millisecond), i, l2-lock[i], s2-setup[i])
				}
			}
			return nil
		})
	}
}

// TestFreshConnectionCostsNoPeek: on a RESP3 connection go-redis peeks at
// the socket for push notifications after every command (a recvfrom and
// three allocations) until the connection has been put back in its pool
// once: a lane's fresh connection is stamped so at once, and an
// Obtain+Release allocates no more in the lane's first seconds than once
// its connections have turned (2s).
func TestFreshConnectionCostsNoPeek(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	clients := redistest.Clients(t, servers)
	c := newClient(t, clients)
	i := 0
	cycle := func() {
		i++
		l := obtain(t, c, fmt.Sprint("k", i), time.Minute)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		cycle()
	}
	fresh := testing.AllocsPerRun(200, cycle)
	// Keep the lanes busy past their turn: their connections go back to
	// the pool once, and come back stamped.
	for start := time.Now(); time.Since(start) < 2500*time.Millisecond; {
		cycle()
	}
	turned := testing.AllocsPerRun(200, cycle)
	if fresh > turned+1 {
		t.Fatalf("Obtain+Release on one master: %.1f allocations per cycle within 2s of the lanes' first dial, %.1f once their connections turned", fresh, turned)
	}
}

// TestSporadicLockingCostsLittle: locks taken now and then (every 30ms
// here) cost no fresh connection each (a CLIENT INFO parsed into a
// *redis.ClientInfo, and a round trip for an Extend): an
// Obtain+Extend+Release over three masters allocates at most 40 times.
func TestSporadicLockingCostsLittle(t *testing.T) {
	ctx := context.Background()
	_, _, c := cluster(t, 3)
	i := 0
	cycle := func() {
		time.Sleep(30 * time.Millisecond) // now and then
		i++
		l := obtain(t, c, fmt.Sprint("k", i), time.Minute)
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		cycle()
	}
	if n := testing.AllocsPerRun(40, cycle); n > 40 {
		t.Fatalf("Obtain+Extend+Release over three masters, one every 30ms: %.0f allocations per cycle", n)
	}
}

// TestManyRenewalsSharePipelines: the renewals of many watched locks on one
// master share its pipelines: 300 renewals in at most 30 round trips, and
// in at most 30 script calls (runs of renewals go as one call each,
// internal/wire's joins).
func TestManyRenewalsSharePipelines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	counters := make([]*counts, len(clients))
	for i, rdb := range clients {
		counters[i] = &counts{}
		rdb.AddHook(counters[i])
	}
	c := newClient(t, clients, redlock.WithNodeTimeout(time.Second))
	// The first batch that needs a script loads them all, and its
	// Extends go alone: an Extend first, so that the renewals find them.
	if err := obtain(t, c, "warm", time.Minute).Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	const locks = 300
	var stops []func()
	for i := range locks {
		l := obtain(t, c, fmt.Sprint("job-", i), 3*time.Second)
		_, stop, err := l.KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, stop)
		defer l.Release(ctx)
	}
	before := counters[0].trips.Load()
	calls, scripts := renewalsRun(t, clients[0]), scriptsRun(t, clients[0])
	time.Sleep(2500 * time.Millisecond) // more than one renewal interval (1s) for every lock, the later ones in step
	for _, stop := range stops {
		stop()
	}
	renewals := renewalsRun(t, clients[0]) - calls
	scripts = scriptsRun(t, clients[0]) - scripts
	trips := counters[0].trips.Load() - before
	if renewals < locks {
		t.Fatalf("%d renewals reached master 0, want at least one per lock (%d)", renewals, locks)
	}
	if trips*10 > renewals {
		t.Fatalf("%d renewals took %d round trips to master 0: they did not share pipelines", renewals, trips)
	}
	if scripts*10 > renewals {
		t.Fatalf("%d renewals took %d script calls on master 0: they did not go as one call per run", renewals, scripts)
	}
	t.Logf("%d renewals in %d round trips and %d script calls to one master", renewals, trips, scripts)
}

// TestARenewalAllocatesLittle: a watchdog's renewal on one master, its
// Extend built into pooled requests that carry their own bounds,
// allocates less than once; two boxed bounds would be two more. Under
// -race the pools drop a quarter of their values (the round's, the
// requests'), which costs about two more whatever the renewal does.
func TestARenewalAllocatesLittle(t *testing.T) {
	ctx := context.Background()
	servers := redistest.Start(t, 1)
	clients := redistest.Clients(t, servers)
	c := newClient(t, clients)
	const locks = 100
	var stops []func()
	for i := range locks {
		l := obtain(t, c, fmt.Sprint("k", i), time.Minute)
		_, stop, err := l.KeepAlive(ctx, redlock.WithRenewEvery(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, stop)
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	time.Sleep(200 * time.Millisecond) // the pools fill
	var m0, m1 runtime.MemStats
	calls0 := renewalsRun(t, clients[0])
	runtime.ReadMemStats(&m0)
	time.Sleep(time.Second)
	runtime.ReadMemStats(&m1)
	renewals := renewalsRun(t, clients[0]) - calls0
	if renewals < locks*10 {
		t.Fatalf("%d renewals in 1s of %d locks renewed every 10ms", renewals, locks)
	}
	per := float64(m1.Mallocs-m0.Mallocs) / float64(renewals)
	t.Logf("%.2f allocations per renewal (%d renewals)", per, renewals)
	most := 1.0
	if raceEnabled {
		most = 3.3
	}
	if per >= most {
		t.Errorf("%.2f allocations per renewal, want less than %.1f", per, most)
	}
}
