package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// Sentinel errors. Compare with [errors.Is], never with ==: the errors
// returned by this package wrap them with detail.
var (
	// ErrNotObtained means the lock was not obtained. Every such error
	// carries a [*QuorumError] with what each master said, reachable
	// through [errors.As], and has exactly one of four outcomes:
	//
	//   - taken: it matches [ErrTaken] (other owners' refusals alone rule
	//     out a quorum);
	//   - unavailable: it matches [ErrUnavailable] (the masters failed to
	//     answer: too few answered within the node timeout to decide);
	//   - ended by the caller: the caller's context ended the call before
	//     the masters' answers decided it (a cancel, or a deadline shorter
	//     than the node timeout); it matches the context's cause and its
	//     Err (context.Canceled, context.DeadlineExceeded), and neither
	//     ErrTaken nor ErrUnavailable, and says "ended by the caller";
	//   - closed: [Client.Close] ended it; it matches [ErrClosed], and
	//     neither ErrTaken nor ErrUnavailable.
	//
	// With [WithRenewalBacklogLimit], an Obtain the Client refuses while
	// its renewals are late matches [ErrRenewalsLate], and neither
	// ErrTaken nor ErrUnavailable; no master was asked.
	//
	// When the context or Close ends a wait between attempts ([WithRetry],
	// [WithWait]), the error is the last decided attempt's (taken or
	// unavailable), and also matches the context's cause or ErrClosed.
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
	// answered to decide: they were down, slow, refused the connection or
	// the command, within the node timeout; each master's [NodeError]
	// names the last cause seen of it (a refused dial, WRONGPASS, NOPERM,
	// LOADING, READONLY, a TLS failure), reachable through [errors.Is] and
	// [errors.As]. It means the masters failed to answer, and nothing
	// else: an operation that the caller's context (a cancel, a deadline
	// shorter than the node timeout) or [Client.Close] ended before the
	// answers decided it never matches it (see [ErrNotObtained]). A failed
	// Obtain with mixed answers (some masters held by another owner, some
	// silent) matches ErrUnavailable unless the "held" answers alone rule
	// out a quorum: the silent masters might have been free.
	ErrUnavailable = errors.New("redlock: masters unavailable")

	// ErrClosed is returned by calls on a [Client] after [Client.Close],
	// and matched by those Close ended (an Obtain's, then also matching
	// [ErrNotObtained], never [ErrUnavailable]).
	ErrClosed = errors.New("redlock: client closed")

	// ErrRenewalsLate is the outcome of an Obtain that a Client with
	// [WithRenewalBacklogLimit] refused because its own watchdogs'
	// renewals are late by more than the limit: the Client holds more
	// locks than it renews in time. No master was asked; the error also
	// matches [ErrNotObtained], and never [ErrTaken] or [ErrUnavailable].
	ErrRenewalsLate = errors.New("redlock: renewals late")

	// ErrInvalidArgument marks bad input (an empty key, a TTL too short to
	// keep validity past one request to a master, a nil or duplicate
	// master, ...). It never matches [ErrNotObtained].
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

// errRenewalsBehind marks every master of an Obtain refused for late
// renewals (Client.renewalsLate).
var errRenewalsBehind = errors.New("redlock: not asked: the Client's renewals are late")

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

// A NodeError is one master's answer to one request. A master that did
// not answer in time is named with the last failure seen of it since the
// request went out, when there was one ("...; last error from the master:
// dial tcp 10.0.0.7:6379: connect: connection refused"): Err then matches
// it too ([errors.Is] finds syscall.ECONNREFUSED, [errors.As] a
// *net.OpError or a redis.Error).
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
// ruled out a quorum; else, when the caller's context or [Client.Close]
// ended the operation before the answers decided it, what ended it (the
// context's cause and Err, or [ErrClosed]); else [ErrUnavailable]), and
// every node's failure, so errors.Is(err, context.DeadlineExceeded) finds
// timeouts. It matches at most one of ErrTaken and ErrUnavailable, and
// exactly one unless the lock was lost or the caller or Close ended the
// operation; [Client.WaitReleased]'s, when too few masters answered
// within the node timeout, matches ErrUnavailable only, whatever the
// others said. A single master's "held by another owner" answer is in its
// NodeError, not matched by the QuorumError unless it decided the outcome.
type QuorumError struct {
	Op     string // "obtain", "extend", "release" or "wait"
	Quorum int
	Nodes  []NodeError
	kind   error  // ErrNotObtained, ErrLockLost, ErrUnavailable (too few answers decided it), or nil when masters merely failed to answer
	why    string // what decided it, when the answers alone do not say
	// ended, when the caller's context (callerEnded) or Close (ErrClosed)
	// ended the operation before the masters' answers decided it, is what
	// did: the outcome is then neither ErrTaken nor ErrUnavailable.
	ended error
}

// callerEnded is why a caller's context ended a call: its cause, matching
// its Err too (a cause set with context.WithCancelCause need not).
type callerEnded struct{ cause, err error }

func (e *callerEnded) Error() string { return e.cause.Error() }

func (e *callerEnded) Unwrap() []error {
	if e.err == nil || errors.Is(e.cause, e.err) {
		return []error{e.cause}
	}
	return []error{e.cause, e.err}
}

// endedBy returns why ctx, which has ended, ended a call: matching both
// its cause and its Err.
func endedBy(ctx context.Context) error {
	return &callerEnded{cause: context.Cause(ctx), err: ctx.Err()}
}

// endedText is how an error names what ended its operation: the caller's
// context, or Close.
func endedText(ended error) string {
	if errors.Is(ended, ErrClosed) {
		return "client closed"
	}
	if errors.Is(ended, ErrRenewalsLate) {
		return strings.TrimPrefix(ended.Error(), "redlock: ")
	}
	return "ended by the caller: " + strings.TrimPrefix(ended.Error(), "redlock: ")
}

// outcome is ErrTaken when more than N - quorum masters answered "held by
// another owner", else ErrUnavailable; nil for a lost lock. A kind of
// ErrUnavailable (too few answers decided it) is the outcome whatever the
// answers: at an even N, half the masters answering "held" is more than N
// - quorum, yet the silent half might have been free, and an error
// matches one outcome only. (TestUnavailableQuorumErrorIsNeverTaken,
// TestEveryOutcomeMatchesOneKind)
//
// An operation its caller's context or Close ended before the answers
// decided it (ended) has no outcome of the masters': not ErrUnavailable,
// which says the masters failed to answer, and nothing else
// (TestCancelledObtainIsNotAnOutage, TestClosedObtainIsNotAnOutage).
func (e *QuorumError) outcome() error {
	switch e.kind {
	case ErrLockLost:
		return nil // lost, whoever holds it now: "skip, another has it" must not match
	case ErrUnavailable:
		return ErrUnavailable
	}
	if e.ended != nil && e.Op == "wait" {
		return nil // WaitReleased's "held" answers refuse nothing of the caller's
	}
	taken := 0
	for _, n := range e.Nodes {
		if n.Err == ErrTaken {
			taken++
		}
	}
	switch {
	case taken > len(e.Nodes)-e.Quorum:
		return ErrTaken
	case e.ended != nil:
		return nil
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
	if e.ended != nil && e.outcome() != ErrTaken {
		b.WriteString(", ")
		b.WriteString(endedText(e.ended))
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

// Unwrap returns the kind, the outcome, what ended the operation (the
// caller's context, or Close), then every node's failure, so errors.Is
// also sees timeouts and connection errors, and errors.As a master's
// cause (a *net.OpError).
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, 0, len(e.Nodes)+3)
	if e.kind != nil {
		errs = append(errs, e.kind)
	}
	if o := e.outcome(); o != nil && o != e.kind {
		errs = append(errs, o)
	}
	if e.ended != nil {
		errs = append(errs, e.ended)
	}
	for _, n := range e.Nodes {
		if n.Err != nil && n.Err != ErrTaken && n.Err != errAbsent {
			errs = append(errs, n.Err)
		}
	}
	return errs
}
