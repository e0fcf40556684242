package redlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// An Observer hears about the life of every lock of a Client: each Obtain,
// Extend and renewal, Release, lost lock, each master that starts or
// stops answering, and renewals that fall behind. Set one with [WithObserver]; without one the library
// pays nothing for it. The package provides [SlogObserver]; the module
// github.com/redlock-go/redlock/redlockotel provides OpenTelemetry metrics
// and spans.
//
// Observe is called synchronously, on the goroutine of the call that the
// event reports (the caller's, or for a renewal one of the few the Client
// runs every watchdog's renewals on), after the operation, with the
// caller's context (its values: a span to be the parent). It must be
// quick and must not block: a slow Observe slows the lock calls, and the
// renewals of every lock of the Client; while it holds up a renewal of a
// lock, the caller's Extend or Release of that lock waits too. A panic in Observe is recovered and the event
// dropped. Events are values the Observer may keep, unless it is a
// [TransientObserver] that says it keeps none: its Obtain and Release
// events are then reused.
//
// New kinds of events may be added: an Observer should ignore the ones it
// does not know.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// An Event is one of [*ObtainEvent], [*ExtendEvent], [*ReleaseEvent],
// [*LostEvent], [*MasterEvent] and [*BacklogEvent]; more may come.
type Event interface{ event() }

// An Outcome is how a lock operation ended, as a label for metrics.
type Outcome string

// Outcomes. An operation's error matches the sentinel of the same name.
const (
	Obtained    Outcome = "obtained"    // Obtain: the lock is held
	Extended    Outcome = "extended"    // Extend or a renewal: a quorum confirmed
	Released    Outcome = "released"    // Release: a quorum confirmed the delete
	Taken       Outcome = "taken"       // Obtain: another owner holds it (ErrTaken)
	Unavailable Outcome = "unavailable" // too few masters answered (ErrUnavailable)
	Lost        Outcome = "lost"        // Extend, renewal or Release: the lock was no longer ours (ErrLockLost)
	Cancelled   Outcome = "cancelled"   // the caller's context ended, or the Client closed, first
	// Obtain: refused by the Client, its renewals late (ErrRenewalsLate)
	RenewalsLate Outcome = "renewals_late"
)

// A LostReason says why a watchdog gave a lock up, as a label for metrics.
type LostReason string

// Reasons for a lost lock.
const (
	Refused LostReason = "refused"  // a renewal was refused: another owner, or the key gone from too many masters
	RanOut  LostReason = "ran_out"  // renewals failed (or none completed) until the validity ran out
	MaxHold LostReason = "max_hold" // WithMaxHold ran out
)

// An ObtainEvent reports one Obtain, or the Obtain of a Do, with all its
// attempts.
type ObtainEvent struct {
	Key      string        // as the caller named it
	Attempts int           // attempts made, the first included
	Wait     time.Duration // from the call until it returned
	Outcome  Outcome       // Obtained, Taken, Unavailable, Cancelled or RenewalsLate
	Fence    int64         // the lock's fence, with fencing
	Masters  []NodeError   // the last attempt's answer of each master (Err nil: granted)
	Err      error         // what Obtain returned
}

// An ExtendEvent reports one Extend of the caller's (Renewal false) or one
// renewal by a watchdog.
type ExtendEvent struct {
	Key     string
	Renewal bool
	Latency time.Duration
	Outcome Outcome       // Extended, Lost, Unavailable or Cancelled
	Before  time.Duration // validity left when it started
	After   time.Duration // validity left when it returned
	Masters []NodeError
	Err     error
}

// A ReleaseEvent reports one Release (also Do's).
type ReleaseEvent struct {
	Key     string
	Held    time.Duration // since the lock was obtained
	Latency time.Duration
	Outcome Outcome // Released, Lost, Unavailable or Cancelled
	Masters []NodeError
	Err     error
}

// A LostEvent reports that a watchdog cancelled the work of a lock it
// could no longer trust ([ErrLockLost]): a renewal was refused, renewals
// failed until the validity ran out, or WithMaxHold ran out.
type LostEvent struct {
	Key          string
	Reason       LostReason
	Cause        error         // the work context's cause
	Held         time.Duration // since the lock was obtained
	SinceRenewal time.Duration // since the last good renewal (or the Obtain)
}

// A BacklogEvent reports that the Client's renewals fell behind (Behind
// true: a renewal waited more than 100ms past its time for its turn, as
// when the Client holds more locks than the machine can renew, or every
// worker waits on masters that do not answer), and then that they caught
// up (Behind false: no renewal due is waiting). While behind, the Client
// renews its locks in the order their validity ends, and gives up those
// whose validity comes down to the cancel margin before their turn (a
// [LostEvent] each, the cause matching [ErrLockExpiring]); with
// [WithRenewalBacklogLimit], its Obtains fail fast meanwhile.
//
// A renewal's time is when it falls due, or, for one on the renewal grid
// (the renewals of many locks fall due together on a grid of times, a
// step of at most an eighth of the renewal period), the next point of the
// grid, before which its time on its lock's schedule is, or the last
// moment it can begin with its whole margin (a node timeout) before its
// lock's validity is down to the cancel margin, if that is sooner: a
// burst of renewals that the Client sends within a grid step is on time,
// and a renewal that waits into its margin is late.
type BacklogEvent struct {
	Behind bool
	Due    int           // renewals due and waiting, about, when it fell behind
	Late   time.Duration // how late the renewal that told it was
}

// A MasterEvent reports that a master stopped answering (Up false: a
// request timed out or failed on the network, or the master answered that
// it runs nothing for now, BUSY or LOADING; Err says how) or answers again
// (Up true). A request cut short by its caller's context does not
// count.
type MasterEvent struct {
	Addr string
	Up   bool
	Err  error
}

func (*ObtainEvent) event()  {}
func (*ExtendEvent) event()  {}
func (*ReleaseEvent) event() {}
func (*LostEvent) event()    {}
func (*MasterEvent) event()  {}
func (*BacklogEvent) event() {}

// A TransientObserver is an Observer that keeps nothing of an event once
// its Observe returns: neither the event nor a slice it holds (Masters).
// When Transient reports true (it is asked once, by [WithObserver]), a
// Client reuses the [*ObtainEvent], [*ExtendEvent] and [*ReleaseEvent]
// values it hands the Observer, so that observing a lock's Obtain, its
// renewals and its Release allocates nothing. redlockotel's Observer is
// one.
type TransientObserver interface {
	Observer
	Transient() bool
}

// Reused events: a Client whose Observer is transient (config.reuse)
// takes its Obtain, Extend and Release events, with the slices their
// answers go in, from these pools, and puts them back once Observe
// returned (TestATransientObserversEventsAreReused); otherwise every event
// is new and the Observer may keep it (TestEventsAreTheObserversToKeep).
var obtainRecs, extendRecs, releaseRecs sync.Pool

// An obtainRec is an ObtainEvent and the slice its answers go in (buf),
// apart from Masters, which may instead be an error's.
type obtainRec struct {
	ev  ObtainEvent
	buf []NodeError
}

// A releaseRec is a ReleaseEvent and the slice its answers go in.
type releaseRec struct {
	ev  ReleaseEvent
	buf []NodeError
}

// An extendRec is an ExtendEvent and the slice its answers go in.
type extendRec struct {
	ev  ExtendEvent
	buf []NodeError
}

// newObtainRec returns an obtainRec to fill with a successful try's
// answers, nodes: reused when the Observer is transient. A Client whose
// Observer is not takes nothing from the pool, which it would not put back
// (TestATransientObserversEventsAreReusedBesideAKeepingOne).
func (c *Client) newObtainRec(nodes []NodeError) *obtainRec {
	var r *obtainRec
	if c.cfg.reuse {
		r, _ = obtainRecs.Get().(*obtainRec)
	}
	if r == nil {
		r = new(obtainRec)
	}
	r.buf = append(r.buf[:0], nodes...)
	r.ev.Masters = r.buf
	return r
}

// newReleaseRec returns a releaseRec: reused when the Observer is
// transient.
func (c *Client) newReleaseRec() *releaseRec {
	if c.cfg.reuse {
		if r, _ := releaseRecs.Get().(*releaseRec); r != nil {
			return r
		}
	}
	return new(releaseRec)
}

// newExtendRec returns an extendRec: reused when the Observer is
// transient.
func (c *Client) newExtendRec() *extendRec {
	if c.cfg.reuse {
		if r, _ := extendRecs.Get().(*extendRec); r != nil {
			return r
		}
	}
	return new(extendRec)
}

// recycle puts r back for reuse once observed, when the Observer is
// transient: it keeps nothing of r, and r keeps nothing of the event.
func (c *Client) recycleObtain(r *obtainRec) {
	if c.cfg.reuse {
		clear(r.buf)
		*r = obtainRec{buf: r.buf[:0]}
		obtainRecs.Put(r)
	}
}

// recycleExtend is recycleObtain for an extendRec.
func (c *Client) recycleExtend(r *extendRec) {
	if c.cfg.reuse {
		clear(r.buf)
		*r = extendRec{buf: r.buf[:0]}
		extendRecs.Put(r)
	}
}

// recycleRelease is recycleObtain for a releaseRec.
func (c *Client) recycleRelease(r *releaseRec) {
	if c.cfg.reuse {
		clear(r.buf)
		*r = releaseRec{buf: r.buf[:0]}
		releaseRecs.Put(r)
	}
}

type observer struct{ o Observer }

func (o observer) apply(c *config) {
	c.obs, c.obsSet = o.o, true
	c.reuse = transient(o.o)
}

// transient says whether o is a TransientObserver that says so; one whose
// Transient panics is not.
func transient(o Observer) (yes bool) {
	t, ok := o.(TransientObserver)
	if !ok {
		return false
	}
	defer func() {
		if recover() != nil {
			yes = false
		}
	}()
	return t.Transient()
}

// WithObserver sends every lock's events to o (see [Observer]). Default
// none; nil is refused.
func WithObserver(o Observer) Option { return observer{o} }

// observe hands e to the Client's Observer, surviving its panics.
func (c *Client) observe(ctx context.Context, e Event) {
	defer func() { _ = recover() }()
	c.cfg.obs.Observe(ctx, e)
}

// outcome names how an operation that returned err ended; ok is its
// success outcome.
func outcome(ctx context.Context, err error, ok Outcome) Outcome {
	switch {
	case err == nil:
		return ok
	case err == errReleasedDuringExtend: // the holder released it
		return Cancelled
	case errors.Is(err, ErrLockLost):
		return Lost
	case errors.Is(err, ErrTaken):
		return Taken
	case errors.Is(err, ErrRenewalsLate):
		return RenewalsLate
	case ctx.Err() != nil || errors.Is(err, ErrClosed):
		return Cancelled
	default:
		return Unavailable
	}
}

// nodesOf returns the per-master answers an error carries.
func nodesOf(err error) []NodeError {
	var qe *QuorumError
	if errors.As(err, &qe) {
		return qe.Nodes
	}
	return nil
}

// health notes each master's answer in rd, and reports a master that
// stops or starts answering. Only an observed Client keeps track.
func (c *Client) health(ctx context.Context, rd *round) {
	if ctx.Err() != nil {
		return // the caller gave up: no master's fault
	}
	for i, n := range c.nodes {
		err := rd.nodes[i].Err
		switch {
		case err == errNoReply || err == errNotAsked || errors.Is(err, errSkipped):
			// decided without it, or not asked: no news
		case err == nil || err == ErrTaken || err == errAbsent || err == errLapsed || err == errPastValidity || wire.Answered(err):
			// The master answered: errPastValidity is its clock's refusal
			// of an Extend, not silence. (TestPastValidityAnswerIsNoMasterDown)
			if n.down.Load() && n.down.CompareAndSwap(true, false) {
				c.observe(ctx, &MasterEvent{Addr: n.addr, Up: true})
			}
		default:
			if !n.down.Load() && n.down.CompareAndSwap(false, true) {
				c.observe(ctx, &MasterEvent{Addr: n.addr, Err: err})
			}
		}
	}
}
