package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// A report is everything one run of the harness measured.
type report struct {
	Meta    meta         `json:"meta"`
	Ceiling *ceiling     `json:"redis_benchmark,omitempty"`
	Cells   []cellReport `json:"cells"`
	Goals   []goalResult `json:"targets,omitempty"`
	Held    *heldReport  `json:"held_locks,omitempty"` // the many-held-locks workload (-held, and -smoke's tiny one)
	order   []string     // contenders in display order
}

// meta says where and how the numbers were taken.
type meta struct {
	Date       string `json:"date"`
	Host       string `json:"host"`
	CPU        string `json:"cpu"`
	CPUs       int    `json:"cpus"`
	Memory     string `json:"memory"`
	Kernel     string `json:"kernel"`
	LoadBefore string `json:"loadavg_before"` // /proc/loadavg: was the machine quiet?
	LoadAfter  string `json:"loadavg_after"`
	GoVersion  string `json:"go"`
	// Own is true when the harness started its servers (on loopback),
	// false for the user's masters (-masters).
	Own      bool       `json:"own_servers"`
	Masters  masterInfo `json:"masters"`
	Prefix   string     `json:"key_prefix"`
	Duration string     `json:"duration_per_run"`
	Warmup   string     `json:"warmup_per_run"`
	Repeats  int        `json:"repeats"`
	TTL      string     `json:"ttl"`
	PoolSize int        `json:"go_redis_pool_size"` // 0: go-redis default
	Hold     string     `json:"hold_contended"`
	Smoke    bool       `json:"smoke"`
	Args     string     `json:"args"`
	Cleaned  int        `json:"keys_left_by_contenders_and_deleted"`
}

func writeJSON(w io.Writer, r *report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// fmtRate prints a rate with three significant digits: 950, 12.3k, 1.23M.
func fmtRate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1e6:
		return trim3(v/1e6) + "M"
	case v >= 1e3:
		return trim3(v/1e3) + "k"
	default:
		return trim3(v)
	}
}

func trim3(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// fmtDur prints nanoseconds as µs or ms with three significant digits.
func fmtDur(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return trim3(d.Seconds()) + "s"
	case d >= time.Millisecond:
		return trim3(float64(d)/1e6) + "ms"
	default:
		return trim3(float64(d)/1e3) + "µs"
	}
}

// fmtUs prints microseconds, or "n/a" for a negative (unknown) value.
func fmtUs(us float64) string {
	if us < 0 {
		return "n/a"
	}
	return fmtDur(int64(us * 1e3))
}

// fmtCount prints a per-cycle count with two decimals, or – when unknown.
func fmtCount(v float64) string {
	if v <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtRatio(r float64) string {
	if r == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r)
}

// writeMarkdown writes the report: what ran where, a reading of the
// results, the chart, the tables.
func writeMarkdown(w io.Writer, r *report) error {
	if len(r.Cells) == 0 && r.Held != nil {
		return writeHeldMarkdown(w, r)
	}
	var b strings.Builder
	m := r.Meta
	fmt.Fprintf(&b, "# redlock benchmark\n\n")
	fmt.Fprintf(&b, "%s on %s (%s, %d CPUs, %s memory, Linux %s), %s. Load average %s before the run, %s after. Each contender ran %s per cell after a %s warmup, %d repeat(s), contenders back to back in alternating order; TTL %s; go-redis PoolSize %s; %s.",
		m.Date, m.Host, m.CPU, m.CPUs, m.Memory, m.Kernel, m.GoVersion, m.LoadBefore, m.LoadAfter, m.Duration, m.Warmup, m.Repeats, m.TTL, poolSizeText(m.PoolSize), holdText(m.Hold))
	if m.Smoke {
		b.WriteString(" **Smoke run: the figures are not measurements.**")
	}
	b.WriteString("\n\n")
	writeTargetsRanAgainst(&b, r)
	b.WriteString("## Reading\n\n")
	writeReading(&b, r)
	if buildHeadline(r).ok {
		b.WriteString("\n![locks/s and Redis CPU per lock of redlock and the other locks in the headline cells](headline.svg)\n")
	}
	b.WriteString("\n![cycles/s and cycles per Redis core, per contender per cell](chart.svg)\n\n")

	b.WriteString("## Throughput\n\n")
	fmt.Fprintf(&b, "Cycles/s (lock + release) in uncontended cells, decisions/s (cycles + attempts refused because another owner held the key) in contended cells, median over repeats. In brackets, for every other contender: %s's figure divided by its, the median of the ratios measured side by side in each repeat (above 1: %s ahead).\n\n", subject, subject)
	writeMatrix(&b, r, true, func(cr *cellReport, s *contenderSummary) string {
		v := fmtRate(s.Throughput)
		if sub := cr.contender(subject); sub != nil && s.Name != subject && sub.Ratio[s.Name] > 0 {
			v += " (" + fmtRatio(sub.Ratio[s.Name]) + ")"
		}
		return v
	})

	b.WriteString("\n## Redis CPU\n\n")
	b.WriteString("Redis CPU per cycle (`INFO cpu` used_cpu_sys + used_cpu_user deltas of every server behind the cell, summed, divided by the cycles; in contended cells the refused attempts' cost is in it) and, in brackets, lock cycles per second per Redis core (1 / Redis CPU per cycle). Redis is single-threaded, so a master saturates near one core: this is the figure that limits a deployment.\n\n")
	writeMatrix(&b, r, false, func(_ *cellReport, s *contenderSummary) string {
		if s.ServerCPU < 0 {
			return "n/a"
		}
		return fmt.Sprintf("%s (%s/core)", fmtUs(s.ServerCPU), fmtRate(s.PerRedisCore))
	})

	writeSets(&b, r)

	if len(r.Goals) > 0 {
		b.WriteString("\n## Targets\n\n| target | cell | contender | measured | target | met |\n| --- | --- | --- | ---: | ---: | :---: |\n")
		for _, g := range r.Goals {
			met := "no"
			if g.Met {
				met = "yes"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", g.Goal, g.Cell, g.Contender, g.Measured, g.Target, met)
		}
	}

	if c := r.Ceiling; c != nil {
		b.WriteString("\n## redis-benchmark ceiling (one master)\n\n")
		if c.Skipped != "" {
			fmt.Fprintf(&b, "Skipped: %s.\n", c.Skipped)
		} else {
			where := "taken before the N=1 cells"
			if len(c.Runs) > 0 && c.Runs[0].Repeat >= 0 {
				where = "each taken beside the contenders of n1-g64-uncontended in one repeat"
			}
			fmt.Fprintf(&b, "`redis-benchmark -c %d -P %d -n %d -r %d`: SET NX PX %s/s, EVALSHA release %s/s, so %s cycles/s (one of each per cycle); median of %d measurement(s) %s.\n",
				c.Clients, c.Pipeline, c.Requests, c.Requests, fmtRate(c.SetRPS), fmtRate(c.EvalshaRPS), fmtRate(c.CyclesPerSec), len(c.Runs), where)
		}
	}

	writeShardSpread(&b, r)

	writeHandOver(&b, r)

	b.WriteString("\n## Detail\n\n")
	b.WriteString("Rates are medians over repeats; lock latency is the time of one lock call, granted or not, over all repeats; per-cycle figures divide totals by the successful cycles, per-attempt ones by every lock call, and include the harness's own work (one key string per uncontended cycle); client CPU is this process (getrusage: library, go-redis, runtime, harness loop, and in latency cells the delay proxies too), Redis CPU the servers' `INFO cpu`. Redis cmds/cycle counts the commands the servers executed per cycle (INFO commandstats, all servers; a script's own calls count too), reads/cycle their reads from client sockets per cycle (INFO stats total_reads_processed): a cycle sends two commands to each master, so the fewer reads, the deeper the batches the servers received. Proxy writes/cycle (latency cells) counts the chunks the delay proxies forwarded, both ways, per cycle: how well a contender batches its requests into few writes. Errors are failed calls other than \"held by another owner\" (first message listed below the table); overlaps are locks granted while the in-process counter said another goroutine held them (must be 0).\n\n")
	b.WriteString("| cell | contender | cycles/s | taken/s | p50 | p99 | p99.9 | allocs/cycle | allocs/attempt | B/cycle | client CPU/cycle | Redis CPU/cycle | Redis cmds/cycle | Redis reads/cycle | proxy writes/cycle | errors | overlaps |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, cr := range r.Cells {
		for _, s := range cr.Contenders {
			writes := fmtCount(s.WritesPerCycle)
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %.0f | %s | %s | %s | %s | %s | %d | %d |\n",
				cr.Name, s.Name, fmtRate(s.CyclesPerSec), fmtRate(s.TakenPerSec),
				fmtDur(s.P50), fmtDur(s.P99), fmtDur(s.P999), s.AllocsPerCycle, s.AllocsPerAttempt, s.BytesPerCycle,
				fmtUs(s.ClientCPU), fmtUs(s.ServerCPU), fmtCount(s.CommandsPerCycle), fmtCount(s.ReadsPerCycle), writes, s.Errors, s.Overlaps)
		}
	}
	var errs []string
	for _, cr := range r.Cells {
		for _, s := range cr.Contenders {
			if s.FirstErr != "" {
				errs = append(errs, fmt.Sprintf("- %s %s (%d): %s", cr.Name, s.Name, s.Errors, s.FirstErr))
			}
		}
	}
	if len(errs) > 0 {
		b.WriteString("\n## Errors (first of each)\n\n" + strings.Join(errs, "\n") + "\n")
	}
	writeHeld(&b, r.Held)
	b.WriteString("\n## The contenders\n\n| name | kind | what |\n| --- | --- | --- |\n")
	for _, name := range r.order {
		if s, ok := specOf(name); ok {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", s.Name, s.Kind, s.What)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMatrix writes a table with a row per cell (and its round trip when
// rtt) and a column per contender, each entry from entry.
func writeMatrix(b *strings.Builder, r *report, rtt bool, entry func(*cellReport, *contenderSummary) string) {
	head, align := "| cell |", "| --- |"
	if rtt {
		head, align = head+" RTT |", align+" ---: |"
	}
	for _, name := range r.order {
		head, align = head+" "+name+" |", align+" ---: |"
	}
	b.WriteString(head + "\n" + align + "\n")
	for _, cr := range r.Cells {
		fmt.Fprintf(b, "| %s |", cr.Name)
		if rtt {
			fmt.Fprintf(b, " %s |", fmtUs(cr.RTTus))
		}
		for _, name := range r.order {
			if s := cr.contender(name); s != nil {
				b.WriteString(" " + entry(&cr, s))
			}
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
}

// writeTargetsRanAgainst says which servers the run used.
func writeTargetsRanAgainst(b *strings.Builder, r *report) {
	m := r.Meta
	if m.Own {
		v := ""
		if len(m.Masters.Masters) > 0 {
			v = m.Masters.Masters[0].Version
		}
		fmt.Fprintf(b, "Servers: redis-server %s processes the harness started on loopback, no persistence (PING round trip %s). Latency cells put a delay proxy between the client and every master; their measured round trip is in the RTT column.\n\n", v, fmtUs(firstRTT(m)))
		return
	}
	fmt.Fprintf(b, "Servers: the user's masters, keys under `%s` only (never FLUSHALL); %d key(s) left by the contenders were deleted at the end.\n\n| master | redis_version | PING RTT (median) |\n| --- | --- | ---: |\n", m.Prefix, m.Cleaned)
	for _, mm := range m.Masters.Masters {
		v := mm.Version
		if v == "" {
			v = "?"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", mm.Addr, v, fmtUs(mm.RTTus))
	}
	if !m.Masters.INFO {
		b.WriteString("\nINFO was not allowed on every master: no Redis CPU figures.\n")
	}
	b.WriteString("\n")
}

func firstRTT(m meta) float64 {
	if len(m.Masters.Masters) == 0 {
		return -1
	}
	return m.Masters.Masters[0].RTTus
}

// writeShardSpread shows, for cluster cells, how the lock traffic and the
// Redis CPU spread over the shards.
func writeShardSpread(b *strings.Builder, r *report) {
	first := true
	for _, cr := range r.Cells {
		if !cr.Cluster {
			continue
		}
		if first {
			fmt.Fprintf(b, "\n## Quorum over independent Redis Clusters\n\n`redlock.New` and the other multi-master contenders over %d independent Redis Clusters of %d shards each (one *redis.ClusterClient per cluster, the lock key's slot chooses the shard in each). Each shard's share of the commands (INFO commandstats) and of the Redis CPU, shards listed cluster by cluster; an even spread is %.0f%% each.\n\n| cell | contender | commands per shard | Redis CPU per shard |\n| --- | --- | --- | --- |\n",
				cr.N, cr.Shards, 100/float64(cr.N*cr.Shards))
			first = false
		}
		for _, s := range cr.Contenders {
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", cr.Name, s.Name, fmtShares(s.ShardCalls, cr.Shards), fmtShares(s.ShardCPU, cr.Shards))
		}
	}
}

// writeSets shows, for the contenders that lock sets of keys
// (ObtainMulti), what each key of a set costs against the subject's lock on
// one key, measured side by side in the same cells.
func writeSets(b *strings.Builder, r *report) {
	first := true
	for _, cr := range r.Cells {
		sub := cr.contender(subject)
		if sub == nil {
			continue
		}
		for _, s := range cr.Contenders {
			spec, _ := specOf(s.Name)
			ratio := sub.Ratio[s.Name] // the subject's throughput over the set's
			if spec.Keys == 0 || ratio == 0 {
				continue
			}
			if first {
				fmt.Fprintf(b, "\n## Locks on several keys\n\nEach `redlock-setK` locks a set of K keys with `ObtainMulti` (one script per master takes them all) and releases it, beside %s's lock on one key in the same cell. Ratios against %s are the medians of the per-repeat ratios: sets per second over %s's locks per second, keys locked per second (K per set) over its, and Redis CPU per key locked over its Redis CPU per lock.\n\n", subject, subject, subject)
				b.WriteString("| cell | contender | keys | cycles/s | cycles/s vs " + subject + " | keys/s vs " + subject + " | Redis CPU/cycle | Redis CPU/key | Redis CPU/key vs " + subject + " |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
				first = false
			}
			k := float64(spec.Keys)
			cpuKey, cpuRatio := "n/a", "–"
			if s.ServerCPU > 0 && sub.ServerCPU > 0 {
				cpuKey, cpuRatio = fmtUs(s.ServerCPU/k), fmtRatio(s.ServerCPU/k/sub.ServerCPU)
			}
			fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", cr.Name, s.Name, spec.Keys, fmtRate(s.CyclesPerSec),
				fmtRatio(1/ratio), fmtRatio(k/ratio), fmtUs(s.ServerCPU), cpuKey, cpuRatio)
		}
	}
}

func fmtShares(xs []float64, group int) string {
	if len(xs) == 0 {
		return "n/a"
	}
	var parts []string
	for i := 0; i < len(xs); i += group {
		var g []string
		for _, x := range xs[i:min(i+group, len(xs))] {
			g = append(g, fmt.Sprintf("%.0f%%", 100*x))
		}
		parts = append(parts, strings.Join(g, " "))
	}
	return strings.Join(parts, " / ")
}

func holdText(h string) string {
	if h == "" || h == "0s" {
		return "contended holders release at once (the overlap check cannot see a second holder)"
	}
	return "contended holders hold for " + h + " (long enough for the overlap check to see a second holder)"
}

func poolSizeText(n int) string {
	if n == 0 {
		return "default"
	}
	return fmt.Sprint(n)
}

// gapInReleases is s's hand-over gap p50 in p50s of its release call: how
// many round trips a hand-over takes, whatever this machine's round trip.
func gapInReleases(s contenderSummary) string {
	if s.ReleaseP50 <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(s.GapP50)/float64(s.ReleaseP50))
}

// writeHandOver writes, for the contended cells, how fast a key passes
// from one holder to the next: the gap from a holder's release call to
// the next grant of the same key, and the cycles/s against the ideal of
// hot keys / hold (every key always held, no gap).
func writeHandOver(b *strings.Builder, r *report) {
	var rows []string
	for _, cr := range r.Cells {
		if !cr.Contended {
			continue
		}
		for _, s := range cr.Contenders {
			if s.HoldP50 == 0 || s.GapP50 == 0 {
				continue
			}
			if s.CyclesPerSec <= 0 {
				continue
			}
			ideal := float64(cr.HotKeys) / time.Duration(s.HoldP50).Seconds()
			// A key's mean time from one grant to the next, hold and gap:
			// the medians would understate it (the gap's tail is long).
			service := time.Duration(float64(cr.HotKeys) / s.CyclesPerSec * float64(time.Second))
			fair := time.Duration(float64(cr.G) / float64(cr.HotKeys) * float64(service))
			fifo := fifoP99(cr.G, cr.HotKeys, service)
			rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s | %.0f%% | %s | %s | %s | %s | %s | %s (%.1f×) | %s (%.1f×) |",
				cr.Name, s.Name, fmtRate(s.CyclesPerSec), fmtRate(ideal), 100*s.CyclesPerSec/ideal,
				fmtDur(s.HoldP50), fmtDur(s.GapP50), gapInReleases(s), fmtDur(s.GapP99), fmtDur(s.P99),
				fmtDur(int64(fair)), float64(s.P99)/float64(fair), fmtDur(int64(fifo)), float64(s.P99)/float64(fifo)))
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n## Hand-over\n\nContended cells: the gap is the time from a holder's release call to the next grant of the same key (by whichever goroutine); the ideal is hot keys / the measured median hold, every key always held with no gap. Lock p99 is the whole wait of one lock call. The fair share is goroutines per hot key x a key's mean time from one grant to the next (hot keys / cycles/s: hold and gap), each waiter served once per round; the FIFO p99 is the lock p99 a perfect first-come, first-served hand-over would give with that time, simulated with that same time for every hand-over (the gap's spread would lengthen the tail) and every goroutine picking its next key at random, as here: the keys' queues wander, so even that order's tail is about three fair shares. In brackets: lock p99 over each. The gap in releases is the gap p50 over the p50 of the release call itself (the holder's round trip to the masters, measured in the same run). A waiter that asks once it hears of the release needs about two: the release's way to the master and the announcement's way back make one, its own ask the other; only a hand-over on the master itself, the release setting the key for the next waiter, could need about one. Where waiters poll, their requests queue ahead of the release and lengthen it, so the figure there compares less well.\n\n")
	b.WriteString("| cell | contender | cycles/s | ideal | of ideal | hold p50 | gap p50 | gap in releases | gap p99 | lock p99 | fair share | FIFO p99 |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	b.WriteString(strings.Join(rows, "\n") + "\n")
}
