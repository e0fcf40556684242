package redlock

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Compare with [errors.Is], never with ==: the errors
// returned by this package wrap them with detail.
var (
	// ErrNotObtained means the lock was not obtained after every attempt:
	// another owner holds it on too many masters, too few masters answered,
	// or the context ended. The error also carries a [*QuorumError] with
	// what each master said, reachable through [errors.As].
	ErrNotObtained = errors.New("redlock: lock not obtained")

	// ErrLockLost means the lock is no longer ours on a quorum: refusals
	// from the masters (another owner's token, or no key at all) rule out a
	// quorum, or the lock's validity had already run out. Work done under
	// the lock may have overlapped with another holder.
	ErrLockLost = errors.New("redlock: lock lost")

	// ErrTaken is one master's answer: the key holds another owner's token.
	// It appears in [NodeError.Err].
	ErrTaken = errors.New("redlock: held by another owner")

	// ErrClosed is returned by calls on a [Client] after [Client.Close].
	ErrClosed = errors.New("redlock: client closed")

	// ErrInvalidArgument marks bad input (an empty key, a TTL under 1 ms, a
	// nil or duplicate master, ...). It never matches [ErrNotObtained].
	ErrInvalidArgument = errors.New("redlock: invalid argument")
)

var (
	errAbsent  = errors.New("redlock: lock key absent")
	errNoReply = errors.New("redlock: no reply before the outcome was decided")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// A NodeError is one master's answer to one request.
type NodeError struct {
	Addr string // the master's address as its client knows it, else "master[i]"
	Err  error  // nil when this master agreed
}

func (e NodeError) String() string {
	if e.Err == nil {
		return e.Addr + ": ok"
	}
	return e.Addr + ": " + strings.TrimPrefix(e.Err.Error(), "redlock: ")
}

// A QuorumError reports, master by master, an operation that missed its
// quorum. It matches [ErrNotObtained] (Op "obtain") or [ErrLockLost] (when
// refusals ruled out a quorum) through [errors.Is], and every node's error
// too, so errors.Is(err, context.DeadlineExceeded) finds timeouts.
type QuorumError struct {
	Op     string // "obtain", "extend" or "release"
	Quorum int
	Nodes  []NodeError
	kind   error // ErrNotObtained, ErrLockLost, or nil when masters merely failed to answer
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

// Unwrap returns the kind, then every node's error, so errors.Is also sees
// timeouts and connection errors.
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, 0, len(e.Nodes)+1)
	if e.kind != nil {
		errs = append(errs, e.kind)
	}
	for _, n := range e.Nodes {
		if n.Err != nil {
			errs = append(errs, n.Err)
		}
	}
	return errs
}
