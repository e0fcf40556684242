package main

// The headline chart (headline.svg) is the README's figure: a few cells a
// user chooses a lock by, the libraries they choose between, throughput and
// Redis CPU per lock side by side. The rules it keeps:
//
//   - Its cells and contenders are the fixed lists below; any other cell or
//     contender of the run stays in chart.svg only
//     (TestHeadlinePicksItsCellsAndContenders).
//   - Its title and subtitle are computed from the run: ratios are medians of
//     the per-repeat ratios measured side by side, never a figure written in
//     the code (TestHeadlineTitleIsComputedFromTheRun,
//     TestHeadlineTitleSaysWhereRedlockIsBehind).
//   - What the run lacks is drawn as missing and named, never filled in: a
//     headline cell or contender the run left out is listed below the
//     panels, and a contender missing from one cell it could run in gets a
//     "not measured" row (TestHeadlineShowsMissingDataAsMissing). A
//     contender that cannot run in a cell (one master only) has no row there
//     and the caption says why.
//   - It is written whenever the run has a headline contender in a headline
//     cell, and otherwise not at all, and a headline.svg left in the report
//     directory by an earlier run is removed, so the directory never shows
//     another run's headline beside this run's report
//     (TestHeadlineWrittenOnlyWithItsCells).
//   - Drawn 1,000 px wide it is at most about 700 px tall and no text is
//     under 12 px (TestHeadlineFitsAReadme).

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// headlineCells are the headline chart's cells, in its order: one and five
// masters with one and 64 goroutines, then, on one master with 64
// goroutines (where the one-master libraries run too), contended keys and a
// master 500µs away each way.
var headlineCells = []cell{
	{N: 1, G: 1},
	{N: 1, G: 64},
	{N: 1, G: 64, Contended: true, HotKeys: defaultHotKeys},
	{N: 1, G: 64, Latency: 500 * time.Microsecond},
	{N: 5, G: 1},
	{N: 5, G: 64},
}

// headlineSelection says which cells headlineCells are and why, for the
// chart's subtitle.
const headlineSelection = "Cells: 1 and 5 masters × 1 and 64 goroutines; at 1 master and 64 goroutines also contended keys and a master 500µs away (each way), where all five run."

// headlineContenders are the headline chart's contenders: the subject, the
// peer libraries, and the Redlock hand-written on go-redis's automatic
// pipelining.
var headlineContenders = []string{subject, "redsync", "redislock", "rueidislock", "goredis-autopipeline"}

// headlineLabel is a contender's name on the headline chart.
func headlineLabel(name string) string {
	if name == "redislock" {
		return "bsm/redislock"
	}
	return name
}

// A headlineRow is one contender in one cell; s is nil when the run has no
// figures for it there.
type headlineRow struct {
	name string
	s    *contenderSummary
}

// A headlineGroup is one cell of the headline chart; cr is nil when the run
// left the cell out.
type headlineGroup struct {
	cell cell
	cr   *cellReport
	rows []headlineRow
}

// headlineData is what the headline chart draws and says.
type headlineData struct {
	title    string
	subtitle []string // computed statements, then the selection
	groups   []headlineGroup
	missing  []string // cells and contenders the run lacks
	notes    []string // what cannot run where
	ok       bool     // some headline contender has figures in some headline cell
}

// buildHeadline picks the headline cells and contenders out of r and
// computes what the chart says.
func buildHeadline(r *report) headlineData {
	var h headlineData
	var inRun, notInRun []string
	for _, name := range headlineContenders {
		if slices.Contains(r.order, name) {
			inRun = append(inRun, name)
		} else {
			notInRun = append(notInRun, headlineLabel(name))
		}
	}
	var missingCells []string
	cannot := map[string][]string{} // contender -> cells it cannot run in
	for _, c := range headlineCells {
		g := headlineGroup{cell: c}
		for i := range r.Cells {
			if r.Cells[i].Name == c.Name() {
				g.cr = &r.Cells[i]
			}
		}
		if g.cr == nil {
			missingCells = append(missingCells, c.Name())
			h.groups = append(h.groups, g)
			continue
		}
		for _, name := range inRun {
			if spec, ok := specOf(name); ok && !spec.supports(c) {
				cannot[name] = append(cannot[name], c.Name())
				continue
			}
			s := g.cr.contender(name)
			h.ok = h.ok || s != nil
			g.rows = append(g.rows, headlineRow{name: name, s: s})
		}
		h.groups = append(h.groups, g)
	}
	h.title, h.subtitle = headlineText(r, h.groups)
	h.subtitle = append(h.subtitle, headlineSelection)
	if len(missingCells) > 0 {
		h.missing = append(h.missing, "Cells not in this run: "+strings.Join(missingCells, ", ")+".")
	}
	if len(notInRun) > 0 {
		h.missing = append(h.missing, "Contenders not in this run: "+strings.Join(notInRun, ", ")+".")
	}
	var oneMasterOnly []string
	for _, name := range inRun {
		if len(cannot[name]) == 0 {
			continue
		}
		if spec, _ := specOf(name); spec.Masters(1) && !spec.Masters(2) {
			oneMasterOnly = append(oneMasterOnly, headlineLabel(name))
		} else {
			h.notes = append(h.notes, fmt.Sprintf("%s does not run in %s.", headlineLabel(name), strings.Join(cannot[name], ", ")))
		}
	}
	if len(oneMasterOnly) > 0 {
		verb := " locks"
		if len(oneMasterOnly) > 1 {
			verb = " lock"
		}
		h.notes = append(h.notes, joinAnd(oneMasterOnly)+verb+" one master only: no bars at 5 masters.")
	}
	return h
}

// headlineCompare is how the subject compares with a set of contenders in
// the headline cells: per cell, its locks/s over the fastest one's and its
// Redis CPU per lock over the leanest one's.
func headlineCompare(groups []headlineGroup, in func(string) bool) (tput, cpu []float64) {
	for _, g := range groups {
		if g.cr == nil {
			continue
		}
		sub := g.cr.contender(subject)
		if sub == nil {
			continue
		}
		var fastest, leanest *contenderSummary
		for _, row := range g.rows {
			s := row.s
			if s == nil || !in(row.name) {
				continue
			}
			if s.CyclesPerSec > 0 && (fastest == nil || s.CyclesPerSec > fastest.CyclesPerSec) {
				fastest = s
			}
			if s.ServerCPU > 0 && (leanest == nil || s.ServerCPU < leanest.ServerCPU) {
				leanest = s
			}
		}
		if fastest != nil {
			if v := cycleRatio(g.cr, subject, fastest.Name); v > 0 {
				tput = append(tput, v)
			}
		}
		if leanest != nil && sub.ServerCPU > 0 {
			cpu = append(cpu, sub.ServerCPU/leanest.ServerCPU)
		}
	}
	return tput, cpu
}

// cycleRatio is a's cycles/s over b's in cr: the median of the ratios of
// the repeats both ran in (side by side), or the ratio of their medians when
// the cell records no runs.
func cycleRatio(cr *cellReport, a, b string) float64 {
	type pair struct {
		a, b       float64
		hasA, hasB bool
	}
	reps := map[int]*pair{}
	for _, run := range cr.Runs {
		if run.ElapsedS <= 0 || run.Contender != a && run.Contender != b {
			continue
		}
		p := reps[run.Repeat]
		if p == nil {
			p = &pair{}
			reps[run.Repeat] = p
		}
		rate := float64(run.Cycles) / run.ElapsedS
		if run.Contender == a {
			p.a, p.hasA = rate, true
		} else {
			p.b, p.hasB = rate, true
		}
	}
	var rs []float64
	for _, p := range reps {
		if p.hasA && p.hasB && p.b > 0 {
			rs = append(rs, p.a/p.b)
		}
	}
	if len(rs) > 0 {
		return median(rs)
	}
	sa, sb := cr.contender(a), cr.contender(b)
	if sa == nil || sb == nil || sb.CyclesPerSec <= 0 {
		return 0
	}
	return sa.CyclesPerSec / sb.CyclesPerSec
}

// headlineText computes the title and the statements of the subtitle.
func headlineText(r *report, groups []headlineGroup) (string, []string) {
	prefix := ""
	if r.Meta.Smoke {
		prefix = "SMOKE RUN, not a measurement. "
	}
	hasSubject := false
	for _, g := range groups {
		for _, row := range g.rows {
			hasSubject = hasSubject || row.name == subject && row.s != nil
		}
	}
	if !hasSubject {
		return prefix + "Locks/s and Redis CPU per lock (" + subject + " not in this run)", nil
	}
	isPeer := func(name string) bool {
		spec, _ := specOf(name)
		return name != subject && spec.Kind == kindPeer
	}
	others, whom := isPeer, "peer library"
	tput, cpu := headlineCompare(groups, isPeer)
	if len(tput) == 0 {
		others, whom = func(name string) bool { return name != subject }, "other contender"
		tput, cpu = headlineCompare(groups, others)
	}
	if len(tput) == 0 {
		return prefix + subject + ": locks/s and Redis CPU per lock (no other contender beside it in this run)", nil
	}
	title := fmt.Sprintf("%s%s: %s the locks/s of the fastest %s", prefix, subject, spread(tput), whom)
	if len(tput) > 1 {
		title += fmt.Sprintf(" (%s, %d cells)", ratioRange(tput), len(tput))
	} else {
		title += " (1 cell)"
	}
	var sub []string
	if len(cpu) > 0 {
		s := fmt.Sprintf("Redis CPU per lock: %s that of the leanest %s", spread(cpu), whom)
		if len(cpu) > 1 {
			s += " (" + ratioRange(cpu) + ")"
		}
		sub = append(sub, s+".")
	}
	for _, name := range headlineContenders {
		spec, _ := specOf(name)
		if name == subject || others(name) || spec.Kind != kindBaseline {
			continue
		}
		bt, bc := headlineCompare(groups, func(n string) bool { return n == name })
		if len(bt) == 0 {
			continue
		}
		s := fmt.Sprintf("Against %s (hand-written): %s its locks/s", name, spread(bt))
		if len(bt) > 1 {
			s += " (" + ratioRange(bt) + ")"
		}
		if len(bc) > 0 {
			s += fmt.Sprintf(", %s its Redis CPU per lock", spread(bc))
			if len(bc) > 1 {
				s += " (" + ratioRange(bc) + ")"
			}
		}
		sub = append(sub, s+".")
	}
	return title, sub
}

// spread states ratios by their median: "2.5×" for one, "a median of 2.5×"
// for more.
func spread(xs []float64) string {
	if len(xs) == 1 {
		return fmtX(xs[0])
	}
	return "a median " + fmtX(median(xs))
}

// ratioRange is the smallest and largest of xs: "0.87–10×".
func ratioRange(xs []float64) string {
	return strings.TrimSuffix(fmtX(slices.Min(xs)), "×") + "–" + fmtX(slices.Max(xs))
}

// fmtX prints a ratio with two significant digits, three under 1: 0.87×,
// 1.7×, 12×.
func fmtX(v float64) string {
	switch {
	case v >= 9.95:
		return fmt.Sprintf("%.0f×", v)
	case v >= 0.995:
		return fmt.Sprintf("%.1f×", v)
	default:
		return fmt.Sprintf("%.2f×", v)
	}
}

func joinAnd(xs []string) string {
	if len(xs) <= 1 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

// textWidth estimates the width of s in DejaVu Sans (what rsvg and most
// Linux browsers draw sans-serif with; wider than Arial or Helvetica), so
// that text is laid out without overlapping anywhere.
func textWidth(s string, size float64, bold bool) float64 {
	var em float64
	for _, r := range s {
		switch {
		case strings.ContainsRune("il.,:;|!'’()[]", r):
			em += 0.32
		case r == ' ':
			em += 0.32
		case strings.ContainsRune("fjrt-–/", r):
			em += 0.42
		case strings.ContainsRune("mwMW", r):
			em += 0.93
		case r >= 'A' && r <= 'Z', r == '×', r == 'µ':
			em += 0.72
		default:
			em += 0.62
		}
	}
	if bold {
		em *= 1.1
	}
	return em * size
}

// wrapText breaks s into lines no wider than width.
func wrapText(s string, size, width float64) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		try := w
		if line != "" {
			try = line + " " + w
		}
		if line != "" && textWidth(try, size, false) > width {
			lines = append(lines, line)
			try = w
		}
		line = try
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// headlineCellLines describes a cell in a few short lines, from the cell
// and, when the run has it, what the run measured there.
func headlineCellLines(c cell, cr *cellReport) []string {
	plural := func(n int, one string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, one)
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	lines := []string{plural(c.N, "master"), plural(c.G, "goroutine")}
	if c.Contended {
		hot := c.HotKeys
		if cr != nil && cr.HotKeys > 0 {
			hot = cr.HotKeys
		}
		lines = append(lines, fmt.Sprintf("contended, %d hot keys", hot))
	}
	if c.Latency > 0 {
		l := "+" + fmtDur(int64(c.Latency)) + " each way"
		lines = append(lines, l)
		if cr != nil && cr.RTTus > 0 {
			lines = append(lines, "(PING RTT "+fmtUs(cr.RTTus)+")")
		}
	}
	return lines
}

// Layout of the headline chart, in px of its 1,000 px wide viewBox: drawn
// 1,000 px wide, a font size here is its size on the screen.
const (
	hlWidth     = 1000
	hlMinFont   = 12
	hlNameRight = 298 // contender names end here
	hlBarsA     = 306 // throughput bars start here
	hlBarsB     = 650 // Redis CPU bars start here
	hlBarMax    = 250
	hlRow       = 15 // one contender's row
	hlBar       = 12
	hlGroupGap  = 8
)

// writeHeadlineSVG draws the headline chart: per headline cell a group of
// bars, one per contender, locks/s on the left and Redis CPU per lock on the
// right, each scaled to the cell's largest value and labelled with its
// figure.
func writeHeadlineSVG(w io.Writer, r *report) error {
	h := buildHeadline(r)
	var body strings.Builder
	esc := html.EscapeString
	text := func(x, y float64, size int, attrs, s string) {
		fmt.Fprintf(&body, `<text x="%.0f" y="%.0f" font-size="%d"%s>%s</text>`+"\n", x, y, size, attrs, esc(s))
	}

	// Title: one line, its font shrunk if it must be to fit the width.
	titleSize := 19.0
	for titleSize > 14 && textWidth(h.title, titleSize, true) > hlWidth-20 {
		titleSize--
	}
	y := 28.0
	text(10, y, int(titleSize), ` font-weight="bold"`, h.title)
	y += 6
	for i, s := range h.subtitle {
		size, color := 13.0, "#222"
		if i == len(h.subtitle)-1 {
			size, color = 12, "#555" // the selection, under the figures
		}
		for _, line := range wrapText(s, size, hlWidth-20) {
			y += size + 5
			text(10, y, int(size), fmt.Sprintf(` fill="%s"`, color), line)
		}
	}

	// Panel headings.
	y += 26
	text(hlBarsA, y, 13, ` font-weight="bold"`, "Locks/s (lock + release cycles)")
	text(hlBarsB, y, 13, ` font-weight="bold"`, "Redis CPU per lock (all masters)")
	y += 16
	text(hlBarsA, y, 12, ` fill="#555"`, "longer is better; bars scaled per cell")
	text(hlBarsB, y, 12, ` fill="#555"`, "shorter is better; bars scaled per cell")
	y += 10

	// redlock in its own red; the others in greys, the hand-written
	// baseline in a grey of its own, each row named.
	barColor := func(name string) string {
		switch spec, _ := specOf(name); {
		case name == subject:
			return colorOf(subject)
		case spec.Kind == kindBaseline:
			return "#b7a9d6"
		default:
			return "#a6a6a6"
		}
	}
	for gi, g := range h.groups {
		if gi > 0 {
			fmt.Fprintf(&body, `<line x1="10" y1="%.0f" x2="%d" y2="%.0f" stroke="#ddd"/>`+"\n", y+hlGroupGap/2, hlWidth-10, y+hlGroupGap/2)
			y += hlGroupGap
		}
		top := y + 2
		labelLines := headlineCellLines(g.cell, g.cr)
		rows := max(len(g.rows), 1)
		for i, l := range labelLines {
			if i == 0 {
				text(10, top+11, 14, ` font-weight="bold"`, l)
			} else {
				text(10, top+11+float64(i)*15, 13, "", l)
			}
		}
		if g.cr == nil {
			text(hlBarsA+4, top+11, 13, ` fill="#a00" font-style="italic"`, "not in this run: no figures")
			y = top + float64(len(labelLines))*15
			continue
		}
		if len(g.rows) == 0 {
			text(hlBarsA, top+13, 13, ` fill="#a00" font-style="italic"`, "none of the headline contenders ran in this cell")
		}
		var maxT, maxC float64
		for _, row := range g.rows {
			if row.s != nil {
				maxT = math.Max(maxT, row.s.CyclesPerSec)
				maxC = math.Max(maxC, row.s.ServerCPU)
			}
		}
		for i, row := range g.rows {
			ry := top + float64(i)*hlRow
			base := ry + hlBar - 2
			weight := ""
			if row.name == subject {
				weight = fmt.Sprintf(` font-weight="bold" fill="%s"`, colorOf(subject))
			}
			text(hlNameRight, base, 13, ` text-anchor="end"`+weight, headlineLabel(row.name))
			if row.s == nil {
				text(hlBarsA+4, base, 12, ` fill="#a00" font-style="italic"`, "not measured in this run")
				text(hlBarsB+4, base, 12, ` fill="#a00" font-style="italic"`, "not measured in this run")
				continue
			}
			s := row.s
			color := barColor(row.name)
			wt := 0.0
			if maxT > 0 {
				wt = hlBarMax * s.CyclesPerSec / maxT
			}
			fmt.Fprintf(&body, `<rect x="%d" y="%.0f" width="%.1f" height="%d" fill="%s"/>`+"\n", hlBarsA, ry, wt, hlBar, color)
			label := fmtRate(s.CyclesPerSec)
			if s.Errors > 0 {
				label += fmt.Sprintf(", %d errors", s.Errors)
			}
			if s.Overlaps > 0 {
				label += fmt.Sprintf(", %d overlaps", s.Overlaps)
			}
			text(hlBarsA+wt+4, base, 13, weight, label)
			if s.ServerCPU <= 0 {
				text(hlBarsB+4, base, 12, ` fill="#a00" font-style="italic"`, "no Redis CPU figure (INFO)")
				continue
			}
			wc := hlBarMax * s.ServerCPU / maxC
			fmt.Fprintf(&body, `<rect x="%d" y="%.0f" width="%.1f" height="%d" fill="%s"/>`+"\n", hlBarsB, ry, wc, hlBar, color)
			text(hlBarsB+wc+4, base, 13, weight, fmtUs(s.ServerCPU))
		}
		bottom := top + math.Max(float64(rows)*hlRow, float64(len(labelLines))*15+2)
		for _, x := range []int{hlBarsA, hlBarsB} {
			fmt.Fprintf(&body, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#888"/>`+"\n", x, top-2, x, top+float64(rows)*hlRow-2)
		}
		y = bottom
	}

	// Caption: what is missing, what cannot run where, how it was measured.
	m := r.Meta
	var names []string
	for _, c := range headlineCells {
		names = append(names, c.Name())
	}
	caption := slices.Concat(h.missing, h.notes)
	if slices.ContainsFunc(h.groups, func(g headlineGroup) bool { return g.cr != nil && g.cr.Contended }) {
		caption = append(caption, "Contended: locks/s counts the locks granted, not the attempts refused; the Redis CPU per lock includes theirs.")
	}
	caption = append(caption,
		"Cells, top to bottom: "+strings.Join(names, ", ")+".",
		"goredis-autopipeline: a Redlock of about 100 lines hand-written on go-redis's automatic pipelining (a baseline, not a library).",
		fmt.Sprintf("%s, %d CPUs, load average %s before, %s after; %s per contender per cell, %d repeat(s), medians; ratios of runs side by side. All cells and contenders: chart.svg.",
			m.Date, m.CPUs, m.LoadBefore, m.LoadAfter, m.Duration, m.Repeats))
	y += 8
	for i, c := range caption {
		color := "#555"
		if i < len(h.missing) {
			color = "#a00"
		}
		for _, line := range wrapText(c, 12, hlWidth-20) {
			y += 16
			text(10, y, 12, fmt.Sprintf(` fill="%s"`, color), line)
		}
	}

	height := int(y) + 12
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Verdana, sans-serif">`+"\n", hlWidth, height, hlWidth, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	b.WriteString(body.String())
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeHeadline writes dir/headline.svg when r has a headline contender in
// a headline cell, and otherwise removes a headline.svg an earlier run left
// there. It reports whether it wrote one.
func writeHeadline(dir string, r *report) (bool, error) {
	path := filepath.Join(dir, "headline.svg")
	if !buildHeadline(r).ok {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return false, err
		}
		return false, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return false, err
	}
	if err := writeHeadlineSVG(f, r); err != nil {
		f.Close()
		return false, err
	}
	return true, f.Close()
}
