package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/redlock-go/redlock"
)

// logHeld prints one run's progress line.
func logHeld(r *heldRun) {
	what := "held"
	if r.Probe {
		what = "probe"
	}
	fmt.Fprintf(logOut, "  %-6s n%d ttl %-4s %7d locks: needed %8s/s made %8s/s  lost %s  client %8s/renewal  Redis %8s/renewal  %5.2f goroutines/lock  %7s heap/lock  %7s stack/lock  obtained in %.1fs, %d obtain error(s), %d key(s) left\n",
		what, r.Masters, r.TTL, r.Locks, fmtRate(r.NeededPerSec), fmtRate(r.MadePerSec), strings.Trim(fmtLost(r.Lost, r.Held), "*"),
		fmtUs(r.ClientCPUPerRenewal), fmtUs(r.ServerCPUPerRenewal), r.GoroutinesPerLock, fmtBytes(r.HeapPerLock), fmtBytes(r.StackPerLock), r.ObtainSecs, r.ObtainErrors, r.KeysLeft)
}

func fmtLost(lost, held int) string {
	if lost == 0 || held == 0 {
		return strconv.Itoa(lost)
	}
	return fmt.Sprintf("**%s (%.0f%%)**", fmtInt(lost), 100*float64(lost)/float64(held))
}

// fmtInt prints an integer with thousands separators: 20,000.
func fmtInt(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// fmtBytes prints a byte count as B, KB or MB (of 1000).
func fmtBytes(b float64) string {
	switch {
	case b >= 1e6:
		return trim3(b/1e6) + " MB"
	case b >= 1e3:
		return trim3(b/1e3) + " KB"
	case b < 0:
		return "–"
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}

// heldProblems is what fails a smoke run: a lock lost or not obtained at a
// load far below capacity, no renewal, a release that failed, a key left.
func heldProblems(h *heldReport) []string {
	if h == nil {
		return nil
	}
	var p []string
	for _, r := range h.Runs {
		at := fmt.Sprintf("held n%d ttl %s %d locks", r.Masters, r.TTL, r.Locks)
		if r.Held != r.Locks || r.ObtainErrors > 0 {
			p = append(p, fmt.Sprintf("%s: %d held, %d obtain error(s), first: %s", at, r.Held, r.ObtainErrors, r.FirstErr))
		}
		if r.Lost > 0 || len(r.LostEvents) > 0 {
			p = append(p, fmt.Sprintf("%s: %d lock(s) lost, LostEvents %v", at, r.Lost, r.LostEvents))
		}
		if got := r.RenewalsAll[string(redlock.Extended)]; got < uint64(r.Held) {
			p = append(p, fmt.Sprintf("%s: %d renewal(s) made, want at least one per lock (%d); by outcome %v", at, got, r.Held, r.RenewalsAll))
		}
		if r.Released != r.Held || r.ReleaseErrors > 0 || r.ReleaseLost > 0 {
			p = append(p, fmt.Sprintf("%s: %d of %d released, %d found lost, %d error(s): %s", at, r.Released, r.Held, r.ReleaseLost, r.ReleaseErrors, r.FirstErr))
		}
		if r.KeysLeft > 0 {
			p = append(p, fmt.Sprintf("%s: %d key(s) left on the masters after the releases", at, r.KeysLeft))
		}
	}
	return p
}

// writeHeld writes the workload's section of report.md.
func writeHeld(b *strings.Builder, h *heldReport) {
	if h == nil {
		return
	}
	b.WriteString("\n## Many held locks\n\n")
	if h.Smoke {
		b.WriteString("**Smoke run: checks that every lock is obtained, renewed and released, none lost and no key left; the figures are not measurements.**\n\n")
	}
	fmt.Fprintf(b, "One `redlock.New` Client over N masters (with an Observer that counts renewals by outcome and lost locks) obtains L distinct keys, its Obtains paced over one renewal period (TTL/3) from %d goroutines, puts each under `Lock.KeepAlive` (default renewal period TTL/3), holds them all for %s measured from when the last was obtained (search probes: at least two TTLs), then stops the keep-alives and releases the locks. "+
		"Renewals needed/s is locks held / (TTL/3); made/s counts renewals that a quorum confirmed in the window (a watchdog renews on a grid of a power of two milliseconds, once per TTL/3 on average, so made is about needed while the Client keeps up). Locks lost are the locks whose work context the watchdog cancelled by the end of the window. "+
		"While renewals fall behind the Client renews in the order the locks' validity ends, so fewer renewals than needed can keep every lock: a lock is lost once its renewal is about half a TTL late. Backlogs told counts the `BacklogEvent`s (a renewal waited more than 100ms past its time, for one on the grid the next grid point, for its turn), with the latest renewal they told of. "+
		"Client CPU per renewal is this process's getrusage over the window divided by every renewal in it (any outcome), Redis CPU per renewal the servers' `INFO cpu` over the window likewise: at small L the idle runtime and servers weigh in. Goroutines, heap and stack per lock are `runtime.NumGoroutine`, `HeapAlloc` and `StackInuse` (after two GCs) once every lock is held, minus before the first Obtain, over the locks held (a goroutine's stack is not in the heap); they include the harness's own per-lock state (the key, the Lock, the work context and stop function, about 50 B).",
		heldWorkers, h.HoldFor)
	if len(h.Cycles) > 0 {
		b.WriteString(" Renewal / lock cycle divides the client CPU per renewal by the client CPU of one whole Obtain + Release cycle of `redlock` at 64 goroutines, uncontended, measured in this run (below).")
	}
	b.WriteString("\n\n| masters | TTL | locks held | renewals needed/s | renewals made/s | made / needed | locks lost | backlogs told (latest) | goroutines/lock | heap/lock | stack/lock | client CPU/renewal | renewal / lock cycle | Redis CPU/renewal | Redis cmds/renewal | Redis reads/renewal | obtain errors | keys left |\n")
	b.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range h.Runs {
		if r.Probe {
			continue
		}
		b.WriteString(heldRow(h, r) + "\n")
	}
	if len(h.Cycles) > 0 {
		b.WriteString("\nThe lock cycle, for the ratio (median over the runs):\n\n| masters | cell | runs | cycles/s | client CPU/cycle | Redis CPU/cycle |\n| ---: | --- | ---: | ---: | ---: | ---: |\n")
		for _, c := range h.Cycles {
			fmt.Fprintf(b, "| %d | %s | %d | %s | %s | %s |\n", c.Masters, c.Cell, c.Runs, fmtRate(c.Cycles), fmtUs(c.ClientCPU), fmtUs(c.ServerCPU))
		}
	}
	if len(h.Limits) > 0 {
		b.WriteString("\n### Largest number of locks held without loss\n\nA search per masters and TTL: from the largest L of the table held without loss (a table run that lost locks counts as lost), double L until a run loses a lock or fails an Obtain, then bisect until the smallest L lost is within 12.5% above the largest held; each probe holds its locks for the time given (at least two TTLs: a watchdog that falls behind loses a lock once a renewal is about half a TTL late). A search that ran out of its time budget (`-held-search`) gives what it had.\n\n")
		b.WriteString("| masters | TTL | largest held without loss | smallest lost | hold per probe | probes (L: held / lost) | at the largest: needed/s, made/s, client CPU/renewal | search |\n| ---: | ---: | ---: | ---: | ---: | --- | --- | --- |\n")
		for _, l := range h.Limits {
			var ps []string
			for _, p := range l.Probes {
				v := "lost"
				if p.OK {
					v = "held"
				}
				ps = append(ps, fmtInt(p.L)+": "+v)
			}
			at := "–"
			if l.At != nil {
				at = fmt.Sprintf("%s, %s, %s", fmtRate(l.At.NeededPerSec), fmtRate(l.At.MadePerSec), fmtUs(l.At.ClientCPUPerRenewal))
			}
			fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %s | %s |\n", l.Masters, l.TTL, fmtLimit(l.Largest), fmtLimit(l.Lost), l.HoldFor, strings.Join(ps, ", "), at, l.State)
		}
		var probes []string
		for _, r := range h.Runs {
			if r.Probe {
				probes = append(probes, heldRow(h, r))
			}
		}
		if len(probes) > 0 {
			b.WriteString("\nThe probes:\n\n| masters | TTL | locks held | renewals needed/s | renewals made/s | made / needed | locks lost | backlogs told (latest) | goroutines/lock | heap/lock | stack/lock | client CPU/renewal | renewal / lock cycle | Redis CPU/renewal | Redis cmds/renewal | Redis reads/renewal | obtain errors | keys left |\n")
			b.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
			b.WriteString(strings.Join(probes, "\n") + "\n")
		}
	}
	var errs []string
	for _, r := range h.Runs {
		if r.FirstErr != "" {
			errs = append(errs, fmt.Sprintf("- n%d ttl %s %d locks: %s", r.Masters, r.TTL, r.Locks, r.FirstErr))
		}
	}
	if len(errs) > 0 {
		b.WriteString("\nFirst error of each run that had one:\n\n" + strings.Join(errs, "\n") + "\n")
	}
	if len(h.Problems) > 0 {
		b.WriteString("\nProblems (fail the smoke run):\n\n- " + strings.Join(h.Problems, "\n- ") + "\n")
	}
}

func heldRow(h *heldReport, r *heldRun) string {
	ratio := "–"
	if c := h.cycle(r.Masters); c != nil && c.ClientCPU > 0 && r.ClientCPUPerRenewal > 0 {
		ratio = fmtRatio(r.ClientCPUPerRenewal / c.ClientCPU)
	}
	madeOf := "–"
	if r.NeededPerSec > 0 {
		madeOf = fmt.Sprintf("%.0f%%", 100*r.MadePerSec/r.NeededPerSec)
	}
	backlog := "0"
	if r.Backlogs > 0 {
		backlog = fmt.Sprintf("%d (%.0fms)", r.Backlogs, r.MaxLate)
	}
	return fmt.Sprintf("| %d | %s | %s | %s | %s | %s | %s | %s | %.2f | %s | %s | %s | %s | %s | %s | %s | %d | %d |",
		r.Masters, r.TTL, fmtInt(r.Held), fmtRate(r.NeededPerSec), fmtRate(r.MadePerSec), madeOf, fmtLost(r.Lost, r.Held), backlog,
		r.GoroutinesPerLock, fmtBytes(r.HeapPerLock), fmtBytes(r.StackPerLock), fmtUs(r.ClientCPUPerRenewal), ratio, fmtUs(r.ServerCPUPerRenewal),
		fmtCount(r.CallsPerRenewal), fmtCount(r.ReadsPerRenewal), r.ObtainErrors, r.KeysLeft)
}

// writeHeldMarkdown writes report.md of a run of the workload alone (-held).
func writeHeldMarkdown(w io.Writer, r *report) error {
	var b strings.Builder
	m := r.Meta
	b.WriteString("# redlock benchmark: many held locks\n\n")
	fmt.Fprintf(&b, "%s on %s (%s, %d CPUs, %s memory, Linux %s), %s. Load average %s before the run, %s after. Lock cycles for the ratio: %s per run after a %s warmup, %d run(s).",
		m.Date, m.Host, m.CPU, m.CPUs, m.Memory, m.Kernel, m.GoVersion, m.LoadBefore, m.LoadAfter, m.Duration, m.Warmup, m.Repeats)
	if m.Smoke {
		b.WriteString(" **Smoke run: the figures are not measurements.**")
	}
	b.WriteString("\n\n")
	if m.Own {
		v := ""
		if len(m.Masters.Masters) > 0 {
			v = m.Masters.Masters[0].Version
		}
		fmt.Fprintf(&b, "Servers: redis-server %s processes the harness started on loopback, no persistence (PING round trip %s), on the same machine as the client.\n", v, fmtUs(firstRTT(m)))
	} else {
		writeTargetsRanAgainst(&b, r)
	}
	writeHeld(&b, r.Held)
	_, err := io.WriteString(w, b.String())
	return err
}
