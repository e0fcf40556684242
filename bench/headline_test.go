package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hlRun is one measured second of a contender: cycles lock + release
// cycles, at cpuUs of Redis CPU per cycle.
func hlRun(name string, repeat int, cycles uint64, cpuUs float64) *runResult {
	return &runResult{Contender: name, Repeat: repeat, Elapsed: time.Second, Attempts: cycles, Cycles: cycles,
		ServerCPU: []float64{cpuUs * 1e-6 * float64(cycles)}, Calls: []uint64{4 * cycles}, Reads: []uint64{cycles}}
}

// hlFigure is a contender's cycles/s and Redis CPU per cycle in one cell of
// a synthetic run.
type hlFigure struct {
	name   string
	cycles uint64
	cpuUs  float64
}

// hlReport is a synthetic run over cells, each with its contenders'
// figures, in three repeats whose cycles vary by ±5%.
func hlReport(cells map[string][]hlFigure, order []string, extra ...cell) *report {
	r := &report{
		Meta:  meta{Date: "2026-12-03 12:00 UTC", CPUs: 2, Duration: "3s", Repeats: 3, LoadBefore: "0.50 0.40 0.30", LoadAfter: "2.10 1.50 0.90", Own: true},
		order: order,
	}
	for _, c := range append(slices.Clone(headlineCells), extra...) {
		figs, ok := cells[c.Name()]
		if !ok {
			continue
		}
		var runs []*runResult
		for rep, f := range []float64{1, 0.95, 1.05} {
			for _, fig := range figs {
				runs = append(runs, hlRun(fig.name, rep, uint64(f*float64(fig.cycles)), fig.cpuUs))
			}
		}
		r.Cells = append(r.Cells, summarize(c, 30, order, runs))
	}
	return r
}

var hlOrder = []string{"redlock", "redlock-single", "goredis-autopipeline", "raw-halfduplex", "redsync", "redislock", "rueidislock", "redlock-wait"}

// hlFullRun has every headline cell and contender, and cells and contenders
// the headline leaves out.
func hlFullRun() *report {
	n1 := func(rl, ap, rs, rd, ru uint64) []hlFigure {
		return []hlFigure{{"redlock", rl, 5}, {"redlock-single", rl, 5}, {"goredis-autopipeline", ap, 4.2}, {"raw-halfduplex", 2 * rl, 3},
			{"redsync", rs, 30}, {"redislock", rd, 35}, {"rueidislock", ru, 16}, {"redlock-wait", rl / 2, 10}}
	}
	n5 := func(rl, ap, rs uint64) []hlFigure {
		return []hlFigure{{"redlock", rl, 28}, {"redlock-single", 0, 0}, {"goredis-autopipeline", ap, 25}, {"raw-halfduplex", 2 * rl, 20},
			{"redsync", rs, 250}, {"redlock-wait", rl / 2, 60}}
	}
	without := func(figs []hlFigure, name string) []hlFigure {
		return slices.DeleteFunc(figs, func(f hlFigure) bool { return f.name == name })
	}
	return hlReport(map[string][]hlFigure{
		"n1-g1-uncontended":           n1(8000, 6700, 6700, 8700, 5200),
		"n1-g64-uncontended":          n1(72000, 80000, 15000, 18000, 40000),
		"n1-g64-contended":            n1(24000, 33000, 5000, 6500, 14000),
		"n1-g64-uncontended-lat500us": n1(14000, 18000, 5500, 6000, 16000),
		"n5-g1-uncontended":           without(n5(2900, 1700, 1900), "redlock-single"),
		"n5-g64-uncontended":          without(n5(29000, 30000, 3000), "redlock-single"),
		"n3-g64-uncontended":          without(n5(46000, 44000, 5000), "redlock-single"),
	}, hlOrder, cell{N: 3, G: 64})
}

// svgTexts parses an SVG and returns its text elements' contents and font
// sizes, and its height; it fails the test on malformed XML.
func svgTexts(t *testing.T, svg []byte) (texts []string, sizes []float64, height float64) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed: %v", err)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		for _, a := range el.Attr {
			switch {
			case el.Name.Local == "svg" && a.Name.Local == "height":
				height, _ = strconv.ParseFloat(a.Value, 64)
			case el.Name.Local == "svg" && a.Name.Local == "width" && a.Value != "1000":
				t.Errorf("width %s, want 1000", a.Value)
			case el.Name.Local == "text" && a.Name.Local == "font-size":
				v, _ := strconv.ParseFloat(a.Value, 64)
				sizes = append(sizes, v)
			}
		}
		if el.Name.Local == "text" {
			var s string
			if err := dec.DecodeElement(&s, &el); err != nil {
				t.Fatal(err)
			}
			texts = append(texts, s)
		}
	}
	return texts, sizes, height
}

func drawHeadline(t *testing.T, r *report) (string, []string) {
	t.Helper()
	var b bytes.Buffer
	if err := writeHeadlineSVG(&b, r); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("HEADLINE_SVG_DIR"); dir != "" { // to look at while changing the chart
		os.WriteFile(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".svg"), b.Bytes(), 0o644)
	}
	texts, _, _ := svgTexts(t, b.Bytes())
	return b.String(), texts
}

func TestHeadlinePicksItsCellsAndContenders(t *testing.T) {
	h := buildHeadline(hlFullRun())
	var cells []string
	for _, g := range h.groups {
		cells = append(cells, g.cell.Name())
		var names []string
		for _, row := range g.rows {
			if row.s == nil {
				t.Errorf("%s %s: no figures in a run that has them", g.cell.Name(), row.name)
			}
			names = append(names, row.name)
		}
		want := []string{"redlock", "redsync", "redislock", "rueidislock", "goredis-autopipeline"}
		if g.cell.N == 5 {
			want = []string{"redlock", "redsync", "goredis-autopipeline"}
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s: contenders %q, want %q", g.cell.Name(), names, want)
		}
	}
	want := []string{"n1-g1-uncontended", "n1-g64-uncontended", "n1-g64-contended", "n1-g64-uncontended-lat500us", "n5-g1-uncontended", "n5-g64-uncontended"}
	if !slices.Equal(cells, want) {
		t.Errorf("cells %q, want %q", cells, want)
	}
	if !h.ok {
		t.Error("a run with every headline cell has no headline")
	}
	_, texts := drawHeadline(t, hlFullRun())
	all := strings.Join(texts, "|")
	for _, absent := range []string{"redlock-single", "raw-halfduplex", "redlock-wait", "n3-g64", "not in this run", "not measured"} {
		if strings.Contains(all, absent) {
			t.Errorf("headline shows %q: %s", absent, all)
		}
	}
	for _, want := range []string{"bsm/redislock and rueidislock lock one master only", "+500µs each way", "contended, 16 hot keys", "72.0k", "5.00µs"} {
		if !strings.Contains(all, want) {
			t.Errorf("headline lacks %q: %s", want, all)
		}
	}
}

func TestHeadlineTitleIsComputedFromTheRun(t *testing.T) {
	// redlock over the fastest peer per cell: 8000/8700, 72000/40000,
	// 24000/14000, 14000/16000, 2900/1900, 29000/3000: sorted 0.875, 0.920,
	// 1.53, 1.71, 1.80, 9.67, a median of 1.62. Redis CPU over the leanest
	// peer: 5/16 at N=1 (4 cells), 28/250 at N=5 (2 cells), a median of
	// 0.31. Against goredis-autopipeline: 8000/6700, 72000/80000,
	// 24000/33000, 14000/18000, 2900/1700, 29000/30000, a median of 0.93,
	// and Redis CPU 5/4.2 (4 cells) and 28/25, a median of 1.19.
	h := buildHeadline(hlFullRun())
	if want := "redlock: a median 1.6× the locks/s of the fastest peer library (0.88–9.7×, 6 cells)"; h.title != want {
		t.Errorf("title\n %q, want\n %q", h.title, want)
	}
	if want := "Redis CPU per lock: a median 0.31× that of the leanest peer library (0.11–0.31×)."; h.subtitle[0] != want {
		t.Errorf("subtitle\n %q, want\n %q", h.subtitle[0], want)
	}
	if !strings.HasPrefix(h.subtitle[1], "Against goredis-autopipeline (hand-written): a median 0.93× its locks/s (0.73–1.7×), a median 1.2× its Redis CPU per lock (1.1–1.2×).") {
		t.Errorf("baseline statement %q", h.subtitle[1])
	}
	if h.subtitle[2] != headlineSelection {
		t.Errorf("the selection is not stated: %q", h.subtitle)
	}

	// Another run, other figures, another title: nothing is written in.
	r := hlFullRun()
	for i := range r.Cells {
		r.Cells[i].Runs = nil // the ratio of the medians then
		for j := range r.Cells[i].Contenders {
			if s := &r.Cells[i].Contenders[j]; s.Name == "redlock" {
				s.CyclesPerSec *= 3
			}
		}
	}
	if h := buildHeadline(r); !strings.HasPrefix(h.title, "redlock: a median 4.9× the locks/s of the fastest peer library (2.6–29×, 6 cells)") {
		t.Errorf("title %q", h.title)
	}
	r.Meta.Smoke = true
	if h := buildHeadline(r); !strings.HasPrefix(h.title, "SMOKE RUN, not a measurement. redlock:") {
		t.Errorf("smoke title %q", h.title)
	}
}

// The ratios are those measured side by side in each repeat, not those of
// the medians: a repeat where everything ran slower does not tilt them.
func TestHeadlineRatiosAreSideBySide(t *testing.T) {
	cr := summarize(cell{N: 1, G: 64}, 30, []string{"redlock", "redsync"}, []*runResult{
		hlRun("redlock", 0, 1000, 5), hlRun("redsync", 0, 500, 5), // 2
		hlRun("redlock", 1, 3000, 5), hlRun("redsync", 1, 1000, 5), // 3
		hlRun("redlock", 2, 400, 5), hlRun("redsync", 2, 100, 5), // 4
	})
	if got := cycleRatio(&cr, "redlock", "redsync"); got != 3 {
		t.Errorf("ratio %v, want 3 (medians' ratio %v)", got, cr.contender("redlock").CyclesPerSec/cr.contender("redsync").CyclesPerSec)
	}
}

func TestHeadlineTitleSaysWhereRedlockIsBehind(t *testing.T) {
	r := hlReport(map[string][]hlFigure{
		"n1-g64-uncontended": {{"redlock", 10000, 5}, {"redsync", 20000, 30}, {"rueidislock", 30000, 40}},
	}, []string{"redlock", "redsync", "rueidislock"})
	h := buildHeadline(r)
	if want := "redlock: 0.33× the locks/s of the fastest peer library (1 cell)"; h.title != want {
		t.Errorf("title %q, want %q", h.title, want)
	}
	// Without peers, the comparison is with the others, and says so.
	r = hlReport(map[string][]hlFigure{
		"n5-g64-uncontended": {{"redlock", 10000, 5}, {"goredis-autopipeline", 8000, 4}},
	}, []string{"redlock", "goredis-autopipeline"})
	if h := buildHeadline(r); h.title != "redlock: 1.2× the locks/s of the fastest other contender (1 cell)" {
		t.Errorf("title %q", h.title)
	}
	r = hlReport(map[string][]hlFigure{"n5-g64-uncontended": {{"redlock", 10000, 5}}}, []string{"redlock"})
	if h := buildHeadline(r); !strings.Contains(h.title, "no other contender") {
		t.Errorf("title %q", h.title)
	}
	r = hlReport(map[string][]hlFigure{"n5-g64-uncontended": {{"redsync", 10000, 5}}}, []string{"redsync"})
	if h := buildHeadline(r); !strings.Contains(h.title, "redlock not in this run") {
		t.Errorf("title %q", h.title)
	}
}

func TestHeadlineShowsMissingDataAsMissing(t *testing.T) {
	// A -cells run with two headline cells and one other, without
	// rueidislock, and redsync missing from one cell it can run in.
	r := hlReport(map[string][]hlFigure{
		"n1-g64-uncontended": {{"redlock", 72000, 5}, {"redsync", 15000, 30}, {"redislock", 18000, 35}, {"goredis-autopipeline", 80000, 4}},
		"n5-g64-uncontended": {{"redlock", 29000, 28}, {"goredis-autopipeline", 30000, 26}},
		"n3-g64-uncontended": {{"redlock", 46000, 16}, {"redsync", 5000, 130}},
	}, []string{"redlock", "goredis-autopipeline", "redsync", "redislock"}, cell{N: 3, G: 64})
	r.Cells[1].Contenders[0].ServerCPU = -1 // INFO not allowed
	h := buildHeadline(r)
	var missing []string
	for _, g := range h.groups {
		if g.cr == nil {
			missing = append(missing, g.cell.Name())
			if len(g.rows) > 0 {
				t.Errorf("%s is not in the run but has rows", g.cell.Name())
			}
		}
		for _, row := range g.rows {
			if row.s == nil {
				missing = append(missing, g.cell.Name()+" "+row.name)
			}
		}
	}
	want := []string{"n1-g1-uncontended", "n1-g64-contended", "n1-g64-uncontended-lat500us", "n5-g1-uncontended", "n5-g64-uncontended redsync"}
	if !slices.Equal(missing, want) {
		t.Errorf("missing %q, want %q", missing, want)
	}
	// Only redlock over redsync and redislock in the one cell with peers.
	if want := "redlock: 4.0× the locks/s of the fastest peer library (1 cell)"; h.title != want {
		t.Errorf("title %q, want %q", h.title, want)
	}

	svg, texts := drawHeadline(t, r)
	all := strings.Join(texts, "|")
	for _, want := range []string{
		"Cells not in this run: n1-g1-uncontended, n1-g64-contended, n1-g64-uncontended-lat500us, n5-g1-uncontended.",
		"Contenders not in this run: rueidislock.",
		"not measured in this run",
		"no Redis CPU figure (INFO)",
		"not in this run: no figures",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("headline lacks %q: %s", want, all)
		}
	}
	if !strings.Contains(all, "bsm/redislock locks one master only: no bars at 5 masters.") {
		t.Errorf("no word on why bsm/redislock has no bar at 5 masters: %s", all)
	}
	// Bars: 4 in n1-g64 (x2 panels), 2 in n5-g64 with one Redis CPU figure
	// unknown, none for what is missing: 8 + 3, and the background.
	if got := strings.Count(svg, "<rect"); got != 1+8+3 {
		t.Errorf("%d rects, want %d", got, 1+8+3)
	}

	// A run without any headline contender in a headline cell has no headline.
	r = hlReport(map[string][]hlFigure{"n1-g64-uncontended": {{"redlock-wait", 1000, 5}}}, []string{"redlock-wait"})
	if buildHeadline(r).ok {
		t.Error("headline without a headline contender")
	}
}

func TestHeadlineWrittenOnlyWithItsCells(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "headline.svg")
	wrote, err := writeHeadline(dir, hlFullRun())
	if err != nil || !wrote {
		t.Fatalf("writeHeadline = %v, %v", wrote, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	other := hlReport(map[string][]hlFigure{"n3-g64-uncontended": {{"redlock", 1000, 5}}}, []string{"redlock"}, cell{N: 3, G: 64})
	wrote, err = writeHeadline(dir, other)
	if err != nil || wrote {
		t.Fatalf("writeHeadline without headline cells = %v, %v", wrote, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("an earlier run's headline.svg is left beside this run's report: %v", err)
	}
	if wrote, err := writeHeadline(dir, other); err != nil || wrote {
		t.Errorf("writeHeadline with nothing to remove = %v, %v", wrote, err)
	}
	// The report shows the headline above the full chart when there is one.
	var b bytes.Buffer
	if err := writeMarkdown(&b, hlFullRun()); err != nil {
		t.Fatal(err)
	}
	if i, j := strings.Index(b.String(), "(headline.svg)"), strings.Index(b.String(), "(chart.svg)"); i < 0 || j < i {
		t.Errorf("report.md: headline at %d, chart at %d", i, j)
	}
	b.Reset()
	if err := writeMarkdown(&b, other); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "headline.svg") {
		t.Error("report.md shows a headline the run has not written")
	}
}

func TestHeadlineFitsAReadme(t *testing.T) {
	for name, r := range map[string]*report{"full": hlFullRun(), "smoke": func() *report { r := hlFullRun(); r.Meta.Smoke = true; return r }()} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeHeadlineSVG(&b, r); err != nil {
				t.Fatal(err)
			}
			texts, sizes, height := svgTexts(t, b.Bytes())
			if height > 700 {
				t.Errorf("height %v px at 1000 px wide, want at most 700", height)
			}
			for i, s := range sizes {
				if s < hlMinFont {
					t.Errorf("text %q at %vpx, under %dpx", texts[i], s, hlMinFont)
				}
			}
			// No text runs past the right edge (by the same estimate the
			// layout uses), and the title is one line.
			xs := regexp.MustCompile(`<text x="([0-9.]+)" y="[0-9.]+" font-size="([0-9]+)"([^>]*)>([^<]*)</text>`).FindAllStringSubmatch(b.String(), -1)
			for _, m := range xs {
				x, _ := strconv.ParseFloat(m[1], 64)
				size, _ := strconv.ParseFloat(m[2], 64)
				if strings.Contains(m[3], "text-anchor") {
					continue
				}
				if w := textWidth(unescapeXML(m[4]), size, strings.Contains(m[3], "bold")); x+w > 1000 {
					t.Errorf("%q ends at %.0f px", m[4], x+w)
				}
			}
		})
	}
}

func unescapeXML(s string) string {
	var out string
	if err := xml.Unmarshal([]byte("<a>"+s+"</a>"), &out); err != nil {
		return s
	}
	return out
}
