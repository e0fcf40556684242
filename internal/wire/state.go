package wire

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A state is what the transports of one master learn of it, shared by the
// master's lanes (a Cluster master has one per shard) and read by the
// requests' decoding and by the root through Master's methods. The
// transports write it; nothing else does.
type state struct {
	loaded    atomic.Bool  // every script is in the master's cache, as far as we know
	killKnown atomic.Int32 // 0 not asked yet, 1 CLIENT KILL allowed, 2 not
	// joins says whether runs of Extends go to the master as one call
	// (joined.go): joinsUnknown until a connection's INFO server says
	// the master is a standalone Redis, joinsRefused for good once it
	// refused one.
	joins atomic.Int32
	// runID is the master process's run_id (INFO server), to tell a
	// restart from a connection merely closed: nil until asked, "" when
	// the master does not say.
	runID atomic.Pointer[string]
	// restarted is when a lane first saw runID change (a restart), in ns
	// since epoch; 0 if never.
	epoch     time.Time
	restarted atomic.Int64
	// clock is the master's clock offset, in ms: its wall clock minus the
	// client's, as the last fresh connection to it measured (sawClock); 0
	// where none did. An Extend's bounds reach the master in its own
	// clock: request.build adds it.
	clock atomic.Int64
	// clockKnown says the last fresh connection measured clock.
	clockKnown atomic.Bool
	// told says the master answered the run_id question (with one, or by
	// denying INFO), or never will (a Cluster master): a lock obtained
	// before then cannot tell a restart since (ReleaseFacts.Known).
	told atomic.Bool
	// changed, if set, runs when a lane sees the master's run_id change:
	// a restart, or a failover to another process.
	changed func()
	// taken is closed once a lane of a standalone master has taken a
	// connection of its own (transport.take): see Master.Taken.
	taken     chan struct{}
	takenOnce sync.Once
	// slotsKnown says, on a Cluster master, that go-redis has its slot
	// map: the shards' lanes may be used (shards.go).
	slotsKnown atomic.Bool
	// fail is the last failure seen of the master (sawFailure), for the
	// error of a request the master did not answer in time (Cause).
	fail atomic.Pointer[failure]
}

// A failure is an error seen of a master, and when.
type failure struct {
	err error
	at  time.Time
}

// sawFailure records err, a failure of the master's (a dial error, a TLS
// handshake's, an error reply that says it runs nothing or refuses us:
// WRONGPASS, NOPERM, LOADING, READONLY), as its last. A timeout says
// nothing more than the timeout that reports it, and is not recorded.
// Only a failure allocates: the hot path, where nothing fails, records
// nothing. (TestRefusedMastersNameTheirCause, TestWireKeepsTheLastCauseOfAFailure)
func (st *state) sawFailure(err error) {
	if err == nil || !telling(err) {
		return
	}
	st.fail.Store(&failure{err: err, at: time.Now()})
}

// cause returns the last failure seen of the master at or after since;
// nil when none was, so a failure of an earlier outage is never blamed.
func (st *state) cause(since time.Time) error {
	f := st.fail.Load()
	if f == nil || f.at.Before(since) {
		return nil
	}
	return f.err
}

// telling reports whether err says why a master failed, beyond a timeout:
// not a deadline that passed, a context that ended, a request this package
// dropped, or a closing client.
func telling(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" && !errors.Is(err, context.Canceled) {
		return true // a dial that timed out says the master cannot be reached
	}
	return !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, ErrNoReply) && !errors.Is(err, ErrClosed) &&
		!isTimeout(err) && err != redis.Nil && err != redis.ErrClosed
}

// isTimeout reports whether err is a network timeout (a net.Error that
// says so: an i/o timeout, a dial that timed out).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// withCause returns err, a failure to get an answer that says no more
// than a timeout (a request not answered, dropped in the queue, a take
// that timed out while go-redis went on dialing on a goroutine of its
// own), with the master's last failure seen at or after since, when there
// is one: the text names it, and errors.Is and errors.As reach it.
// (TestRefusedMastersNameTheirCause)
func withCause(err error, st *state, since time.Time) error {
	if telling(err) && !errors.Is(err, ErrNoReply) || errors.Is(err, ErrClosed) {
		return err
	}
	c := st.cause(since)
	if c == nil || errors.Is(err, c) {
		return err
	}
	return &Caused{Err: err, Cause: c}
}

// A Caused is a failure to get a master's answer in time (Err) with the
// last failure the master's wire saw before it (Cause): a refused
// connection, a TLS handshake, WRONGPASS, LOADING.
type Caused struct {
	Err   error
	Cause error
}

func (e *Caused) Error() string {
	return e.Err.Error() + "; last error from the master: " + strings.TrimPrefix(e.Cause.Error(), "redlock: ")
}

func (e *Caused) Unwrap() []error { return []error{e.Err, e.Cause} }

// Cause returns the last failure the master's wire saw at or after since
// (a dial error, a TLS failure, WRONGPASS, NOPERM, LOADING, READONLY);
// nil when none was. The root names it in the error of a master that did
// not answer in time.
func (m *Master) Cause(since time.Time) error { return m.st.cause(since) }

// WithCause returns err, the failure of a master that did not answer in
// time (a timeout, ErrNoReply), with the last failure its wire saw at or
// after since, if any; any other error as it is.
func (m *Master) WithCause(err error, since time.Time) error { return withCause(err, &m.st, since) }

// sawRunID records the run_id a fresh connection read, and notes a
// restart when it differs from the one known before.
func (st *state) sawRunID(run string) {
	st.told.Store(true)
	if run == "" {
		return // not allowed to ask: restarts go unseen
	}
	if was := st.runID.Swap(&run); was != nil && *was != run {
		st.restarted.Store(int64(max(time.Since(st.epoch), 1)))
		if st.changed != nil {
			st.changed() // the root's subscriptions may be on the old process (its waker.probe)
		}
	}
}

// sawClock records the master's clock offset as a fresh connection
// measured it (transport.identify): the master's wall clock (usec, the
// server_time_usec of its INFO server reply) minus the client's when the
// reply arrived (at). ok false, a master that did not say (INFO denied, a
// Redis without the field), records 0: the client's clock is taken for
// the master's, the assumption that the clocks agree.
//
// The master read its clock somewhere within the round trip, so the
// client's reading at the middle of it is the best guess, off by up to
// half the round trip either way: the two legs need not take as long, and
// a master that is busy, or was frozen, runs the command late in it,
// which makes the middle's offset too high, the unsafe way. Taken at the
// round trip's end instead (the master read its clock before then), the
// offset can only be low, by at most the round trip: the bounds reach the
// master early, never late. Early costs at most this: a renewal that
// reaches that master within the round trip of its bound does nothing
// there (ErrPastValidity: a failure of that master's, never a loss), and
// a re-take then finds the key gone, as it is; late would let a straggler
// run past the validity. It is floored to the millisecond for the same
// reason. (TestClockOffsetIsMeasuredOnEveryFreshConnection)
//
// The offset holds until the lane's next fresh connection (see connTurn
// and connIdle; a failure drops the connection too; a watchdog's renewals
// may keep one for long): a clock that jumps meanwhile, the master's or
// the client's wall clock, moves the bounds by the jump. A master's
// clock jumped ahead refuses that master's renewals (ErrPastValidity: a
// failure, never a loss; the other masters still make a quorum) and its
// re-takes; one jumped back may run a straggler as late as the jump, as
// it keeps every key longer by the jump: Redlock holds while the clocks'
// rates agree, not across jumps. A refusal past the validity
// (ErrPastValidity) where the offset was measured gives the lane's
// connection back, so that the next request measures it again: a step
// of either clock, or a rate that drifted over the connection's life,
// costs one failed renewal, not the lock
// (TestLockObtainedAfterAMasterClockStepIsRenewed,
// TestMasterClockRunningFastWithinTheDriftLosesNoWatchedLock,
// TestClientClockSteppedBackLosesNoWatchedLock,
// TestStaleClockOffsetFailsThatMasterOnly)
func (st *state) sawClock(usec int64, at time.Time, ok bool) {
	st.clockKnown.Store(ok)
	if !ok {
		st.clock.Store(0)
		return
	}
	d := usec*1000 - at.UnixNano()
	ms := d / 1e6
	if d%1e6 < 0 {
		ms-- // floored: the offset may only err low
	}
	st.clock.Store(ms)
}

// restartedAfter reports whether the master was seen to restart after t.
func (st *state) restartedAfter(t time.Time) bool {
	d := st.restarted.Load()
	return d != 0 && st.epoch.Add(time.Duration(d)).After(t)
}

// killAllowed reports whether the master lets this client kill
// connections (the barrier; see barrier.go).
func (st *state) killAllowed() bool { return st.killKnown.Load() == 1 }

// tookConn notes that a lane has taken a connection of its own.
func (st *state) tookConn() { st.takenOnce.Do(func() { close(st.taken) }) }
