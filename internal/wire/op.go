package wire

import (
	"context"
	"sync/atomic"
	"time"
)

// A Kind is what a request asks of its master.
type Kind uint8

const (
	KindAcquire       Kind = iota // SET key token NX PX ttl; a waiter's plain acquire sets its own value
	KindAcquireFenced             // acquire_fenced.lua
	KindRaise                     // raise.lua; raise_set.lua on a set
	KindExtend                    // extend.lua, extend_fenced.lua with a counter; extend_set.lua on a set
	KindRelease                   // release.lua, keep.lua with a hold; release_set.lua on a set
	KindAcquireSet                // acquire_set.lua: a lock on several keys
	KindAcquireWait               // wait.lua: a waiting Obtain's acquire
	KindWatch                     // watch.lua: WaitReleased's look at a key
)

var kindNames = [...]string{"acquire", "fenced acquire", "raise", "extend", "release", "set acquire", "waiting acquire", "watch"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// A Target is the lock a request is about, as each of its requests sends
// it: its key (a set's first key, which picks a Cluster master's shard, so
// that one lock's requests keep their order), its fence counter's key (nil
// without fencing), its token, and for a lock on several keys the set.
// Its strings are boxed once per lock and shared by the lock's requests,
// so that encoding a request boxes nothing.
type Target struct {
	key, ckey, token any // strings
	set              *KeySet
}

// NewTarget boxes a lock's key, its counter key ("" without fencing) and
// its token.
func NewTarget(key, ckey, token string) Target {
	t := Target{key: key, token: token}
	if ckey != "" {
		t.ckey = ckey
	}
	return t
}

// Key returns the lock key: a set's first key.
func (t Target) Key() string {
	s, _ := t.key.(string)
	return s
}

// An Op is what a round asks of every master: one kind of request, what
// that kind carries, and how the round sends it (Call). Make one with the
// constructor of its kind; its arguments are boxed once per round and
// shared by the round's requests (a request copies the Op, not its boxes).
type Op struct {
	Call

	kind   Kind
	target Target
	// ttl is an int64 of milliseconds: an acquire's and an Extend's TTL, a
	// Release's rest of a minimum hold (nil: the key is deleted).
	ttl any
	// value is a string: for KindAcquireWait the Client's id and the turn
	// queue it carries (wait.lua); for KindAcquire, a waiter's plain
	// acquire, the value to set (the token, the wait mark and the queue),
	// nil for the token alone.
	value any
	fence any // an int64: KindRaise's, and KindExtend's of a lock with a counter

	extend  Bounds       // KindExtend only
	release ReleaseFacts // KindRelease only
}

// A Call is how a round sends its Op; the root's fanout sets it.
type Call struct {
	Deadline time.Time
	// Done is the caller's context's; a request it ends before the lane
	// sends it is dropped (ErrSkipped). nil for a Release, which goes out
	// even when its caller gives up.
	Done <-chan struct{}
	// Vals is the caller's context, for its values only (a span for a
	// go-redis hook); it lives as long as the request.
	Vals context.Context
	// Inline says the request may run on the caller's goroutine: the
	// caller waits for it (see Master.Send).
	Inline bool
}

// Bounds are what an Extend may do no later than: the master runs nothing
// of it past them, by its own clock (extend.lua; request.bounds adds the
// master's clock offset).
type Bounds struct {
	// RetakeBy is in Unix milliseconds by the client's wall clock: the
	// Extend re-takes a vanished key only until then (0: never).
	RetakeBy int64
	// ValidBy is in Unix milliseconds: the end of the validity the Extend
	// serves; 0 sends none, and leaves RetakeBy as that bound.
	ValidBy int64
	// Halt is the lock's releasing flag: a request still queued when a
	// Release has begun is not sent (ErrReleasing), so that it cannot
	// re-take a key the Release deleted.
	Halt *atomic.Bool
}

// ReleaseFacts are what a Release knows of the Releases of its lock before
// it, and of the lock's life: what its answers mean, and how long it is
// worth keeping when it gets none.
type ReleaseFacts struct {
	// Deleted and Reached are the masters (bit i for master i) where an
	// earlier Release of the same lock deleted the key (Deleted) or may
	// have (Reached: sent before KeyEnd, the lock's validity end when its
	// first Release began, and no answer came). A Release that finds the
	// key gone, or another owner's, on such a master finds what the
	// earlier one did, not a lapse, unless the master is seen to have
	// restarted since the lock was obtained (Since; see deletedBefore).
	Deleted, Reached uint64
	// Known are the lock's masters whose process the Client knew when the
	// lock was obtained (Master.Told).
	Known  uint64
	KeyEnd time.Time
	Since  time.Time
	// Stale is when a Release kept for a master that did not answer
	// becomes pointless: the key has expired by then. Zero: never.
	Stale time.Time
	// Recheck, for a Release by a handle that did not obtain its lock (the
	// root's Attach), is when to send it once more to a master where it
	// found the key absent: the original Obtain's request there may still
	// be on its way, and land after it (TestHandOverLeavesNoStrayKey).
	Recheck time.Time
}

// Kind returns what o asks.
func (o *Op) Kind() Kind { return o.kind }

// Acquire is the acquire of t for ttl (boxed int64 milliseconds): SET NX,
// or on a lock with a fence counter acquire_fenced.lua, or on a set
// acquire_set.lua. value, for a waiter's plain acquire of a lock without
// a counter, is the value to set in place of the token alone (nil: the
// token).
func Acquire(t Target, ttl, value any) Op {
	o := Op{kind: KindAcquire, target: t, ttl: ttl, value: value}
	switch {
	case t.set != nil:
		o.kind = KindAcquireSet
	case t.ckey != nil:
		o.kind = KindAcquireFenced
	}
	return o
}

// AcquireWait is a waiting Obtain's acquire of t, one key (wait.lua): turn
// is the Client's id and the turn queue it carries.
func AcquireWait(t Target, ttl, turn any) Op {
	return Op{kind: KindAcquireWait, target: t, ttl: ttl, value: turn}
}

// Raise raises the fence counter of t, a fenced lock, to fence.
func Raise(t Target, fence int64) Op {
	return Op{kind: KindRaise, target: t, fence: fence}
}

// Extend makes t's key last at least ttl more, within b; fence is sent
// (to re-take a vanished key with it) when t has a fence counter.
func Extend(t Target, ttl any, fence int64, b Bounds) Op {
	o := Op{kind: KindExtend, target: t, ttl: ttl, extend: b}
	if t.ckey != nil {
		o.fence = fence
	}
	return o
}

// Release deletes t's key where it still holds t's token; with hold (boxed
// int64 milliseconds, the rest of a minimum hold) it keeps the key that
// long instead.
func Release(t Target, hold any, f ReleaseFacts) Op {
	return Op{kind: KindRelease, target: t, ttl: hold, release: f}
}

// Watch is WaitReleased's look at key (watch.lua).
func Watch(key string) Op {
	return Op{kind: KindWatch, target: Target{key: key}}
}
