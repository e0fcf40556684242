package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The contenders, in the order the report shows them. Adding one touches this
// list only (and the file with its code): the matrix, the report, the ratios
// and the chart take every contender from here.
var contenders = []contenderSpec{
	{Name: "redlock", Kind: kindOurs, Color: "#d62728", Masters: anyMasters, Clusters: true,
		What: "`redlock.New(masters)`, `Obtain`, `Lock.Release`",
		New:  func() contender { return &redlockContender{} }},
	{Name: "redlock-single", Kind: kindOurs, Color: "#ff7f0e", Masters: oneMaster,
		What: "`redlock.NewSingle(master)`",
		New:  func() contender { return &redlockContender{single: true} }},
	{Name: "redlock-observed", Kind: kindOurs, Color: "#e377c2", Masters: anyMasters,
		What: "`redlock.New(masters, redlock.WithObserver(o))` with an Observer that counts every event by kind and outcome: the cost of observing",
		New:  func() contender { return &redlockContender{observed: true} }},
	// Locks on several keys: the cost per key of ObtainMulti against one
	// key's Obtain (redlock) in the same cells; only where throughput and
	// Redis CPU say it (uncontended, 64 goroutines, no added latency, no
	// Cluster: the smoke run stays short).
	setContender(1, "#fcbba1", "`redlock.New(masters)`, `ObtainMulti` of a set of 1 key (a lock on that key: `redlock`'s plain SET NX), `Lock.Release`"),
	setContender(2, "#fc9272", "`ObtainMulti` of a set of 2 keys sharing a hash tag, `Lock.Release`"),
	setContender(4, "#ef3b2c", "`ObtainMulti` of a set of 4 keys sharing a hash tag, `Lock.Release`"),
	setContender(8, "#a50f15", "`ObtainMulti` of a set of 8 keys sharing a hash tag, `Lock.Release`"),
	{Name: "goredis-autopipeline", Kind: kindBaseline, Color: "#9467bd", Masters: anyMasters, Clusters: true,
		What: "a Redlock of about 100 lines on go-redis's own automatic pipelining (`AsyncAutoPipeline`, experimental): SET NX PX on every master through one autopipeliner per master, wait for every reply, quorum and validity check, EVALSHA compare-and-delete to release. No per-request deadline: it waits for the slowest master",
		New:  func() contender { return &autopipeContender{} }},
	{Name: "raw-halfduplex", Kind: kindBaseline, Color: "#7f7f7f", Masters: anyMasters,
		What: "a floor, not a lock to use: SET NX PX and the compare-and-delete EVALSHA written by hand in RESP on one connection per master, one batch in flight as in redlock's lanes (a writer goroutine sends whatever was queued meanwhile once the last batch is answered, a reader hands out the replies in order); no deadline, reconnect, ordering barrier, script reload or go-redis",
		New:  func() contender { return &rawContender{half: true} }},
	{Name: "raw-fullduplex", Kind: kindBaseline, Color: "#c7c7c7", Masters: anyMasters,
		What: "raw-halfduplex, but full duplex: the writer sends what was queued without waiting for the replies in flight",
		New:  func() contender { return &rawContender{} }},
	{Name: "redsync", Kind: kindPeer, Color: "#1f77b4", Masters: anyMasters, Clusters: true,
		What: "github.com/go-redsync/redsync/v4, goredis v9 pool per master, `NewMutex(key, WithTries(1), WithExpiry(ttl))` per lock, `LockContext`, `UnlockContext`",
		New:  func() contender { return &redsyncContender{} }},
	{Name: "redislock", Kind: kindPeer, Color: "#2ca02c", Masters: oneMaster,
		What: "github.com/bsm/redislock, `Obtain` with `NoRetry()`, `Release`",
		New:  func() contender { return &redislockContender{} }},
	{Name: "rueidislock", Kind: kindPeer, Color: "#8c564b", Masters: oneMaster,
		What: "github.com/redis/rueidis/rueidislock, `KeyMajority: 1`, `NoLoopTracking: true`, `TryNextAfter` (its per-request timeout) set to redlock's default node timeout, `TryWithContext`, the returned cancel to release; its own rueidis client (not go-redis)",
		New:  func() contender { return &rueidislockContender{} }},
	// Waiting contenders: Lock waits until it holds the key (or the run's
	// context ends), their waiters spread over waitClients clients of
	// their own, as separate processes would be.
	{Name: "redlock-wait", Kind: kindOurs, Color: "#17becf", Masters: anyMasters,
		What: "`redlock.New(masters)` x4 clients, `Obtain(..., WithWait())`: woken by the release",
		New:  func() contender { return &redlockWaitContender{wait: true} }},
	{Name: "redlock-poll", Kind: kindOurs, Color: "#bcbd22", Masters: anyMasters,
		What: "`redlock.New(masters)` x4 clients, `Obtain(..., WithRetry(LinearBackoff(1ms)))`: polling",
		New:  func() contender { return &redlockWaitContender{} }},
	{Name: "redsync-wait", Kind: kindPeer, Color: "#aec7e8", Masters: anyMasters,
		What: "redsync x4, `WithTries(1<<30)`, `WithRetryDelay(1ms)`: polling",
		New:  func() contender { return &redsyncWaitContender{} }},
	{Name: "redislock-wait", Kind: kindPeer, Color: "#98df8a", Masters: oneMaster,
		What: "redislock x4, `LinearBackoff(1ms)`: polling",
		New:  func() contender { return &redislockWaitContender{} }},
	{Name: "rueidislock-wait", Kind: kindPeer, Color: "#c49c94", Masters: oneMaster,
		What: "rueidislock x4, `WithContext`: woken by client-side-caching invalidations",
		New:  func() contender { return &rueidislockWaitContender{} }},
}

// subject is the contender every other one is compared with.
const subject = "redlock"

const (
	kindOurs     = "this library"
	kindPeer     = "peer library"
	kindBaseline = "hand-written baseline"
)

// A contenderSpec is one lock implementation under test.
type contenderSpec struct {
	Name  string
	Kind  string
	What  string // one line for the README and the report
	Color string // in the chart
	// Masters reports whether the contender runs over n independent masters;
	// Clusters whether each master may be a Redis Cluster (a *redis.ClusterClient).
	Masters  func(n int) bool
	Clusters bool
	// Keys is how many keys one lock holds (a set: ObtainMulti); 0 for one
	// key. Only, when set, narrows the cells the contender runs in.
	Keys int
	Only func(c cell) bool
	New  func() contender
}

func anyMasters(int) bool  { return true }
func oneMaster(n int) bool { return n == 1 }
func (s contenderSpec) supports(c cell) bool {
	if c.Cluster && !s.Clusters || s.Only != nil && !s.Only(c) {
		return false
	}
	return s.Masters(c.N)
}

// setContender is redlock locking sets of k keys with ObtainMulti.
func setContender(k int, color, what string) contenderSpec {
	return contenderSpec{Name: fmt.Sprintf("redlock-set%d", k), Kind: kindOurs, Color: color, Masters: anyMasters, Keys: k, Only: setCells,
		What: what, New: func() contender { return &redlockContender{keys: k} }}
}

// setCells are the cells of the set contenders: uncontended, 64
// goroutines, no added latency, where cycles/s and Redis CPU per cycle
// show what each key of a set costs.
func setCells(c cell) bool { return !c.Contended && c.G == 64 && c.Latency == 0 }

func specOf(name string) (contenderSpec, bool) {
	for _, s := range contenders {
		if s.Name == name {
			return s, true
		}
	}
	return contenderSpec{}, false
}

// A target is what a contender runs against in one measured run.
type target struct {
	// Clients has one fresh go-redis client per master, all built with the
	// same options: a *redis.Client, or a *redis.ClusterClient in cluster cells.
	Clients []redis.UniversalClient
	// Options says how each master is reached (address, credentials, TLS),
	// for a contender that brings its own client library. Nil in cluster cells.
	Options []*redis.Options
	TTL     time.Duration
	// Prefix starts every key of the run; a contender that adds keys of its
	// own must keep them under it.
	Prefix string
}

// A contender is one lock implementation, set up afresh for each run.
type contender interface {
	Setup(t target) error
	NewWorker() worker
	// Close releases what Setup made; it does not close the target's clients.
	Close() error
}

// A worker takes and releases one lock at a time; one goroutine uses it.
type worker interface {
	// Lock makes one attempt. It returns false and a nil error only when
	// other owners hold the key: their refusals alone ruled out the lock.
	// Every other failure (a master that did not answer, an expired
	// validity, ...) is an error.
	Lock(ctx context.Context, key string) (bool, error)
	// Unlock releases the lock the last successful Lock took.
	Unlock(ctx context.Context) error
}

// walkErrors calls f for err and every error it wraps, depth first.
func walkErrors(err error, f func(error)) {
	if err == nil {
		return
	}
	f(err)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		walkErrors(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walkErrors(e, f)
		}
	}
}

// refusedByOwners reports whether taken refusals out of n masters alone rule
// out a majority quorum.
func refusedByOwners(taken, n int) bool { return taken > n-(n/2+1) }

var errNotConfirmed = errors.New("release not confirmed by a quorum")
