package redlock

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// Sentinel errors. Compare with [errors.Is], never with ==: the errors
// returned by this package wrap them with detail.
var (
	// ErrNotObtained means the lock was not obtained after every attempt.
	// Every such error also matches exactly one of [ErrTaken] (another
	// owner holds the lock) or [ErrUnavailable] (too few masters answered
	// to decide), and carries a [*QuorumError] with what each master said,
	// reachable through [errors.As]. When the wait ended with the context,
	// it also matches the context's cause.
	ErrNotObtained = errors.New("redlock: lock not obtained")

	// ErrLockLost means the lock is no longer ours on a quorum: refusals
	// from the masters (another owner's token, or no key at all) rule out a
	// quorum, or the lock's validity had already run out. Work done under
	// the lock may have overlapped with another holder.
	ErrLockLost = errors.New("redlock: lock lost")

	// ErrTaken means another owner holds the lock. As one master's answer
	// it is a [NodeError]'s Err: the key there holds another owner's
	// token. As the outcome of a failed Obtain (or Do) it means the
	// refusals of other owners alone rule out a quorum: more than
	// N - quorum masters answered "held by another owner". That is the
	// error to skip work on ("another replica is doing it"): an outage
	// never matches it, nor does a lock lost while held ([ErrLockLost]).
	ErrTaken = errors.New("redlock: held by another owner")

	// ErrUnavailable is the outcome of an operation that too few masters
	// answered to decide: they were down, slow, refused the connection, or
	// the context ended first (then the error matches the context's cause
	// too). A failed Obtain with mixed answers (some masters held by
	// another owner, some silent) matches ErrUnavailable unless the "held"
	// answers alone rule out a quorum: the silent masters might have been
	// free.
	ErrUnavailable = errors.New("redlock: masters unavailable")

	// ErrClosed is returned by calls on a [Client] after [Client.Close].
	ErrClosed = errors.New("redlock: client closed")

	// ErrInvalidArgument marks bad input (an empty key, a TTL under 1 ms, a
	// nil or duplicate master, ...). It never matches [ErrNotObtained].
	ErrInvalidArgument = errors.New("redlock: invalid argument")
)

// The answers of one master that the wire (internal/wire) makes, under
// the names the lock logic uses.
var (
	errAbsent       = wire.ErrAbsent       // the key is not there
	errNoReply      = wire.ErrNoReply      // not heard before the round decided
	errPastValidity = wire.ErrPastValidity // an Extend the master's clock put past the validity
	errSkipped      = wire.ErrSkipped      // not sent: the caller gave up
	errQueued       = wire.ErrQueued       // not sent: its deadline passed in the queue
	errStalled      = wire.ErrStalled      // not sent: the master is not answering, too many wait
)

// errNotAsked marks a master a gated round (fanoutGated) did not ask
// because its first master refused.
var errNotAsked = errors.New("redlock: not asked: the first master asked refused")

// unprefixed wraps an error of this package for use inside another's
// message, without repeating "redlock: ".
type unprefixed struct{ error }

func (e unprefixed) Error() string { return strings.TrimPrefix(e.error.Error(), "redlock: ") }
func (e unprefixed) Unwrap() error { return e.error }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// A ReplicaError is a master's answer, with [WithReplicaAcks], to a grant
// it made (an acquire, an Extend) that too few of its replicas acknowledged
// within the timeout: the grant does not count. It is a master's failure
// (a [NodeError]'s Err), not a refusal: an Obtain that misses its quorum
// for it matches [ErrNotObtained] and [ErrUnavailable], never [ErrTaken];
// an Extend matches ErrUnavailable and keeps the lock until its shortened
// validity ends. Find it with [errors.As].
type ReplicaError struct {
	Acked   int           // replicas that acknowledged the write (WAIT's answer)
	Want    int           // replicas required
	Timeout time.Duration // how long the master waited for them
	Err     error         // why WAIT gave no count (an error reply, a timeout); nil when it did
}

func (e *ReplicaError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("redlock: granted, but no count of replica acknowledgements (WAIT %d %d): %v", e.Want, e.Timeout.Milliseconds(), unprefixed{e.Err})
	}
	return fmt.Sprintf("redlock: granted, but %d of %d replicas acknowledged within %v", e.Acked, e.Want, e.Timeout)
}

func (e *ReplicaError) Unwrap() error { return e.Err }

// A NodeError is one master's answer to one request.
type NodeError struct {
	Addr string // the master's address as its client knows it, else "master[i]"
	Err  error  // nil when this master agreed
	// Key, for a lock on two or more keys ([Client.ObtainMulti]) that this
	// master refused (Err is ErrTaken), is the key of the set it found
	// held by another owner, as the caller named it; else "".
	Key string
}

func (e NodeError) String() string {
	if e.Err == nil {
		return e.Addr + ": ok"
	}
	s := e.Addr + ": " + strings.TrimPrefix(e.Err.Error(), "redlock: ")
	if e.Key != "" {
		s += fmt.Sprintf(" (key %q)", e.Key)
	}
	return s
}

// A QuorumError reports, master by master, an operation that missed its
// quorum. Through [errors.Is] it matches its kind ([ErrNotObtained] for Op
// "obtain", [ErrLockLost] when refusals ruled out a quorum), its outcome
// unless the lock was lost ([ErrTaken] when other owners' refusals alone
// ruled out a quorum, else [ErrUnavailable]), and every node's failure, so
// errors.Is(err, context.DeadlineExceeded) finds timeouts. It matches at
// most one of ErrTaken and ErrUnavailable, and exactly one unless the lock
// was lost; [Client.WaitReleased]'s, when too few masters answered,
// matches ErrUnavailable only, whatever the others said. A single
// master's "held by another owner" answer is in its NodeError, not matched
// by the QuorumError unless it decided the outcome.
type QuorumError struct {
	Op     string // "obtain", "extend" or "release"
	Quorum int
	Nodes  []NodeError
	kind   error  // ErrNotObtained, ErrLockLost, ErrUnavailable (too few answers decided it), or nil when masters merely failed to answer
	why    string // what decided it, when the answers alone do not say
}

// outcome is ErrTaken when more than N - quorum masters answered "held by
// another owner", else ErrUnavailable; nil for a lost lock. A kind of
// ErrUnavailable (too few answers decided it) is the outcome whatever the
// answers: at an even N, half the masters answering "held" is more than N
// - quorum, yet the silent half might have been free, and an error
// matches one outcome only. (TestUnavailableQuorumErrorIsNeverTaken,
// TestEveryOutcomeMatchesOneKind)
func (e *QuorumError) outcome() error {
	switch e.kind {
	case ErrLockLost:
		return nil // lost, whoever holds it now: "skip, another has it" must not match
	case ErrUnavailable:
		return ErrUnavailable
	}
	taken := 0
	for _, n := range e.Nodes {
		if n.Err == ErrTaken {
			taken++
		}
	}
	if taken > len(e.Nodes)-e.Quorum {
		return ErrTaken
	}
	return ErrUnavailable
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	b.WriteString("redlock: ")
	b.WriteString(e.Op)
	switch e.kind {
	case ErrNotObtained:
		b.WriteString(": lock not obtained")
	case ErrLockLost:
		b.WriteString(": lock lost")
	default:
		b.WriteString(": no quorum")
	}
	switch e.outcome() {
	case ErrTaken:
		b.WriteString(", held by another owner")
	case ErrUnavailable:
		b.WriteString(", masters unavailable")
	}
	if e.why != "" {
		b.WriteString(", ")
		b.WriteString(e.why)
	}
	agreed := 0
	for _, n := range e.Nodes {
		if n.Err == nil {
			agreed++
		}
	}
	fmt.Fprintf(&b, " (%d of %d agreed, quorum %d):", agreed, len(e.Nodes), e.Quorum)
	for i, n := range e.Nodes {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteByte(' ')
		b.WriteString(n.String())
	}
	return b.String()
}

// Unwrap returns the kind, the outcome, then every node's failure, so
// errors.Is also sees timeouts and connection errors.
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, 0, len(e.Nodes)+2)
	if e.kind != nil {
		errs = append(errs, e.kind)
	}
	if o := e.outcome(); o != nil && o != e.kind {
		errs = append(errs, o)
	}
	for _, n := range e.Nodes {
		if n.Err != nil && n.Err != ErrTaken && n.Err != errAbsent {
			errs = append(errs, n.Err)
		}
	}
	return errs
}
