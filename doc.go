// Package redlock provides distributed locks on Redis: the Redlock quorum
// lock over N independent masters ([New]) and a single-instance lock
// ([NewSingle]), behind one API.
//
// Both are efficiency locks. They make duplicate work rare (two replicas
// rebuilding the same cache entry, running the same job), they do not make
// it impossible: a holder that pauses past its lease (a GC pause, a frozen
// VM), a master that restarts without persistence, or a clock that jumps can
// let two holders overlap. When correctness depends on the lock, the resource
// must refuse a stale holder itself: check a fencing token ([WithFencing],
// [FencedWrite]), use a database constraint or a conditional update, or use
// a consensus store (etcd, ZooKeeper).
//
// # Which call
//
//   - [Client.Do] for most work: it obtains the lock, renews it while fn
//     runs, cancels fn's context the moment the lock can no longer be
//     trusted, and releases it when fn returns.
//   - [Client.Obtain], then [Lock.Do], when the work needs the lock itself:
//     its [Lock.Fence] for the resource, its token or validity.
//   - [Client.Obtain] and [Lock.Release] to try once and hold briefly,
//     within the TTL; [Lock.Extend] to ask for more time by hand.
//   - [Lock.KeepAlive] when the lock outlives a function call (a leader that
//     holds it until shutdown): stop it, then Release.
//   - [Client.ObtainMulti] and [Client.DoMulti] for several keys at once,
//     all or none (the two accounts of a transfer).
//   - [Client.Attach] to take over a lock held under a token elsewhere;
//     [Client.Inspect] to see who holds a key.
//
// A failed Obtain (or Do) matches [ErrNotObtained] and has one of four
// outcomes: taken ([ErrTaken]: another owner holds it, skip the work),
// unavailable ([ErrUnavailable]: the masters failed to answer, an outage,
// not a reason to skip quietly; each master's error names the last cause
// seen of it, a refused connection, WRONGPASS, ...), ended by the caller
// (the context ended the call before the masters decided: the error
// matches its cause, neither ErrTaken nor ErrUnavailable), or closed
// ([ErrClosed]: [Client.Close] ended it). A lock lost while held matches
// [ErrLockLost].
//
// Locks are not reentrant: a second Obtain of a key by the same process,
// even the same goroutine, waits or fails like anyone else's. Each Obtain
// gets a fresh random token, and only the handle that holds it can extend or
// release the lock.
//
// A [Client] is safe for concurrent use by many goroutines; so is a [Lock].
// The package redlocktest runs a real Client over in-process masters, with
// the faults a test of your code needs.
package redlock
