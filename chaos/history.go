package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// A Hold is one lock as its holder saw it. Times are on this process's
// monotonic clock; their wall readings are compared with the witness's.
type Hold struct {
	Client string
	Key    string
	Keys   []string // a lock on several keys (ObtainMulti): the whole set; nil: Key alone
	Token  string
	Fence  int64
	Kind   string // "obtain" (Obtain, Extend, Release by hand), "keepalive" (with KeepAlive running), "do" (inside Do's fn), "attach" (a handle taken over from another client)
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
	ReleaseEnd   time.Time // when Release returned
	Released     bool      // Release returned nil
	ReleaseErr   string
	// HandedAt is when the holder handed the lock over to another client
	// (which attaches it): its own believed-valid interval ends there.
	HandedAt time.Time
	// HoldAtLeast is the lock's minimum hold (WithHoldAtLeast); KeptUntil
	// what its Release reported: the masters keep the key until then.
	HoldAtLeast time.Duration
	KeptUntil   time.Time

	// Calls are the lock's Extends, renewals and Attach, each with the end
	// of the validity its requests were sent for, as the lock reported them;
	// grown the readings at which the validity's end moved later. A
	// hand-over's Attach goes on the giver's hold, whatever it returned: a
	// failed one ran on the masters it reached all the same, and has no
	// hold of its own (checkLateEffects reads the calls of a token's every
	// hold). Its end is the library's own bound, start + TTL - drift, and
	// it never explains a re-take (see Confirmed).
	Calls []ExtendCall
	grown []ValidAt

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

// An ExtendCall is one request for more time (an Extend, a watchdog's
// renewal, an Attach's confirmation): its requests were sent from Start on,
// for a validity that ended at Served. Confirm marks an Attach's
// confirmation, which resets the key's TTL where the key holds the token
// and never re-takes a vanished key (its re-take bound is 0).
type ExtendCall struct {
	Start, Served time.Time
	Confirm       bool
}

// A ValidAt is a reading: at At, the validity ran until End.
type ValidAt struct {
	At, End time.Time
}

// Called records one request for more time.
func (h *Hold) Called(start, served time.Time) {
	h.mu.Lock()
	h.Calls = append(h.Calls, ExtendCall{Start: start, Served: served})
	h.mu.Unlock()
}

// Confirmed records an Attach's confirmation of the lock, sent from start
// on for a validity that ends at served: it explains a PEXPIRE until then,
// never a re-take, which an Attach does not make
// (TestAttachConfirmationsAreJudgedByTheLibrarysBound).
func (h *Hold) Confirmed(start, served time.Time) {
	h.mu.Lock()
	h.Calls = append(h.Calls, ExtendCall{Start: start, Served: served, Confirm: true})
	h.mu.Unlock()
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
		if n := len(h.grown); n == 0 || end.Sub(h.grown[n-1].End) > time.Millisecond {
			h.grown = append(h.grown, ValidAt{at, end})
		}
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
// end as last reported, or the release's start, or the hand-over, if
// earlier.
func (h *Hold) End() time.Time {
	end := h.Until
	for _, t := range []time.Time{h.ReleaseStart, h.HandedAt} {
		if !t.IsZero() && t.Before(end) {
			end = t
		}
	}
	return end
}

// AllKeys are the keys the hold holds: its set, or its key.
func (h *Hold) AllKeys() []string {
	if len(h.Keys) > 0 {
		return h.Keys
	}
	return []string{h.Key}
}

// A History collects the holds and the waits of a run.
type History struct {
	mu    sync.Mutex
	holds []*Hold
	waits []*WaitRec
}

// A WaitRec is one waiting Obtain (WithWait) or WaitReleased call.
type WaitRec struct {
	Client     string
	Key        string
	Watch      bool // WaitReleased
	Start, End time.Time
	OK         bool // obtained (WaitReleased: returned nil)
	Err        string
}

// AddWait records a finished wait.
func (hs *History) AddWait(x *WaitRec) {
	hs.mu.Lock()
	hs.waits = append(hs.waits, x)
	hs.mu.Unlock()
}

// Waits returns the recorded waits.
func (hs *History) Waits() []*WaitRec {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return slices.Clone(hs.waits)
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
	// A master ran an extend's PEXPIRE or re-take of the token after the
	// end of the validity the request was sent for (witness): a renewal
	// that took effect past the validity it served.
	RenewalAfterValidity int
	// ... and extend requests that ran past it without effect (not a check).
	ExtendRanAfterValidity int
	// Another holder got a key before the minimum hold (WithHoldAtLeast) of
	// a lock released early had passed (its KeptUntil).
	HoldAtLeastBroken int

	// CheckWorld's: waits checked and waits longer than their bound while
	// a quorum of the key's masters was free; hand-overs checked and
	// their keys left after the release.
	WaitsChecked, WaitLate               int
	HandoversChecked, StrayAfterHandover int

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
		{"renewal_after_validity", f.RenewalAfterValidity}, {"extend_ran_after_validity", f.ExtendRanAfterValidity},
		{"hold_at_least_broken", f.HoldAtLeastBroken},
		{"waits_checked", f.WaitsChecked}, {"wait_late", f.WaitLate},
		{"handovers_checked", f.HandoversChecked}, {"stray_after_handover", f.StrayAfterHandover},
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
		for _, k := range h.AllKeys() {
			byKey[k] = append(byKey[k], h)
		}
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
	if w != nil {
		checkLateEffects(&f, holds, w)
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
					f.example("overlap on %s: %s (%s %v) valid [+0, +%v] and %s (%s %v) from +%v", key, a.Client, a.Kind, a.AllKeys(),
						end.Sub(a.Start), b.Client, b.Kind, b.AllKeys(), b.Start.Sub(a.Start))
				}
			}
			// A lock released before its minimum hold keeps its key until
			// KeptUntil: nobody else may get it before (a drift allowance
			// and the two clocks' readings aside).
			if !a.KeptUntil.IsZero() && a.Released {
				kept := a.KeptUntil.Add(-time.Duration(float64(a.HoldAtLeast)*0.01) - 3*time.Millisecond)
				for _, b := range live[i+1:] {
					if b.Token != a.Token && !b.Start.Before(a.End()) && b.Start.Before(kept) {
						f.HoldAtLeastBroken++
						f.example("hold at least broken on %s: %s released early, kept until +%v; %s got it at +%v", key, a.Client,
							a.KeptUntil.Sub(a.Start), b.Client, b.Start.Sub(a.Start))
					}
				}
			}
			if a.Fence > 0 {
				if topHolder != nil && a.Fence <= top && a.Token != topHolder.Token { // a hand-over keeps its fence
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

// checkLateEffects finds extend requests that a master ran after the end of
// the validity they were sent for: for each token (a hand-over's holds
// share one), a request that ran at T was sent at or before T, for a
// validity that ended no later than the latest end the lock reported by T
// (its Calls, and its readings). An extend's PEXPIRE or re-take after that
// is a renewal that took effect past the validity it served. An Attach's
// confirmation (Confirm) explains no re-take: it never makes one. 1ms for
// the two clocks' readings.
func checkLateEffects(f *Findings, holds []*Hold, w *Witness) {
	type mark struct {
		at, end int64
		confirm bool
	}
	byToken := map[string][]mark{}
	who := map[string]*Hold{}
	for _, h := range holds {
		if h.Token == "" || strings.HasPrefix(h.Token, "do-") {
			continue
		}
		h.mu.Lock()
		for _, c := range h.Calls {
			byToken[h.Token] = append(byToken[h.Token], mark{c.Start.UnixMicro(), c.Served.UnixMicro(), c.Confirm})
		}
		for _, g := range h.grown {
			byToken[h.Token] = append(byToken[h.Token], mark{g.At.UnixMicro(), g.End.UnixMicro(), false})
		}
		h.mu.Unlock()
		who[h.Token] = h
	}
	for token, ms := range byToken {
		sort.Slice(ms, func(i, j int) bool { return ms[i].at < ms[j].at })
		// best(T): the latest end reported by T; for a re-take, by a call
		// that may make one.
		best := func(t int64, retake bool) int64 {
			b := int64(math.MinInt64)
			for _, m := range ms {
				if m.at > t {
					break
				}
				if retake && m.confirm {
					continue
				}
				b = max(b, m.end)
			}
			return b
		}
		for _, ev := range w.Events(token) {
			if ev.Kind != EvEffect && ev.Kind != EvRetake && ev.Kind != EvExtend {
				continue
			}
			if late := ev.At - best(ev.At+1000, ev.Kind == EvRetake); late > 1000 {
				h := who[token]
				if ev.Kind == EvExtend {
					f.ExtendRanAfterValidity++
					continue
				}
				f.RenewalAfterValidity++
				f.example("renewal after validity: %s %s: master %d ran an extend's %s %v after the end of the validity it was sent for",
					h.Client, h.Key, ev.Master, map[string]string{EvEffect: "PEXPIRE", EvRetake: "re-take"}[ev.Kind], time.Duration(late)*time.Microsecond)
			}
		}
	}
}

// A World is what the checks of waits and hand-overs need to know of a
// run beyond its holds.
type World struct {
	// Nodes returns the masters of key and its quorum; ok is false for a
	// key whose state the witness does not follow (it is not checked).
	Nodes func(key string) (masters []int, quorum int, ok bool)
	// Disturbed returns, when a fault that can hold up client's calls on
	// key was under way at some time in [from, to] (a window on its own
	// connections, a master frozen, the client restarted), the time that
	// fault and its aftermath ended (go-redis's re-dial, a subscription's
	// retry); zero otherwise.
	Disturbed func(client, key string, from, to time.Time) time.Time
	// Round is how long client may take to obtain a key that is free on a
	// quorum once it asks (a gate's round, then the rest, and one more for
	// a reply that came late on a loaded machine: three node timeouts, a
	// turn's wait, twice the slack); Settle how long after its release a
	// released key may still be on a master (a node timeout, then a kept
	// Release sent again at a lane's tick within another, and the slack).
	Round, Settle func(client string) time.Duration
	// Horizon is how far the witness has read: nothing later is judged.
	Horizon time.Time
}

// CheckWorld adds to f the checks that read the keys' states from the
// witness: every wait bounded once a quorum of the key's masters is free,
// and no key left behind a hand-over's release.
func CheckWorld(f *Findings, holds []*Hold, waits []*WaitRec, w *Witness, wd World) {
	us := func(t time.Time) int64 { return t.UnixMicro() }
	at := func(u int64) time.Time { return time.UnixMicro(u) }
	horizon := us(wd.Horizon)
	free := map[string][]FreeSpan{}
	freeOf := func(key string) ([]FreeSpan, bool) {
		if fs, ok := free[key]; ok {
			return fs, true
		}
		ms, q, ok := wd.Nodes(key)
		if !ok {
			return nil, false
		}
		var per [][]KeyChange
		for _, m := range ms {
			per = append(per, w.Changes(m, w.prefix+key))
		}
		free[key] = FreeStretches(per, q)
		return free[key], true
	}
	for _, x := range waits {
		fs, ok := freeOf(x.Key)
		if !ok {
			continue
		}
		round := wd.Round(x.Client)
		for _, sp := range fs {
			// x waited while the key was free on a quorum from F on: it (or
			// another waiter) must get it by the time a quorum of the keys
			// it was refused by could have expired (announcements lost),
			// plus a round, unless another took it (the span ends), or a
			// fault held x's calls up meanwhile.
			t0 := max(sp.From, us(x.Start))
			if t0 >= sp.To || t0 >= us(x.End) {
				continue
			}
			deadline := max(t0, sp.Quorum) + round.Microseconds()
			if deadline > horizon {
				continue
			}
			if d := wd.Disturbed(x.Client, x.Key, at(t0), at(deadline)); !d.IsZero() {
				continue
			}
			f.WaitsChecked++
			if us(x.End) > deadline && sp.To > deadline {
				f.WaitLate++
				what := "waiter"
				if x.Watch {
					what = "WaitReleased"
				}
				f.example("wait late: %s %s of %s: the key free on a quorum from %s (the refusals' keys gone by +%v), still waiting %v after (bound %v; it ended %v: ok=%v %s)",
					x.Client, what, x.Key, at(sp.From).Format("15:04:05.000"), time.Duration(sp.Quorum-sp.From)*time.Microsecond,
					time.Duration(min(us(x.End), sp.To)-t0)*time.Microsecond, time.Duration(deadline-t0)*time.Microsecond,
					x.End.Sub(at(t0)), x.OK, x.Err)
				break
			}
		}
	}
	for _, h := range holds {
		if h.Kind != "attach" || !h.Released || h.ReleaseEnd.IsZero() {
			continue
		}
		settle := wd.Settle(h.Client)
		t := h.ReleaseEnd.Add(settle)
		for range 20 { // past every fault of the client's, and its aftermath
			d := wd.Disturbed(h.Client, h.Key, h.ReleaseStart, t)
			if d.IsZero() || !d.After(t.Add(-settle)) {
				break
			}
			t = d.Add(settle)
		}
		if us(t) > horizon || (!h.KeptUntil.IsZero() && h.KeptUntil.After(t)) {
			continue
		}
		checked := false
		for _, key := range h.AllKeys() {
			ms, _, ok := wd.Nodes(key)
			if !ok {
				continue
			}
			checked = true
			for _, m := range ms {
				if v, ok := ValueAt(w.Changes(m, w.prefix+key), us(t)); ok && (v == h.Token || strings.HasPrefix(v, h.Token+"!")) {
					f.StrayAfterHandover++
					f.example("stray after hand-over: %s released %s (attached) at +%v; master %d still holds it %v later", h.Client, key,
						h.ReleaseEnd.Sub(h.Start), m, t.Sub(h.ReleaseEnd))
				}
			}
		}
		if checked {
			f.HandoversChecked++
		}
	}
}

// A FreeSpan is a stretch during which a key was absent on a quorum of its
// masters; Quorum is when a quorum of the keys there at its start would
// have expired (those deleted, at their expiry; those still there, too).
type FreeSpan struct {
	Span
	Quorum int64
}

// FreeStretches returns the stretches during which the key was absent on
// at least q of the masters whose changes are given.
func FreeStretches(per [][]KeyChange, q int) []FreeSpan {
	pres := make([][]Present, len(per))
	times := []int64{0}
	for i, cs := range per {
		pres[i] = Presence(cs)
		for _, p := range pres[i] {
			times = append(times, p.From, p.To)
		}
	}
	slices.Sort(times)
	times = slices.Compact(times)
	presentAt := func(i int, t int64) bool {
		for _, p := range pres[i] {
			if p.From <= t && t < p.To {
				return true
			}
		}
		return false
	}
	var out []FreeSpan
	for k, t := range times {
		if t == math.MaxInt64 {
			break
		}
		absent := 0
		for i := range per {
			if !presentAt(i, t) {
				absent++
			}
		}
		end := int64(math.MaxInt64)
		if k+1 < len(times) {
			end = times[k+1]
		}
		if absent < q {
			continue
		}
		if n := len(out); n > 0 && out[n-1].To == t {
			out[n-1].To = end
			continue
		}
		out = append(out, FreeSpan{Span: Span{t, end}, Quorum: quorumExpiry(pres, q, t)})
	}
	return out
}

// quorumExpiry returns when a quorum of the masters' keys, as they were
// just before t, would have expired: a key there at t, at its expiry; one
// deleted at or before t, at the expiry it had then; one expired, when it
// did.
func quorumExpiry(pres [][]Present, q int, t int64) int64 {
	var xs []int64
	for _, ps := range pres {
		x := int64(math.MinInt64)
		for _, p := range ps {
			if p.From > t {
				break
			}
			switch {
			case p.To > t || p.To == p.Exp || p.Exp == 0: // still there, expired, or deleted without expiry
				x = p.To
				if p.To > t {
					x = p.Exp
					if x == 0 {
						x = math.MaxInt64
					}
				}
			default: // deleted before it expired
				x = p.Exp
			}
		}
		xs = append(xs, x)
	}
	slices.Sort(xs)
	return max(t, xs[q-1])
}
