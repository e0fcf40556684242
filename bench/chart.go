package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

func colorOf(name string) string {
	if s, ok := specOf(name); ok && s.Color != "" {
		return s.Color
	}
	return "#7f7f7f"
}

// niceMax rounds v up to 1, 2 or 5 times a power of ten, for axis ticks.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// panelTitle names the masters behind a cell: its panel in the chart.
func panelTitle(cr *cellReport) string {
	t := fmt.Sprintf("N = %d master", cr.N)
	if cr.N != 1 {
		t += "s"
	}
	if cr.Cluster {
		t = fmt.Sprintf("%d independent Redis Clusters of %d shards", cr.N, cr.Shards)
	}
	if cr.LatencyUs > 0 {
		t += fmt.Sprintf(", +%s each way (PING RTT %s)", fmtUs(cr.LatencyUs), fmtUs(cr.RTTus))
	}
	return t
}

// writeSVG draws, per contender per cell, two horizontal bars: cycles/s on
// the left (refused attempts/s extend it in a lighter shade, so its whole
// length is decisions/s) and lock cycles per second per Redis core on the
// right. One panel per kind of masters, each with its own linear scales.
func writeSVG(w io.Writer, r *report) error {
	const (
		width   = 1180
		left    = 190 // cell and contender labels
		colW    = 380 // each bar column
		gap     = 110 // value labels between and after the columns
		barH    = 11
		barGap  = 2
		groupGp = 10
		top     = 64
	)
	x2 := left + colW + gap // right column
	type panel struct {
		title string
		cells []*cellReport
	}
	var panels []panel
	for i := range r.Cells {
		cr := &r.Cells[i]
		t := panelTitle(cr)
		if len(panels) == 0 || panels[len(panels)-1].title != t {
			panels = append(panels, panel{title: t})
		}
		p := &panels[len(panels)-1]
		p.cells = append(p.cells, cr)
	}

	var body strings.Builder
	y := float64(top)
	for _, p := range panels {
		var maxV, maxCore float64
		for _, cr := range p.cells {
			for _, s := range cr.Contenders {
				maxV = math.Max(maxV, s.CyclesPerSec+s.TakenPerSec)
				maxCore = math.Max(maxCore, s.PerRedisCore)
			}
		}
		scale, scaleCore := niceMax(maxV), niceMax(maxCore)
		title := p.title
		if p.cells[0].N == 1 && !p.cells[0].Cluster && p.cells[0].LatencyUs == 0 && r.Ceiling != nil && r.Ceiling.CyclesPerSec > 0 {
			title += fmt.Sprintf(" (redis-benchmark -P %d ceiling: %s cycles/s)", r.Ceiling.Pipeline, fmtRate(r.Ceiling.CyclesPerSec))
		}
		fmt.Fprintf(&body, `<text x="10" y="%.0f" font-weight="bold">%s</text>`+"\n", y+14, html.EscapeString(title))
		fmt.Fprintf(&body, `<text x="%d" y="%.0f" font-size="11" fill="#444">cycles/s (lighter: refused attempts/s)</text>`+"\n", left, y+30)
		fmt.Fprintf(&body, `<text x="%d" y="%.0f" font-size="11" fill="#444">cycles/s per Redis core (1 / Redis CPU per cycle)</text>`+"\n", x2, y+30)
		y += 40
		panelTop := y
		var bars strings.Builder
		for _, cr := range p.cells {
			fmt.Fprintf(&bars, `<text x="10" y="%.0f" font-size="11">%s</text>`+"\n", y+barH-1, html.EscapeString(cellLabel(cr)))
			for _, s := range cr.Contenders {
				wc := colW * s.CyclesPerSec / scale
				wf := colW * s.TakenPerSec / scale
				fmt.Fprintf(&bars, `<text x="%d" y="%.0f" font-size="10" text-anchor="end" fill="#444">%s</text>`+"\n", left-6, y+barH-2, html.EscapeString(s.Name))
				fmt.Fprintf(&bars, `<rect x="%d" y="%.0f" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, wc, barH, colorOf(s.Name))
				if wf > 0 {
					fmt.Fprintf(&bars, `<rect x="%.1f" y="%.0f" width="%.1f" height="%d" fill="%s" fill-opacity="0.3"/>`+"\n", float64(left)+wc, y, wf, barH, colorOf(s.Name))
				}
				label := fmtRate(s.CyclesPerSec)
				if s.TakenPerSec > 0 {
					label += " +" + fmtRate(s.TakenPerSec)
				}
				if s.Errors > 0 {
					label += fmt.Sprintf(" ERRORS %d", s.Errors)
				}
				if s.Overlaps > 0 {
					label += fmt.Sprintf(" OVERLAPS %d", s.Overlaps)
				}
				fmt.Fprintf(&bars, `<text x="%.1f" y="%.0f" font-size="10">%s</text>`+"\n", float64(left)+wc+wf+4, y+barH-2, html.EscapeString(label))
				if s.PerRedisCore > 0 {
					wr := colW * s.PerRedisCore / scaleCore
					fmt.Fprintf(&bars, `<rect x="%d" y="%.0f" width="%.1f" height="%d" fill="%s" fill-opacity="0.75"/>`+"\n", x2, y, wr, barH, colorOf(s.Name))
					fmt.Fprintf(&bars, `<text x="%.1f" y="%.0f" font-size="10">%s</text>`+"\n", float64(x2)+wr+4, y+barH-2,
						html.EscapeString(fmt.Sprintf("%s (%s/cycle)", fmtRate(s.PerRedisCore), fmtUs(s.ServerCPU))))
				}
				y += barH + barGap
			}
			y += groupGp
		}
		// axes with five ticks each
		for _, ax := range []struct {
			x0    int
			scale float64
		}{{left, scale}, {x2, scaleCore}} {
			for i := 0; i <= 5; i++ {
				x := float64(ax.x0) + colW*float64(i)/5
				fmt.Fprintf(&body, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ccc" stroke-width="0.5"/>`+"\n", x, panelTop-4, x, y-groupGp+4)
				fmt.Fprintf(&body, `<text x="%.1f" y="%.0f" font-size="10" text-anchor="middle" fill="#666">%s</text>`+"\n", x, y-groupGp+16, fmtRate(ax.scale*float64(i)/5))
			}
		}
		body.WriteString(bars.String()) // after the grid, so bars cover it
		y += 24
	}

	var b strings.Builder
	height := int(y) + 10
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := "Lock + release cycles/s, and cycles per Redis core, per contender"
	if r.Meta.Smoke {
		title += ": SMOKE RUN, not a measurement"
	}
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="10" y="38" font-size="11" fill="#444">%s</text>`+"\n", html.EscapeString(fmt.Sprintf("%s, %s, %d CPUs; %s per contender per cell, %d repeat(s), median", r.Meta.Date, r.Meta.CPU, r.Meta.CPUs, r.Meta.Duration, r.Meta.Repeats)))
	x := 10
	for _, name := range r.order {
		fmt.Fprintf(&b, `<rect x="%d" y="46" width="10" height="10" fill="%s"/><text x="%d" y="55" font-size="11">%s</text>`+"\n", x, colorOf(name), x+14, html.EscapeString(name))
		x += 24 + 7*len(name)
	}
	b.WriteString(body.String())
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// cellLabel is a cell's name without what its panel title says.
func cellLabel(cr *cellReport) string {
	name := cr.Name
	if i := strings.Index(name, "-"); i >= 0 {
		name = name[i+1:]
	}
	if i := strings.Index(name, "-lat"); i >= 0 {
		name = name[:i]
	}
	return name
}
