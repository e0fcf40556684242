package chaos

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/scripts"
)

// newTestWitness is a Witness fed by hand (no masters).
func newTestWitness() *Witness {
	w := &Witness{prefix: "chaos:", scripts: map[string]string{}, tokens: map[string][]WitnessEvent{}, keep: map[string]bool{},
		cur: make([]witnessCmd, 5), seq: make([]int64, 5), repl: map[string]bool{}}
	for range 5 {
		w.marks = append(w.marks, map[string]bool{})
		w.states = append(w.states, map[string]*keyTrack{})
	}
	w.cond.L = &w.mu
	return w
}

const (
	srcRelease = "local v = redis.call('GET', KEYS[1]) if v == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end return 0"
	srcExtend  = "local v = redis.call('GET', KEYS[1]) if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end if v == false then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end return 0"
)

// feedRun gives master m's monitor a script call at t (µs) and its first
// command, a GET: the script ran.
func feedRun(w *Witness, m int, t int64, args ...string) {
	feed(w, m, t, false, args...)
	feed(w, m, t, true, "GET", args[3])
}

// feed gives master m's monitor a line at t (µs) from a client, or from
// lua when lua is set.
func feed(w *Witness, m int, t int64, lua bool, args ...string) {
	src := "127.0.0.1:5000"
	if lua {
		src = "lua"
	}
	l := fmt.Sprintf("+%d.%06d [0 %s]", t/1e6, t%1e6, src)
	for _, a := range args {
		l += fmt.Sprintf(" %q", a)
	}
	w.line(m, l)
}

func TestParseMonitor(t *testing.T) {
	at, src, args, ok := parseMonitor(`+1796102033.600142 [0 lua] "SET" "k" "to\"k\x41" "PX" "1000"`)
	if !ok || at != 1796102033600142 || src != "lua" || len(args) != 5 || args[2] != `to"kA` {
		t.Errorf("got %d %q %q %v", at, src, args, ok)
	}
	at, src, args, ok = parseMonitor(`+1796102033.5 [0 127.0.0.1:53530] "evalsha" "ab" "1" "chaos:k" "tok"`)
	if !ok || at != 1796102033500000 || src != "127.0.0.1:53530" || len(args) != 5 {
		t.Errorf("got %d %q %q %v", at, src, args, ok)
	}
	for _, bad := range []string{"+OK", `+1.0 [0 lua] "unterminated`, `x1.0 [0 lua] "a"`, `+1.0 [0 lua] "\xZZ"`} {
		if _, _, _, ok := parseMonitor(bad); ok && bad != "+OK" {
			t.Errorf("parsed %q", bad)
		}
	}
}

func TestWitnessEvents(t *testing.T) {
	w := newTestWitness()
	shaRel, shaExt := w.learn(srcRelease), w.learn(srcExtend)
	feed(w, 2, 50, false, "evalsha", shaRel, "1", "chaos:k", "A") // master 2 does not have it: NOSCRIPT, not run
	feed(w, 0, 100, false, "script", "load", srcRelease)
	feed(w, 0, 101, false, "script", "load", srcExtend)
	// Master 0: acquire, extend (PEXPIRE), release (DEL), then a straggling
	// extend that re-takes the key.
	feed(w, 0, 1000, false, "set", "chaos:k", "A", "nx", "px", "1000")
	feed(w, 0, 2000, false, "evalsha", shaExt, "1", "chaos:k", "A", "500")
	feed(w, 0, 2001, true, "GET", "chaos:k")
	feed(w, 0, 2002, true, "PEXPIRE", "chaos:k", "500")
	feed(w, 0, 3000, false, "evalsha", shaRel, "1", "chaos:k", "A")
	feed(w, 0, 3001, true, "GET", "chaos:k")
	feed(w, 0, 3002, true, "DEL", "chaos:k")
	feed(w, 0, 4000, false, "evalsha", shaExt, "1", "chaos:k", "A", "500")
	feed(w, 0, 4001, true, "GET", "chaos:k")
	feed(w, 0, 4002, true, "SET", "chaos:k", "A", "PX", "500")
	// A key outside the prefix, and another token's commands, are not A's.
	feed(w, 0, 5000, false, "evalsha", shaRel, "1", "other:k", "A")
	feedRun(w, 1, 5000, "eval", srcRelease, "1", "chaos:k", "B")
	var kinds []string
	for _, ev := range w.Events("A") {
		kinds = append(kinds, ev.Kind)
	}
	if want := fmt.Sprint([]string{EvAcquire, EvExtend, EvEffect, EvRelease, EvDelete, EvExtend, EvRetake}); fmt.Sprint(kinds) != want {
		t.Errorf("A's events %v, want %v", kinds, want)
	}
	if evs := w.Events("B"); len(evs) != 1 || evs[0].Kind != EvRelease || evs[0].Master != 1 {
		t.Errorf("B's events %+v: want one release on master 1 (EVAL teaches the script)", evs)
	}
	if !RecreatedAfterRelease(w, "A", 0) || RecreatedAfterRelease(w, "A", 1) {
		t.Error("RecreatedAfterRelease: want master 0 only")
	}
	h := &Hold{Client: "c", Key: "k", Token: "A", Quorum: 1, Released: true}
	if f := Check([]*Hold{h}, w, 0); f.RetakeAfterRelease != 1 || f.ReleaseWithoutQuorum != 0 {
		t.Errorf("got %+v, want one retake after release", f)
	}
	// Release returned nil but only one of five masters ran it.
	h.Quorum = 3
	if f := Check([]*Hold{h}, w, 0); f.ReleaseWithoutQuorum != 1 {
		t.Errorf("got %+v, want a release without quorum", f)
	}
	w.Keep("A")
	w.Prune(0)
	if len(w.Events("B")) != 0 {
		t.Error("Prune kept a token nobody kept")
	}
	if len(w.Events("A")) == 0 {
		t.Error("Prune dropped a kept token")
	}
}

// TestWitnessSeesEachExtendOfABatch: a batch of Extends in one call
// (extend_batch.lua) counts as each token's own extend, with its own
// PEXPIRE or re-take, on the key it begins with its GET; a key outside the
// prefix, first or not, is not watched.
func TestWitnessSeesEachExtendOfABatch(t *testing.T) {
	w := newTestWitness()
	feed(w, 0, 100, false, "script", "load", scripts.ExtendBatch.Src)
	feed(w, 0, 2000, false, "evalsha", scripts.ExtendBatch.SHA, "4", "other:x", "chaos:a", "chaos:b", "chaos:c",
		"X", "500", "9", "9", "A", "500", "9", "9", "B", "500", "9", "", "C", "500", "9", "9")
	feed(w, 0, 2001, true, "GET", "other:x") // a key outside the prefix: not watched
	feed(w, 0, 2001, true, "TIME")
	feed(w, 0, 2001, true, "PEXPIRE", "other:x", "500", "GT")
	feed(w, 0, 2001, true, "GET", "chaos:a") // A: past its validity, nothing done
	feed(w, 0, 2002, true, "TIME")
	feed(w, 0, 2003, true, "GET", "chaos:b") // B: extended
	feed(w, 0, 2004, true, "TIME")
	feed(w, 0, 2005, true, "PEXPIRE", "chaos:b", "500", "GT")
	feed(w, 0, 2006, true, "GET", "chaos:c") // C: re-taken
	feed(w, 0, 2007, true, "TIME")
	feed(w, 0, 2008, true, "SET", "chaos:c", "C", "PX", "500")
	for tok, want := range map[string][]string{
		"X": nil,
		"A": {"extend@chaos:a"},
		"B": {"extend@chaos:b", "effect@chaos:b"},
		"C": {"extend@chaos:c", "retake@chaos:c"},
	} {
		var got []string
		for _, ev := range w.Events(tok) {
			got = append(got, ev.Kind+"@"+ev.Key)
			if ev.Kind == EvExtend && ev.At != 2000 {
				t.Errorf("%s's extend at %d, want the call's time (2000)", tok, ev.At)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s's events %v, want %v", tok, got, want)
		}
	}
}

// TestCheckExtendAfterValidity: an Extend that returned nil counts as
// late unless a quorum of masters ran it between its start and the
// validity's end it started with.
func TestCheckExtendAfterValidity(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	us := func(ms int) int64 { return at(ms).UnixMicro() }
	w := newTestWitness()
	sha := w.learn(srcExtend)
	for m := range 5 {
		feed(w, m, 0, false, "script", "load", srcExtend)
	}
	ext := ExtendRec{Start: at(0), End: at(30), TTL: time.Second, Before: at(10), OK: true}
	h := &Hold{Client: "c", Key: "k", Token: "A", Quorum: 3, Start: at(-100), Until: at(900), Extends: []ExtendRec{ext}}
	for m, ms := range []int{2, 5, 8, 25, 26} { // three in time
		feedRun(w, m, us(ms), "evalsha", sha, "1", "chaos:k", "A", "1000")
	}
	if f := Check([]*Hold{h}, w, 0); f.ExtendSuccessAfterValidity != 0 {
		t.Errorf("three of five ran it in time: got %d", f.ExtendSuccessAfterValidity)
	}
	w2 := newTestWitness()
	for m := range 5 {
		feed(w2, m, 0, false, "script", "load", srcExtend)
	}
	for m, ms := range []int{2, 5, 20, 25, 26} { // two in time
		feedRun(w2, m, us(ms), "evalsha", sha, "1", "chaos:k", "A", "1000")
	}
	feedRun(w2, 2, us(-50), "evalsha", sha, "1", "chaos:k", "A", "1000") // an earlier Extend's: not this one's
	if f := Check([]*Hold{h}, w2, 0); f.ExtendSuccessAfterValidity != 1 {
		t.Errorf("two of five ran it in time: got %d, want 1", f.ExtendSuccessAfterValidity)
	}
	// With the watchdog renewing meanwhile, the start is not this call's.
	h.Extends[0].Concurrent = true
	if f := Check([]*Hold{h}, w2, 0); f.ExtendSuccessAfterValidity != 0 {
		t.Errorf("concurrent: got %d", f.ExtendSuccessAfterValidity)
	}
}

func TestCheckHolds(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	hold := func(client string, fence int64, start, until int) *Hold {
		return &Hold{Client: client, Key: "k", Token: client, Fence: fence, Kind: "obtain", Quorum: 3, Start: at(start), Until: at(until), LastValid: at(until)}
	}
	tests := []struct {
		name  string
		holds []*Hold
		want  Findings
	}{
		{"disjoint", []*Hold{hold("a", 1, 0, 100), hold("b", 2, 100, 200)}, Findings{}},
		{"overlap", []*Hold{hold("a", 1, 0, 100), hold("b", 2, 99, 200)}, Findings{Overlaps: 1}},
		{"released before", func() []*Hold {
			a := hold("a", 1, 0, 100)
			a.ReleaseStart = at(40)
			return []*Hold{a, hold("b", 2, 50, 200)}
		}(), Findings{}},
		{"other keys", func() []*Hold {
			b := hold("b", 2, 50, 200)
			b.Key = "k2"
			return []*Hold{hold("a", 1, 0, 100), b}
		}(), Findings{}},
		{"a do's end is seen late", func() []*Hold {
			a := hold("a", 0, 0, 100)
			a.Kind, a.Tolerance = "do", 20*time.Millisecond
			return []*Hold{a, hold("b", 0, 90, 200)}
		}(), Findings{}},
		{"a do overlaps past its tolerance", func() []*Hold {
			a := hold("a", 0, 0, 100)
			a.Kind, a.Tolerance = "do", 20*time.Millisecond
			return []*Hold{a, hold("b", 0, 70, 200)}
		}(), Findings{Overlaps: 1}},
		{"an empty hold has no fence to give", []*Hold{hold("a", 5, 0, 100), hold("z", 1, 150, 140), hold("b", 6, 200, 300)}, Findings{}},
		{"fence regression and equal fence", []*Hold{hold("a", 5, 0, 100), hold("b", 5, 100, 200), hold("c", 4, 200, 300), hold("d", 6, 300, 400)}, Findings{FenceRegressions: 2}},
		{"stale validity after a failed shorter Extend", func() []*Hold {
			a := hold("a", 1, 0, 1000)
			a.Extends = []ExtendRec{{Start: at(100), End: at(150), TTL: 50 * time.Millisecond, Before: at(1000), After: at(1000)}}
			return []*Hold{a}
		}(), Findings{StaleAfterFailedExtend: 1}},
		{"a failed Extend that shortened the validity", func() []*Hold {
			a := hold("a", 1, 0, 1000)
			a.Extends = []ExtendRec{{Start: at(100), End: at(150), TTL: 50 * time.Millisecond, Before: at(1000), After: at(148)}}
			return []*Hold{a}
		}(), Findings{}},
		{"a set and a key that share a key", func() []*Hold {
			a := hold("a", 1, 0, 100)
			a.Key, a.Keys = "j", []string{"j", "k"}
			return []*Hold{a, hold("b", 2, 50, 200)}
		}(), Findings{Overlaps: 1}},
		{"a hand-over keeps its fence", func() []*Hold {
			a, b := hold("a", 3, 0, 100), hold("b", 3, 60, 200)
			a.HandedAt, b.Token, b.Kind = at(50), "a", "attach"
			return []*Hold{a, b}
		}(), Findings{}},
		{"taken before the minimum hold of an early release", func() []*Hold {
			a := hold("a", 1, 0, 1000)
			a.ReleaseStart, a.Released, a.HoldAtLeast, a.KeptUntil = at(100), true, 500*time.Millisecond, at(500)
			return []*Hold{a, hold("b", 2, 300, 400), hold("c", 3, 600, 700)}
		}(), Findings{HoldAtLeastBroken: 1}},
		{"Extend after a lapse", func() []*Hold {
			a := hold("a", 1, 0, 1000)
			a.Extends = []ExtendRec{{Start: at(100), End: at(150), TTL: time.Second, OK: true, After: at(1100)}}
			return []*Hold{a}
		}(), Findings{ExtendAfterLapse: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Check(tt.holds, nil, 10*time.Millisecond)
			f.Holds, f.Extends, f.Examples = 0, 0, nil
			if !reflect.DeepEqual(f, tt.want) {
				t.Errorf("got %+v, want %+v", f, tt.want)
			}
		})
	}
}

// TestCheckStaleNeedsAReach: a failed Extend that no master ran (its
// context had ended: the lock asked none) may keep its validity; one that
// reached a master may not.
func TestCheckStaleNeedsAReach(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := newTestWitness()
	sha := w.learn(srcExtend)
	feed(w, 0, 0, false, "script", "load", srcExtend)
	h := &Hold{Client: "c", Key: "k", Token: "A", Quorum: 1, Start: at(0), Until: at(1000), ReleaseStart: at(500),
		Extends: []ExtendRec{{Start: at(100), End: at(101), TTL: 50 * time.Millisecond, Before: at(1000), After: at(1000)}}}
	if f := Check([]*Hold{h}, w, 0); f.StaleAfterFailedExtend != 0 {
		t.Errorf("no master ran it: got %d", f.StaleAfterFailedExtend)
	}
	feedRun(w, 0, at(600).UnixMicro(), "evalsha", sha, "1", "chaos:k", "A", "50") // after the release started: not this one's
	if f := Check([]*Hold{h}, w, 0); f.StaleAfterFailedExtend != 0 {
		t.Errorf("a later run counted: got %d", f.StaleAfterFailedExtend)
	}
	feedRun(w, 0, at(150).UnixMicro(), "evalsha", sha, "1", "chaos:k", "A", "50") // it arrived, late
	if f := Check([]*Hold{h}, w, 0); f.StaleAfterFailedExtend != 1 {
		t.Errorf("a master ran it: got %d, want 1", f.StaleAfterFailedExtend)
	}
}

// TestHoldObserve: the believed end follows the last reading, a reading of
// 0 ends it, and a positive reading after it is a revival.
func TestHoldObserve(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := &Hold{Start: at(0)}
	h.Observe(at(0), 500*time.Millisecond)
	h.Observe(at(100), 100*time.Millisecond) // a failed Extend shortened it
	if !h.Until.Equal(at(200)) {
		t.Errorf("Until %v, want +200ms", h.Until.Sub(t0))
	}
	h.Observe(at(250), 0)
	if !h.Until.Equal(at(200)) || len(h.Revived) != 0 {
		t.Errorf("after 0: Until %v, revived %d", h.Until.Sub(t0), len(h.Revived))
	}
	h.Observe(at(300), time.Second)
	if len(h.Revived) != 1 {
		t.Fatalf("revived %d, want 1", len(h.Revived))
	}
	if f := Check([]*Hold{h}, nil, 0); f.Revivals != 1 {
		t.Errorf("Revivals %d, want 1", f.Revivals)
	}
	// Under a watchdog, a 0 read right at the end may be a renewal that
	// decided in time and stored late: a positive reading after it clears
	// the lapse.
	w := &Hold{Start: at(0), Watchdog: true}
	w.Observe(at(0), 100*time.Millisecond)
	w.Observe(at(105), 0)
	w.Observe(at(110), 100*time.Millisecond)
	w.StoppedAt = at(400)
	if f := Check([]*Hold{w}, nil, 10*time.Millisecond); f.Revivals != 0 || f.WatchdogLate != 0 {
		t.Errorf("in time: %+v", f)
	}
	// The watchdog never ended the work although the validity ran out.
	late := &Hold{Start: at(0), Watchdog: true}
	late.Observe(at(0), 100*time.Millisecond)
	late.Observe(at(150), 0)
	late.StoppedAt = at(400)
	if f := Check([]*Hold{late}, nil, 10*time.Millisecond); f.WatchdogLate != 1 {
		t.Errorf("WatchdogLate %d, want 1", f.WatchdogLate)
	}
	late.Cancelled(at(105))
	if f := Check([]*Hold{late}, nil, 10*time.Millisecond); f.WatchdogLate != 0 {
		t.Errorf("cancelled in time: WatchdogLate %d", f.WatchdogLate)
	}
	// Renewals the holder did not see (its last reading long before) do
	// not make a cancel at the real end look late.
	unseen := &Hold{Start: at(0), Watchdog: true}
	unseen.Observe(at(0), 100*time.Millisecond)
	unseen.Observe(at(402), 0) // renewed meanwhile; lapsed at 400
	unseen.Cancelled(at(401))
	if f := Check([]*Hold{unseen}, nil, 10*time.Millisecond); f.WatchdogLate != 0 {
		t.Errorf("unseen renewals: WatchdogLate %d", f.WatchdogLate)
	}
}

// TestWitnessOnLibrary checks the witness against the library's own
// scripts on real masters: a fenced acquire that lands on three masters,
// an Extend that re-takes the key on the other two, a Release on all five.
func TestWitnessOnLibrary(t *testing.T) {
	for _, sub := range []*subject{library, {mutant: "none"}} {
		name := sub.mutant
		if name == "" {
			name = "library"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, sub, 5, nil)
			w := e.witness()
			ms := e.masters("c")
			warm(t, ms, 2)
			c := e.locker(ms, LockConfig{Fencing: true})
			var stalls []*Toxic
			for _, i := range []int{3, 4} {
				x, err := e.group("c")[i].Stall(Up)
				if err != nil {
					t.Fatal(err)
				}
				stalls = append(stalls, x)
			}
			ctx := context.Background()
			l, err := c.Obtain(ctx, "k", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * nodeTimeout) // the acquires to 3 and 4 time out: they are lost with the stall
			for _, x := range stalls {
				x.Remove()
			}
			settle(t, ms)
			if err := l.Extend(ctx, time.Second); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * nodeTimeout) // the re-takes may finish after Extend returned at quorum
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := e.syncWitness(sctx, w); err != nil {
				t.Fatal(err)
			}
			got := map[string][]int{}
			for _, ev := range w.Events(l.Token()) {
				got[ev.Kind] = append(got[ev.Kind], ev.Master)
			}
			for kind, want := range map[string][]int{EvAcquire: {0, 1, 2}, EvExtend: {0, 1, 2, 3, 4}, EvRetake: {3, 4}, EvRelease: {0, 1, 2, 3, 4}, EvDelete: {0, 1, 2, 3, 4}} {
				ms := got[kind]
				slices.Sort(ms)
				if !slices.Equal(ms, want) {
					t.Errorf("%s on masters %v, want %v (all: %v)", kind, ms, want, got)
				}
			}
			if RecreatedAfterRelease(w, l.Token(), 3) {
				t.Error("a re-take before the release counted as one after it")
			}
		})
	}
}

// TestWitnessTracksKeys: a tracked key's value and expiry follow the
// master's commands (SET NX PX refused when the key is there, APPEND,
// PEXPIRE GT, DEL) and its clock (it expires).
func TestWitnessTracksKeys(t *testing.T) {
	w := newTestWitness()
	w.Track("chaos:k")
	ms := func(n int64) int64 { return n * 1000 }
	feed(w, 0, ms(1000), false, "set", "chaos:k", "A", "nx", "px", "100")
	feed(w, 0, ms(1010), false, "set", "chaos:k", "B", "nx", "px", "100") // refused: A holds it
	feed(w, 0, ms(1020), true, "APPEND", "chaos:k", "!q")
	feed(w, 0, ms(1050), true, "PEXPIRE", "chaos:k", "200", "GT")         // to 1250
	feed(w, 0, ms(1060), true, "PEXPIRE", "chaos:k", "10", "GT")          // not shorter
	feed(w, 0, ms(1300), false, "set", "chaos:k", "C", "nx", "px", "100") // A's expired at 1250: C gets it
	feed(w, 0, ms(1350), true, "DEL", "chaos:k")
	cs := w.Changes(0, "chaos:k")
	for _, c := range []struct {
		at    int64
		value string
		ok    bool
	}{{999, "", false}, {1005, "A", true}, {1030, "A!q", true}, {1249, "A!q", true}, {1251, "", false}, {1310, "C", true}, {1351, "", false}} {
		if v, ok := ValueAt(cs, ms(c.at)); v != c.value || ok != c.ok {
			t.Errorf("at %dms: %q %v, want %q %v", c.at, v, ok, c.value, c.ok)
		}
	}
	if w.Changes(1, "chaos:k") != nil && len(w.Changes(1, "chaos:k")) != 0 {
		t.Error("master 1 ran nothing on the key")
	}
	if w.Changes(0, "chaos:other") != nil {
		t.Error("an untracked key has changes")
	}
}

// TestFreeStretches: a key is free while absent on a quorum; the span's
// Quorum is when a quorum of the keys there before it would have expired.
func TestFreeStretches(t *testing.T) {
	// Three masters, quorum 2: A holds 0 and 1 (expiring at 500), a stray on
	// 2 (expiring at 10000). A releases 0 at 100 and 1 at 120: free from 120,
	// where the keys of 0 and 1 would have lasted until 500.
	a := func(from, exp int64) []KeyChange { return []KeyChange{{At: from, Present: true, Value: "A", Exp: exp}} }
	per := [][]KeyChange{
		append(a(10, 500), KeyChange{At: 100}),
		append(a(10, 500), KeyChange{At: 120}),
		{{At: 5, Present: true, Value: "stray", Exp: 10000}},
	}
	fs := FreeStretches(per, 2)
	if len(fs) != 2 || fs[0].From != 0 || fs[0].To != 10 || fs[1].From != 120 || fs[1].To != math.MaxInt64 || fs[1].Quorum != 500 {
		t.Errorf("got %+v", fs)
	}
}

// TestCheckLateEffects: an extend's PEXPIRE (or re-take) that a master ran
// after the end of the validity its request was sent for counts; one in
// time does not, nor one a later call (a renewal) explains, nor a request
// that ran late and did nothing.
func TestCheckLateEffects(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	us := func(ms int) int64 { return at(ms).UnixMicro() }
	w := newTestWitness()
	sha := w.learn(srcExtend)
	h := &Hold{Client: "c", Key: "k", Token: "A", Quorum: 1, Start: at(0)}
	h.Observe(at(0), 100*time.Millisecond) // valid until 100
	h.Called(at(50), at(100))              // an Extend at 50, for the validity until 100
	ext := func(ms int, effect bool) {
		feed(w, 0, us(ms), false, "evalsha", sha, "1", "chaos:k", "A", "500")
		feed(w, 0, us(ms), true, "GET", "chaos:k")
		if effect {
			feed(w, 0, us(ms), true, "PEXPIRE", "chaos:k", "500")
		}
	}
	ext(60, true)   // in time
	ext(150, false) // late, found the key gone: nothing
	if f := Check([]*Hold{h}, w, 0); f.RenewalAfterValidity != 0 || f.ExtendRanAfterValidity != 1 {
		t.Errorf("got %d effects, %d late runs; want 0 and 1", f.RenewalAfterValidity, f.ExtendRanAfterValidity)
	}
	ext(160, true) // late, and it took effect
	if f := Check([]*Hold{h}, w, 0); f.RenewalAfterValidity != 1 {
		t.Errorf("got %d late effects, want 1", f.RenewalAfterValidity)
	}
	h.Called(at(155), at(400)) // a renewal from 155 on explains it
	if f := Check([]*Hold{h}, w, 0); f.RenewalAfterValidity != 0 {
		t.Errorf("got %d late effects, want 0", f.RenewalAfterValidity)
	}
}

// attachRunsThenFails is a Locker whose Attach behaves as one that finds
// the key still held by its token on a minority of the masters, after the
// giver's validity ended: those masters run the confirmation (a PEXPIRE),
// the Attach fails.
type attachRunsThenFails struct {
	Locker
	w       *Witness
	masters []int
}

func (l attachRunsThenFails) Attach(ctx context.Context, key, token string, ttl time.Duration, fence int64) (Held, error) {
	sha := l.w.learn(srcExtend)
	now := time.Now().UnixMicro()
	for _, m := range l.masters {
		feed(l.w, m, now, false, "evalsha", sha, "1", "chaos:"+key, token, strconv.FormatInt(ttl.Milliseconds(), 10))
		feed(l.w, m, now, true, "GET", "chaos:"+key)
		feed(l.w, m, now, true, "PEXPIRE", "chaos:"+key, strconv.FormatInt(ttl.Milliseconds(), 10))
	}
	return nil, fmt.Errorf("attach: %d of 5 agreed: %w", len(l.masters), context.DeadlineExceeded)
}

// TestFailedAttachRecordsTheValidityItsConfirmationsServe: a hand-over's
// Attach that fails has still run its confirmations on the masters it
// reached, for the validity counted from its own start, maybe after the
// giver's validity ended (the key outlives it there by the drift and the
// giver's request latency). The ledger records them on the giver's hold,
// so that such a PEXPIRE is not taken for a renewal past its validity;
// one past the Attach's own TTL still counts.
func TestFailedAttachRecordsTheValidityItsConfirmationsServe(t *testing.T) {
	w := newTestWitness()
	now := time.Now()
	giver := &Hold{Client: "c0", Key: "k", Token: "A", Kind: "obtain", Quorum: 3, Start: now.Add(-300 * time.Millisecond)}
	giver.Observe(giver.Start, 250*time.Millisecond) // valid until now-50ms
	giver.HandedAt = now.Add(-100 * time.Millisecond)
	a := &advRun{ops: map[string]int{}, errs: map[string]string{}, maxLate: map[string]time.Duration{}, lateBy: map[string]lateness{},
		wind: context.Background(), w: w}
	x := &advActor{a: a, c: &advClient{name: "c1", nt: 100 * time.Millisecond, quorum: 3}, rng: rand.New(rand.NewPCG(1, 2))}
	ttl := time.Second
	x.attach(attachRunsThenFails{w: w, masters: []int{1, 4}}, &handoff{from: "c0", keys: []string{"k"}, token: "A", ttl: ttl,
		at: giver.HandedAt, hold: giver})
	if a.ops["attach.failed"] != 1 {
		t.Fatalf("the Attach did not fail as planned: %v", a.ops)
	}
	if f := Check([]*Hold{giver}, w, 0); f.RenewalAfterValidity != 0 {
		t.Errorf("the failed Attach's confirmations, run within its own validity, counted as %d renewals past their validity: %v",
			f.RenewalAfterValidity, f.Examples)
	}
	// A confirmation run past the Attach's own TTL still counts.
	sha := w.learn(srcExtend)
	late := now.Add(ttl + 100*time.Millisecond).UnixMicro()
	feed(w, 1, late, false, "evalsha", sha, "1", "chaos:k", "A", "1000")
	feed(w, 1, late, true, "GET", "chaos:k")
	feed(w, 1, late, true, "PEXPIRE", "chaos:k", "1000")
	if f := Check([]*Hold{giver}, w, 0); f.RenewalAfterValidity != 1 {
		t.Errorf("a PEXPIRE past the Attach's TTL: %d renewals past their validity, want 1", f.RenewalAfterValidity)
	}
}

// TestAttachConfirmationsAreJudgedByTheLibrarysBound: a hand-over's
// Attach bounds its confirmations by its own validity, TTL less the drift
// allowance from its start, and never re-takes a vanished key. So, after
// the giver's validity ended, a PEXPIRE of the token past that bound (the
// Attach's guard broken, or the giver's own late Extend) counts as a
// renewal past its validity, though it ran within the TTL from the
// Attach's start; and so does a re-take of the key, which no request of
// the lock still valid may make: the Attach's record explains neither.
func TestAttachConfirmationsAreJudgedByTheLibrarysBound(t *testing.T) {
	const ttl = time.Second
	valid := attachValidity(ttl)
	if want := ttl - 12*time.Millisecond; valid != want { // 1% and the 2ms floor
		t.Fatalf("attachValidity(%v) = %v, want %v", ttl, valid, want)
	}
	// handedOver runs a failed Attach of a lock whose giver's validity
	// ended 50ms ago, and returns the ledger's witness and giver's hold,
	// and when the Attach started.
	handedOver := func(t *testing.T) (*Witness, *Hold, time.Time) {
		w := newTestWitness()
		now := time.Now()
		giver := &Hold{Client: "c0", Key: "k", Token: "A", Kind: "obtain", Quorum: 3, Start: now.Add(-300 * time.Millisecond)}
		giver.Observe(giver.Start, 250*time.Millisecond)
		giver.HandedAt = now.Add(-100 * time.Millisecond)
		a := &advRun{ops: map[string]int{}, errs: map[string]string{}, maxLate: map[string]time.Duration{}, lateBy: map[string]lateness{},
			wind: context.Background(), w: w}
		x := &advActor{a: a, c: &advClient{name: "c1", nt: 100 * time.Millisecond, quorum: 3}, rng: rand.New(rand.NewPCG(1, 2))}
		x.attach(attachRunsThenFails{w: w, masters: []int{1, 4}}, &handoff{from: "c0", keys: []string{"k"}, token: "A", ttl: ttl,
			at: giver.HandedAt, hold: giver})
		if a.ops["attach.failed"] != 1 {
			t.Fatalf("the Attach did not fail as planned: %v", a.ops)
		}
		if f := Check([]*Hold{giver}, w, 0); f.RenewalAfterValidity != 0 {
			t.Fatalf("the Attach's own confirmations counted as %d renewals past their validity: %v", f.RenewalAfterValidity, f.Examples)
		}
		giver.mu.Lock()
		start := giver.Calls[len(giver.Calls)-1].Start
		giver.mu.Unlock()
		return w, giver, start
	}
	run := func(w *Witness, at time.Time, cmd ...string) {
		sha := w.learn(srcExtend)
		feed(w, 2, at.UnixMicro(), false, "evalsha", sha, "1", "chaos:k", "A", "1000")
		feed(w, 2, at.UnixMicro(), true, "GET", "chaos:k")
		feed(w, 2, at.UnixMicro(), true, cmd...)
	}
	t.Run("PEXPIRE past the Attach's validity", func(t *testing.T) {
		w, giver, start := handedOver(t)
		// Past start + TTL - drift by 5ms, within start + TTL.
		run(w, start.Add(valid+5*time.Millisecond), "PEXPIRE", "chaos:k", "1000")
		if f := Check([]*Hold{giver}, w, 0); f.RenewalAfterValidity != 1 {
			t.Errorf("a PEXPIRE %v past the Attach's validity, within its TTL: %d renewals past their validity, want 1",
				5*time.Millisecond, f.RenewalAfterValidity)
		}
	})
	t.Run("re-take while the Attach's validity runs", func(t *testing.T) {
		w, giver, start := handedOver(t)
		run(w, start.Add(100*time.Millisecond), "SET", "chaos:k", "A", "PX", "1000")
		if f := Check([]*Hold{giver}, w, 0); f.RenewalAfterValidity != 1 {
			t.Errorf("a re-take after the giver's validity, within the Attach's: %d renewals past their validity, want 1",
				f.RenewalAfterValidity)
		}
	})
}

// TestCheckWorld: a wait that outlasts its bound while a quorum is free
// counts, unless a fault held its client up or another took the key; a key
// left on a master after a hand-over's release counts once it settled.
func TestCheckWorld(t *testing.T) {
	t0 := time.Now().Add(-time.Minute)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	us := func(ms int) int64 { return at(ms).UnixMicro() }
	w := newTestWitness()
	w.Track("chaos:k")
	// A holds k on master 0 until 1000 (released at 100), single master.
	feed(w, 0, us(0), false, "set", "chaos:k", "A", "nx", "px", "1000")
	feed(w, 0, us(100), false, "del", "chaos:k")
	var disturbedUntil time.Time
	wd := World{
		Nodes:     func(string) ([]int, int, bool) { return []int{0}, 1, true },
		Disturbed: func(string, string, time.Time, time.Time) time.Time { return disturbedUntil },
		Round:     func(string) time.Duration { return 50 * time.Millisecond },
		Settle:    func(string) time.Duration { return 50 * time.Millisecond },
		Horizon:   at(5000),
	}
	// Free from 100 on; the deleted key would have lasted until 1000: the
	// waiter has until 1050.
	late := &WaitRec{Client: "c", Key: "k", Start: at(50), End: at(2000)}
	inTime := &WaitRec{Client: "c", Key: "k", Start: at(50), End: at(1040), OK: true}
	var f Findings
	CheckWorld(&f, nil, []*WaitRec{late, inTime}, w, wd)
	if f.WaitsChecked != 2 || f.WaitLate != 1 {
		t.Errorf("got %d checked, %d late; want 2 and 1", f.WaitsChecked, f.WaitLate)
	}
	disturbedUntil = at(1500)
	f = Findings{}
	CheckWorld(&f, nil, []*WaitRec{late}, w, wd)
	if f.WaitsChecked != 0 || f.WaitLate != 0 {
		t.Errorf("disturbed: got %d checked, %d late", f.WaitsChecked, f.WaitLate)
	}
	disturbedUntil = time.Time{}
	// Another took it at 1030: the span ended in time.
	feed(w, 0, us(1030), false, "set", "chaos:k", "B", "nx", "px", "1000")
	f = Findings{}
	CheckWorld(&f, nil, []*WaitRec{late}, w, wd)
	if f.WaitLate != 0 {
		t.Errorf("taken by another: got %d late", f.WaitLate)
	}

	// A hand-over: B's handle released at 3000; master 0 still holds B's
	// token at 3050 (settled): a stray. Gone by then: none.
	feed(w, 0, us(2000), false, "set", "chaos:k", "H", "px", "5000")
	h := &Hold{Client: "c", Key: "k", Token: "H", Kind: "attach", Quorum: 1, Start: at(2000), ReleaseStart: at(2990), ReleaseEnd: at(3000), Released: true}
	f = Findings{}
	CheckWorld(&f, []*Hold{h}, nil, w, wd)
	if f.HandoversChecked != 1 || f.StrayAfterHandover != 1 {
		t.Errorf("got %d checked, %d strays; want 1 and 1", f.HandoversChecked, f.StrayAfterHandover)
	}
	feed(w, 0, us(3020), false, "del", "chaos:k")
	f = Findings{}
	CheckWorld(&f, []*Hold{h}, nil, w, wd)
	if f.StrayAfterHandover != 0 {
		t.Errorf("deleted in time: got %d strays", f.StrayAfterHandover)
	}
}
