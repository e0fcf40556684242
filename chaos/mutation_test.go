package chaos

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// mutations runs every MUST row's check against a broken lock that lacks
// the property the row backs, and asserts that the check fails: a check
// that passes a broken lock backs nothing. Each entry names the rows it
// runs (only), the mutant's knobs (mutant_test.go) and a piece of the
// MUST message that has to fail (or several, separated by '|', when the
// broken property shows as one or the other from run to run).
var mutations = []struct {
	name   string
	run    func(*testing.T, *subject)
	only   string
	mutant string
	expect string
}{
	{"S1-hot-key-no-NX", hotKey64, "redlock-5,single", "nonx", "cs_overlaps="},
	{"S1-do-no-NX", func(t *testing.T, s *subject) { hotKeyDo(t, s) }, "", "nonx", "cs_overlaps="},
	{"S2-minority-down-needs-all", minorityDown, "", "quorumall", "availability"},
	{"S3-majority-down-one-is-enough", majorityDown, "", "quorumone", "with 3/5 down, want 0"},
	{"S4-stalled-minority-waits-for-all", stalledMinorities, "", "waitall", "returns at quorum"},
	{"S5-stalled-majority-one-is-enough", stalledMajority, "", "quorumone", "while 3/5 stalled, want 0"},
	{"S5-stalled-majority-undo-past-context", stalledMajority, "sigstop-default-clients", "slowundo", "after its context's deadline"},
	{"S6-reply-lost-waits-for-all", replyLost, "", "waitall", "returns at quorum"},
	{"S6-reply-lost-no-expiry", replyLost, "downstream", "noexpiry", "a TTL after the last release"},
	{"S7-slow-minority-waits-for-all", slowNetwork, "2of5-10ms,2of5-25ms,2of5-100ms", "waitall", "returns at quorum"},
	{"S7-slow-majority-full-validity", slowNetwork, "3of5-10ms,3of5-25ms", "fullvalidity", "want <= ttl-L-drift"},
	{"S7-slow-majority-no-node-timeout", slowNetwork, "3of5-100ms", "ignoretimeout", "want <= node timeout + 25ms"},
	{"S7-hot-key-no-NX", slowNetwork, "hot-key", "nonx", "cs_overlaps="},
	{"S8-mitigations-no-NX", restartNoPersistence, "delayed-restart,aof-always", "nonx", "inside A's validity"},
	{"S8-extend-no-retake", extendAfterRestart, "retakes-vanished", "noretake", "both vanished keys re-taken"},
	{"S8-extend-revives", extendAfterRestart, "never-revived", "revive", "want ErrLockLost"},
	{"S9-aof-equal-fences", restartFencing, "aof-always", "constfence", "fences A="},
	{"S10-control-no-NX", clockOneMaster, "jump", "nonx", "control (no jump)"},
	{"S10-drift-no-allowance", clockOneMaster, "rate-1.009", "nodrift", "promised_overlaps="},
	{"S11-naive-no-NX", clientPause, "naive", "nonx", "promised_overlaps="},
	{"S11-fenced-equal-fences", clientPause, "fenced", "constfence", "stale_rejected=0"},
	{"S11-do-partitioned-late-cancel", clientPause, "do-partitioned", "latecancel", "fn's ctx ended"},
	{"S11-sigstop-worker-late-cancel", clientPause, "sigstop-subprocess", "latecancel", "worker never learned"},
	{"S12-watchdog-late-cancel", watchdogs, "suite-clients,default-clients", "latecancel", "fn's ctx ended"},
	{"S12-slow-network-no-renewal", watchdogs, "slow-network", "norenew", "the lock was lost"},
	{"S12-close-does-not-wait", watchdogs, "close-during-do", "closenowait", "want ErrClosed"},
	{"S13-sigstop-no-node-timeout", singleInstance, "sigstop-default-clients", "ignoretimeout", "probe max"},
	{"S13-sigstop-retries-to-the-deadline", singleInstance, "sigstop", "retryforever", "probe max"},
	{"S13-latency-full-validity", singleInstance, "latency", "fullvalidity", "want <= ttl-L-drift"},
	{"S14-never-released", holderCrash, "", "neverrelease", "lock keys"},
	{"S16-acks-ignored", replicaFailover, "acks-link-stalled", "none", "promised_overlaps="},
	{"S24-cancel-margin-ignored", cancelMarginScenario, "", "none", "margin_seen"},
	{"S17-sets-first-key-only", overlappingSetsScenario, "n5-sigstop", "multifirst", "cs_overlaps="},
	// Keys held while waiting for the next starve the other sets, or,
	// under SIGSTOP, outlive their TTL while held: either check catches it.
	{"S17-sets-hold-and-wait", overlappingSetsScenario, "n5-sigstop", "multiwait", "every worker|cs_overlaps="},
	{"S18-wait-no-NX", waitSubscriptionKilled, "single", "nonx", "cs_overlaps="},
	{"S18-wait-never-woken", waitSubscriptionKilled, "redlock-5", "nowake", "waiters obtained"},
	{"S19-wait-never-woken", waitHolderCrash, "", "nowake", "the first waiter obtained"},
	{"S20-wait-never-woken", waitMasterRestart, "single", "nowake", "waiters obtained"},
	{"S21-failover-heard-at-next-renewal", failoverOldMasterUp, "", "noprobe", "neither renewed on the new master"},
	{"S22-waiters-trust-the-gate", waitStrayMinorityKey, "", "gatewait", "no waiter obtained|the first waiter obtained"},
	{"S23-cut-subscription-heard-at-next-renewal", partitionedSubscription, "", "noprobe", "was not told"},
	{"any-row-goroutine-left", extendAfterRestart, "never-revived", "leak", "lock goroutines left"},
	// The adversary's checks, each on a short run of a fixed seed.
	{"S15-no-NX", adversaryMutant(1, nil), "", "nonx", "overlaps="},
	{"S15-failed-extend-keeps-validity", adversaryMutant(2, func(c *advConfig) {
		// A shorter Extend that fails while the old validity still runs
		// is rarer than the other checks' events: the steps are mostly
		// such Extends (short-extend), and a busy machine still gets 40s
		// to meet one. The run ends at the first finding.
		c.dur = 40 * time.Second
		c.redlockClients, c.singleClients = -1, 2
		c.weights = map[string]int{"delay": 45, "stall": 45, "quiet": 10}
		c.programs = map[string]int{"byhand": 1}
		c.steps = map[string]int{"work": 1, "extend": 1, "short-extend": 3}
	}), "", "keepvalidity", "stale_validity_after_failed_extend="},
	{"S15-extend-revives", adversaryMutant(3, func(c *advConfig) {
		c.programs = map[string]int{"byhand": 1}
		c.steps = map[string]int{"pause": 1, "extend": 1}
		c.actors = 1 // few contenders: a lapsed key stays free for the revival
	}), "", "revive", "extend_after_lapse="},
	{"S15-extend-past-validity", adversaryMutant(4, func(c *advConfig) {
		c.redlockClients, c.singleClients = -1, 2
		c.weights = map[string]int{"delay": 80, "quiet": 20}
		c.programs = map[string]int{"byhand": 1}
		c.steps = map[string]int{"last-moment": 1}
		c.latency = [2]time.Duration{5 * time.Millisecond, 150 * time.Millisecond}
		c.actors, c.keys = 4, 8 // many holders at once, each extending once a TTL
	}), "", "nocap", "extend_success_after_validity="},
	{"S15-equal-fences", adversaryMutant(5, nil), "", "constfence", "fence_regressions="},
	{"S15-straggling-extend", adversaryMutant(6, nil), "", "straggle", "retake_after_release="},
	{"S15-never-released", adversaryMutant(7, nil), "", "neverrelease", "release_without_quorum="},
	{"S15-close-waits-for-retrying-do", adversaryMutant(8, func(c *advConfig) {
		c.weights = map[string]int{"restart": 50, "delay": 20, "freeze": 10, "quiet": 20}
	}), "", "closeblocks", "close_over_bound="},
	{"S15-undo-past-context", adversaryMutant(9, nil), "", "slowundo", "past_ctx="},
	{"S15-late-watchdog", adversaryMutant(10, func(c *advConfig) {
		c.redlockClients, c.singleClients = -1, 2
		c.weights = map[string]int{"freeze": 40, "stall": 40, "quiet": 20}
		c.programs = map[string]int{"keepalive": 1}
		c.steps = map[string]int{"watch": 1}
	}), "", "latecancel", "watchdog_late="},
	{"S15-goroutine-left", adversaryMutant(11, func(c *advConfig) {
		c.dur = 2 * time.Second // the leak shows at Close, at the end
	}), "", "leak", "goroutines left"},
	{"S15-sets-first-key-only", adversaryMutant(12, func(c *advConfig) {
		c.programs = map[string]int{"multi": 3, "byhand": 2}
	}), "", "multifirst", "overlaps="},
	{"S15-waiters-never-woken", adversaryMutant(13, func(c *advConfig) {
		// A wait is judged only away from faults and once the witness has
		// read past its bound: a busy machine once checked too few in
		// 20s. The run still ends at the first finding.
		c.dur = 40 * time.Second
		// Few faults: a wait is judged only away from them.
		c.weights = map[string]int{"quiet": 80, "pubsub_kill": 20}
		c.programs = map[string]int{"wait": 3, "watch": 1, "byhand": 2}
	}), "", "nowake", "wait_late="},
	{"S15-hand-over-leaves-its-key", adversaryMutant(14, func(c *advConfig) {
		c.weights = map[string]int{"quiet": 80, "delay": 20}
		c.programs = map[string]int{"handover": 3, "byhand": 1}
	}), "", "handoverstray", "stray_after_handover="},
	{"S15-renewal-runs-past-its-validity", adversaryMutant(15, func(c *advConfig) {
		// The S15-extend-past-validity mix: Extends at the last moment
		// through delays, whose requests reach the master after the
		// validity ended while the key is still there.
		c.redlockClients, c.singleClients = -1, 2
		c.weights = map[string]int{"delay": 80, "quiet": 20}
		c.programs = map[string]int{"byhand": 1}
		c.steps = map[string]int{"last-moment": 1}
		c.latency = [2]time.Duration{5 * time.Millisecond, 150 * time.Millisecond}
		c.actors, c.keys = 4, 8
	}), "", "noguard", "renewal_after_validity="},
	{"S15-hold-at-least-ignored", adversaryMutant(16, func(c *advConfig) {
		c.weights = map[string]int{"quiet": 80, "delay": 20}
		c.programs = map[string]int{"byhand": 2, "wait": 2}
		c.holdAtLeast = 1
	}), "", "nokeep", "hold_at_least_broken="},
}

// adversaryMutant runs the adversary with seed until the check fails (at
// most 20s), with more single-instance clients (one master: a delay or a
// stall fails their calls), no Sentinel pair (the mutant ignores
// WithReplicaAcks), more of the windows that make calls fail, the
// programs of Obtain, Extend, KeepAlive and Do, and adjust's changes to
// the mix, so that the check meets what it checks.
func adversaryMutant(seed uint64, adjust func(*advConfig)) func(*testing.T, *subject) {
	return func(t *testing.T, s *subject) {
		cfg := advConfig{seed: seed, dur: 20 * time.Second, redlockClients: 1, singleClients: 4, failoverClients: -1,
			weights:  map[string]int{"delay": 35, "stall": 20, "freeze": 15, "restart": 15, "pause": 5, "drop": 5, "quiet": 5},
			programs: map[string]int{"byhand": 5, "keepalive": 2, "do": 3}}
		if adjust != nil {
			adjust(&cfg)
		}
		adversary(t, s, cfg, "mutant")
	}
}

// mutationsAtOnce is how many entries run at a time (most of a
// scenario's time is waiting), beside a scenario of the library
// (schedule_test.go).
const mutationsAtOnce = 2

// needOf is what an entry needs of the machine (schedule_test.go): S1's
// and S7's, and those that expect goroutines left, the machine to
// themselves; S2's, S3's, S17's and S5's whose mutant one master is enough
// for (granted again and again while a majority is down) keep a core busy
// (measured: half a core or more); those of the scenarios that wait on a
// fault or a TTL for most of their run are idle (under a tenth of a core).
func needOf(name, expect string) need {
	scenario, _, _ := strings.Cut(name, "-")
	switch {
	case scenario == "S1", scenario == "S7", strings.Contains(expect, "goroutines left"):
		return alone
	case scenario == "S2", scenario == "S3", scenario == "S17", name == "S5-stalled-majority-one-is-enough":
		return heavy
	case slices.Contains([]string{"S8", "S10", "S11", "S12", "S13", "S14", "S16", "S18", "S19", "S20", "S21", "S23"}, scenario):
		return idle
	}
	return light
}

// TestMutations runs the table, mutationsAtOnce entries at a time, each
// when the scheduler lets it (schedule_test.go).
func TestMutations(t *testing.T) {
	t.Parallel()
	// The adversary's checks first: each runs until its check fails, up
	// to 40s, and it does not run alone, so beside the scenarios of the
	// library a long one holds nothing up.
	var queue []int
	for i, m := range mutations {
		if strings.HasPrefix(m.name, "S15-") && needOf(m.name, m.expect) != alone {
			queue = append(queue, i)
		}
	}
	for i := range mutations {
		if !slices.Contains(queue, i) {
			queue = append(queue, i)
		}
	}
	needs := func(i int) need { return needOf(mutations[i].name, mutations[i].expect) }
	var wg sync.WaitGroup
	for range mutationsAtOnce {
		wg.Go(func() {
			for {
				i, leave, ok := sched.take(&queue, needs)
				if !ok {
					return
				}
				m := mutations[i]
				t.Run(m.name, func(t *testing.T) { m.run(t, &subject{mutant: m.mutant, expect: m.expect, only: m.only}) })
				leave()
			}
		})
	}
	wg.Wait()
}
