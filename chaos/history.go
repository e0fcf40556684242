package chaos

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// A Hold is one lock as its holder saw it. Times are on this process's
// monotonic clock; their wall readings are compared with the witness's.
type Hold struct {
	Client string
	Key    string
	Token  string
	Fence  int64
	Kind   string // "obtain" (Obtain, Extend, Release by hand), "keepalive" (with KeepAlive running), "do" (inside Do's fn)
	Quorum int

	// Start is when Obtain returned (Do: when fn started).
	Start time.Time
	// Until is the end of the validity as last reported: Validity() read
	// after Obtain and after every Extend, failed ones included (a reading
	// of 0 ends it at that reading). For a Do, when fn's context ended or fn
	// returned.
	Until time.Time
	// LastValid is the end of the validity as the last positive reading
	// reported it.
	LastValid time.Time
	// Tolerance is how late an end may have been seen: the scheduler's slack
	// for a Do, whose end is an observed cancellation; 0 for an end the lock
	// computed.
	Tolerance time.Duration

	ReleaseStart time.Time // zero: not released
	Released     bool      // Release returned nil
	ReleaseErr   string

	Extends []ExtendRec

	lapsed time.Time // the first reading of 0 before the release
	// Revived: a positive reading followed a reading of 0 (from, at). Under
	// a watchdog it may be a renewal that decided in time and stored its
	// validity just after the reading: only holds without one count.
	Revived []Revival

	// The KeepAlive watchdog (kind "keepalive"), its validity sampled every
	// few milliseconds meanwhile.
	Watchdog  bool
	CancelAt  time.Time // when the work context ended (any cause)
	StoppedAt time.Time // when the holder stopped the watchdog itself
	// WatchLapse is the first of the readings of 0 no positive reading
	// followed, while the watchdog ran: the lapse as seen, never before the
	// real one.
	WatchLapse time.Time

	mu sync.Mutex // Observe may run from a sampler beside the holder
}

// An ExtendRec is one Extend call by the holder.
type ExtendRec struct {
	Start, End time.Time
	TTL        time.Duration
	Before     time.Time // the validity's end read just before the call; zero if it read 0
	After      time.Time // read just after; zero if it read 0
	OK, Lost   bool      // nil; an error matching ErrLockLost
	Closed     bool      // ErrClosed: it sent nothing
	Concurrent bool      // the watchdog was renewing the lock meanwhile
	// Deadline is the call's context's; Err the error it returned.
	Deadline time.Time
	Err      string
}

func (e ExtendRec) outcome() string {
	switch {
	case e.OK:
		return "ok"
	case e.Lost:
		return "lost"
	case e.Closed:
		return "closed"
	}
	return "failed"
}

// Revival is a positive validity read after a reading of 0.
type Revival struct {
	ZeroAt, At, LastValid time.Time
}

// Observe records a Validity() reading v taken at (just before) at.
func (h *Hold) Observe(at time.Time, v time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v > 0 {
		end := at.Add(v)
		if !h.lapsed.IsZero() {
			h.Revived = append(h.Revived, Revival{ZeroAt: h.lapsed, At: at, LastValid: h.LastValid})
			h.lapsed = time.Time{}
		}
		h.Until, h.LastValid = end, end
		h.WatchLapse = time.Time{}
		return
	}
	if h.lapsed.IsZero() {
		h.lapsed = at
	}
	if at.Before(h.Until) {
		h.Until = at
	}
	if h.Watchdog && h.WatchLapse.IsZero() && h.StoppedAt.IsZero() {
		h.WatchLapse = at
	}
}

// Stopped records that the holder stopped the watchdog at.
func (h *Hold) Stopped(at time.Time) {
	h.mu.Lock()
	h.StoppedAt = at
	h.mu.Unlock()
}

// Cancelled records that the watchdog's work context ended at.
func (h *Hold) Cancelled(at time.Time) {
	h.mu.Lock()
	if h.CancelAt.IsZero() {
		h.CancelAt = at
	}
	h.mu.Unlock()
}

// End is the end of the holder's believed-valid interval: the validity's
// end as last reported, or the release's start if earlier.
func (h *Hold) End() time.Time {
	if !h.ReleaseStart.IsZero() && h.ReleaseStart.Before(h.Until) {
		return h.ReleaseStart
	}
	return h.Until
}

// A History collects the holds of a run.
type History struct {
	mu    sync.Mutex
	holds []*Hold
}

// Add records a finished hold.
func (hs *History) Add(h *Hold) {
	hs.mu.Lock()
	hs.holds = append(hs.holds, h)
	hs.mu.Unlock()
}

// Holds returns the recorded holds.
func (hs *History) Holds() []*Hold {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return slices.Clone(hs.holds)
}

// Findings are the checker's counts, each with a first example.
type Findings struct {
	Holds   int
	Extends int

	// Two holders of one key whose believed-valid intervals overlap.
	Overlaps int
	// A failed Extend (not ErrLockLost) of TTL t started at s, that reached a
	// master (witness), after which Validity() still reported an end past
	// s+t (+ staleTolerance).
	StaleAfterFailedExtend int
	// An Extend that succeeded although Validity() read 0 just before it.
	ExtendAfterLapse int
	// A successful Extend that needed a request the masters ran after the
	// validity it started with had ended (witness).
	ExtendSuccessAfterValidity int
	// A holder whose fence is not above every earlier holder's of its key.
	FenceRegressions int
	// A positive validity after a reading of 0 (watchdog holds: with the 0
	// read more than the tolerance after the last positive end).
	Revivals int
	// The watchdog had not ended the work context by the tolerance after the
	// validity ran out.
	WatchdogLate int
	// A master re-took a key with the token after it had run the token's
	// release (witness).
	RetakeAfterRelease int
	// The token's acquire ran on a master after its release there (a
	// straggling SET; the key stays for a TTL).
	AcquireAfterRelease int
	// Release returned nil, but fewer masters than the quorum ran it (witness).
	ReleaseWithoutQuorum int

	// Examples, one per kind found.
	Examples []string
}

// A Count is one named figure.
type Count struct {
	Name  string
	Value int
}

// Figures are the counts by name, for the results table.
func (f Findings) Figures() []Count {
	return []Count{
		{"holds", f.Holds}, {"extends_checked", f.Extends}, {"overlaps", f.Overlaps},
		{"stale_validity_after_failed_extend", f.StaleAfterFailedExtend}, {"extend_after_lapse", f.ExtendAfterLapse},
		{"extend_success_after_validity", f.ExtendSuccessAfterValidity}, {"fence_regressions", f.FenceRegressions},
		{"revivals", f.Revivals}, {"watchdog_late", f.WatchdogLate}, {"retake_after_release", f.RetakeAfterRelease},
		{"acquire_after_release", f.AcquireAfterRelease}, {"release_without_quorum", f.ReleaseWithoutQuorum},
	}
}

func (f *Findings) example(format string, args ...any) {
	if len(f.Examples) < 40 {
		f.Examples = append(f.Examples, fmt.Sprintf(format, args...))
	}
}

// Check runs the checks over holds. tol is the scheduler's slack: it
// applies only where an end is observed, not computed. w may be nil (no
// witness checks).
func Check(holds []*Hold, w *Witness, tol time.Duration) Findings {
	var f Findings
	f.Holds = len(holds)
	byKey := map[string][]*Hold{}
	for _, h := range holds {
		byKey[h.Key] = append(byKey[h.Key], h)
		f.Extends += len(h.Extends)
		checkExtends(&f, h, w, tol)
		for _, rv := range h.Revived {
			if !h.Watchdog {
				f.Revivals++
				f.example("revived: %s %s read validity 0 at +%v, then a positive validity at +%v", h.Client, h.Key, rv.ZeroAt.Sub(h.Start), rv.At.Sub(h.Start))
			}
		}
		if h.Watchdog && !h.WatchLapse.IsZero() {
			// The work context should have ended by the validity's end; the
			// lapse as seen is never before the real one.
			seen := h.CancelAt
			if seen.IsZero() {
				seen = h.StoppedAt
			}
			if late := seen.Sub(h.WatchLapse); !seen.IsZero() && late > tol {
				f.WatchdogLate++
				by := ""
				for _, e := range h.Extends { // the holder's own Extend nearest before the lapse
					if e.Start.Before(h.WatchLapse) {
						by = fmt.Sprintf("; the holder's last Extend(%v) ran +%v to +%v: %s", e.TTL, e.Start.Sub(h.Start), e.End.Sub(h.Start), e.outcome())
					}
				}
				f.example("watchdog late: %s %s: validity read 0 at +%v, the work context ended %v later%s", h.Client, h.Key, h.WatchLapse.Sub(h.Start), late, by)
			}
		}
		if w != nil {
			checkWitness(&f, h, w)
		}
	}
	for key, hs := range byKey {
		live := slices.DeleteFunc(slices.Clone(hs), func(h *Hold) bool { return !h.Start.Before(h.End().Add(-h.Tolerance)) })
		sort.Slice(live, func(i, j int) bool { return live[i].Start.Before(live[j].Start) })
		var top int64
		var topHolder *Hold
		for i, a := range live {
			end := a.End().Add(-a.Tolerance)
			for _, b := range live[i+1:] {
				if !b.Start.Before(end) {
					break
				}
				if b.Token != a.Token {
					f.Overlaps++
					f.example("overlap on %s: %s (%s) valid [+0, +%v] and %s (%s) from +%v", key, a.Client, a.Kind,
						end.Sub(a.Start), b.Client, b.Kind, b.Start.Sub(a.Start))
				}
			}
			if a.Fence > 0 {
				if topHolder != nil && a.Fence <= top {
					f.FenceRegressions++
					f.example("fence regression on %s: %s got %d after %s had %d", key, a.Client, a.Fence, topHolder.Client, top)
				}
				if a.Fence > top {
					top, topHolder = a.Fence, a
				}
			}
		}
	}
	return f
}

// reached reports whether a master ran an extend of the token from start
// on, and before next (zero: ever after): an Extend whose context had ended
// asks no master, and may keep the validity it had.
func reached(evs []WitnessEvent, start, next time.Time) bool {
	for _, ev := range evs {
		if ev.Kind == EvExtend && ev.At >= start.UnixMicro()-1000 && (next.IsZero() || ev.At < next.UnixMicro()) {
			return true
		}
	}
	return false
}

// staleTolerance covers the time between the holder's clock reading
// before Extend and the lock's own at its start (with a watchdog holding
// the lock meanwhile it could be a renewal's length: those are not
// checked).
const staleTolerance = 25 * time.Millisecond

func checkExtends(f *Findings, h *Hold, w *Witness, tol time.Duration) {
	var evs []WitnessEvent
	if w != nil {
		evs = w.Events(h.Token)
	}
	for i, e := range h.Extends {
		// The next call on the lock, which the witness can no longer tell
		// apart from this one.
		next := h.ReleaseStart
		if i+1 < len(h.Extends) {
			next = h.Extends[i+1].Start
		}
		switch {
		case !e.OK && !e.Lost && !e.Closed && !e.Concurrent && !e.After.IsZero() && e.After.Sub(e.Start.Add(e.TTL)) > staleTolerance &&
			(w == nil || reached(evs, e.Start, next)):
			f.StaleAfterFailedExtend++
			f.example("stale validity: %s %s: Extend(%v) failed after %v (context %v), validity still ends %v after start+ttl: %s",
				h.Client, h.Key, e.TTL, e.End.Sub(e.Start), e.Deadline.Sub(e.Start), e.After.Sub(e.Start.Add(e.TTL)), e.Err)
		case e.OK && e.Before.IsZero() && !e.Concurrent:
			f.ExtendAfterLapse++
			f.example("extend after lapse: %s %s: Extend(%v) succeeded although Validity() read 0 just before", h.Client, h.Key, e.TTL)
		case e.OK && !e.Concurrent && w != nil:
			// How many masters ran an extend of this lock between the call's
			// start and the validity's end it started with (1ms for the two
			// clocks' readings)?
			from, to := e.Start.UnixMicro()-1000, e.Before.UnixMicro()+1000
			intime := map[int]bool{}
			for _, ev := range w.Events(h.Token) {
				if ev.Kind == EvExtend && ev.At >= from && ev.At <= to {
					intime[ev.Master] = true
				}
			}
			if len(intime) < h.Quorum {
				f.ExtendSuccessAfterValidity++
				f.example("extend success after validity: %s %s: Extend(%v) returned nil %v after the validity it started with ended; only %d masters ran it in time (quorum %d)",
					h.Client, h.Key, e.TTL, e.End.Sub(e.Before), len(intime), h.Quorum)
			}
		}
	}
}

func checkWitness(f *Findings, h *Hold, w *Witness) {
	evs := w.Events(h.Token)
	released := map[int]bool{}
	for _, ev := range evs {
		switch ev.Kind {
		case EvRelease:
			released[ev.Master] = true
		case EvRetake:
			if released[ev.Master] {
				f.RetakeAfterRelease++
				f.example("retake after release: %s %s: master %d re-took the key after running its release", h.Client, h.Key, ev.Master)
			}
		case EvAcquire:
			if released[ev.Master] {
				f.AcquireAfterRelease++
			}
		}
	}
	if h.Released && len(released) < h.Quorum {
		f.ReleaseWithoutQuorum++
		f.example("release without quorum: %s %s: Release returned nil, %d masters ran it (quorum %d)", h.Client, h.Key, len(released), h.Quorum)
	}
}

// RecreatedAfterRelease reports whether, by the witness, master m wrote
// token's key again after it had run the token's release.
func RecreatedAfterRelease(w *Witness, token string, m int) bool {
	released := false
	for _, ev := range w.Events(token) {
		if ev.Master != m {
			continue
		}
		switch ev.Kind {
		case EvRelease:
			released = true
		case EvRetake, EvAcquire:
			if released {
				return true
			}
		}
	}
	return false
}
