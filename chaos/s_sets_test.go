package chaos

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// overlappingSets are S17's sets, one per worker: each key is in several,
// in both orders, beside a set of one key and sets of three.
var overlappingSets = [][]string{
	{"k0", "k1"}, {"k1", "k0"}, {"k1", "k2"}, {"k2", "k3", "k4"},
	{"k4", "k0"}, {"k3", "k1"}, {"k2"}, {"k0", "k2", "k4"},
}

// S17: locks on several keys (ObtainMulti) whose sets overlap, taken again
// and again while masters are killed or frozen. No key may have two holders
// at once (the ledger counts overlaps per key, and each key has its own
// lost-update counter), and every worker must keep getting its set: with
// two sets each holding a key the other waits for, both would stall until
// their contexts end.
func TestS17OverlappingSets(t *testing.T) {
	admit(t, light)
	overlappingSetsScenario(t, library)
}

func overlappingSetsScenario(t *testing.T, sub *subject) {
	for _, v := range []struct {
		name  string
		n     int
		down  []int
		kill  bool
		fault string
	}{
		{"n5-sigkill", 5, []int{3, 4}, true, "SIGKILL 2/5 for 1s (2xTTL), restart empty"},
		{"n5-sigstop", 5, []int{3, 4}, false, "SIGSTOP 2/5 for 1s, SIGCONT"},
		{"n3-sigstop", 3, []int{2}, false, "SIGSTOP 1/3 for 1s, SIGCONT"},
	} {
		if !sub.runs(v.name) {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			r := newRow(t, sub, "S17 overlapping-sets/"+v.name, "MUST",
				fmt.Sprintf("%s while %d workers each take a set of 1 to 3 of 5 keys (the sets overlap, in both orders) and hold it 1ms; N=%d, node timeout 50ms, TTL 500ms, LinearBackoff(5ms), 2s per ObtainMulti", v.fault, len(overlappingSets), v.n),
				"cs=promised=lost=0 on every key; every worker gets its set >= 5 times, >= 90% of tries (no deadlock)")
			e := newEnv(t, sub, v.n, nil)
			ms := e.direct()
			warm(t, ms, 4)
			l := &load{c: e.lockClient(ms), sets: overlappingSets, ttl: 500 * time.Millisecond, workers: len(overlappingSets),
				dur: 3 * time.Second, retry: 5 * time.Millisecond, obtainTimeout: 2 * time.Second, hold: time.Millisecond}
			done := make(chan *loadStats)
			go func() { done <- l.run(context.Background()) }()
			time.Sleep(500 * time.Millisecond)
			if v.kill {
				e.kill(v.down...)
			} else {
				e.stop(v.down...)
			}
			time.Sleep(time.Second) // twice the TTL: a restarted master held no key still valid
			if v.kill {
				e.restart(false, v.down...)
			} else {
				e.cont(v.down...)
			}
			s := <-done
			s.report(r)
			st := safety(r, l.ledger, nil, nil)
			lost := l.lostInSets()
			r.set("lost_updates", lost)
			mustSafe(r, st, nil)
			r.must(lost == 0, "lost_updates=%d over the keys' counters, want 0", lost)
			least := slices.Min(s.byWorker)
			r.set("least_holds_of_a_worker", least)
			r.set("not_obtained", s.notObtained)
			r.must(least >= 5, "every worker: the least got its set %d times in %v, want >= 5", least, l.dur)
			r.must(mostly(s.acquired, s.tries), "%d of %d tries got their set, want >= 90%% (no deadlock)", s.acquired, s.tries)
			r.must(len(s.otherErrs) == 0, "unexpected errors: %v", s.otherErrs)
			r.must(s.pastCtx <= slack, "an ObtainMulti returned %v after its context's deadline", s.pastCtx)
		})
	}
}
