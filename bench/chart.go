package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

var contenderColors = map[string]string{
	"redlock":        "#d62728",
	"redlock-single": "#ff7f0e",
	"redsync":        "#1f77b4",
	"redislock":      "#2ca02c",
}

func colorOf(name string) string {
	if c, ok := contenderColors[name]; ok {
		return c
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

// writeSVG draws horizontal bars of cycles/s per contender per cell, one
// panel per number of masters with its own linear scale; failed attempts/s
// extend each bar in a lighter shade, so a bar's whole length is attempts/s.
func writeSVG(w io.Writer, r *report) error {
	const (
		width   = 960
		left    = 170 // cell and contender labels
		right   = 120 // value labels
		barH    = 11
		barGap  = 2
		groupGp = 10
		top     = 64
	)
	plotW := float64(width - left - right)
	type panel struct {
		n     int
		cells []*cellReport
	}
	var panels []panel
	for i := range r.Cells {
		cr := &r.Cells[i]
		if len(panels) == 0 || panels[len(panels)-1].n != cr.N {
			panels = append(panels, panel{n: cr.N})
		}
		p := &panels[len(panels)-1]
		p.cells = append(p.cells, cr)
	}

	var body strings.Builder
	y := float64(top)
	for _, p := range panels {
		var maxV float64
		for _, cr := range p.cells {
			for _, s := range cr.Contenders {
				maxV = math.Max(maxV, s.CyclesPerSec+s.FailedPerSec)
			}
		}
		scale := niceMax(maxV)
		title := fmt.Sprintf("N = %d master", p.n)
		if p.n != 1 {
			title += "s"
		}
		if p.n == 1 && r.Ceiling != nil && r.Ceiling.CyclesPerSec > 0 {
			title += fmt.Sprintf(" (redis-benchmark -P %d ceiling: %s cycles/s)", r.Ceiling.Pipeline, fmtRate(r.Ceiling.CyclesPerSec))
		}
		fmt.Fprintf(&body, `<text x="10" y="%.0f" font-weight="bold">%s</text>`+"\n", y+14, html.EscapeString(title))
		y += 26
		panelTop := y
		var bars strings.Builder
		for _, cr := range p.cells {
			fmt.Fprintf(&bars, `<text x="10" y="%.0f" font-size="11">%s</text>`+"\n", y+barH-1, html.EscapeString(strings.TrimPrefix(cr.Name, fmt.Sprintf("n%d-", cr.N))))
			for _, s := range cr.Contenders {
				wc := plotW * s.CyclesPerSec / scale
				wf := plotW * s.FailedPerSec / scale
				fmt.Fprintf(&bars, `<text x="%d" y="%.0f" font-size="10" text-anchor="end" fill="#444">%s</text>`+"\n", left-6, y+barH-2, html.EscapeString(s.Name))
				fmt.Fprintf(&bars, `<rect x="%d" y="%.0f" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, wc, barH, colorOf(s.Name))
				if wf > 0 {
					fmt.Fprintf(&bars, `<rect x="%.1f" y="%.0f" width="%.1f" height="%d" fill="%s" fill-opacity="0.3"/>`+"\n", float64(left)+wc, y, wf, barH, colorOf(s.Name))
				}
				label := fmtRate(s.CyclesPerSec)
				if s.FailedPerSec > 0 {
					label += " +" + fmtRate(s.FailedPerSec) + " failed"
				}
				if s.Overlaps > 0 {
					label += fmt.Sprintf(" OVERLAPS %d", s.Overlaps)
				}
				fmt.Fprintf(&bars, `<text x="%.1f" y="%.0f" font-size="10">%s</text>`+"\n", float64(left)+wc+wf+4, y+barH-2, html.EscapeString(label))
				y += barH + barGap
			}
			y += groupGp
		}
		// axis with five ticks
		for i := 0; i <= 5; i++ {
			x := float64(left) + plotW*float64(i)/5
			fmt.Fprintf(&body, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ccc" stroke-width="0.5"/>`+"\n", x, panelTop-4, x, y-groupGp+4)
			fmt.Fprintf(&body, `<text x="%.1f" y="%.0f" font-size="10" text-anchor="middle" fill="#666">%s</text>`+"\n", x, y-groupGp+16, fmtRate(scale*float64(i)/5))
		}
		body.WriteString(bars.String()) // after the grid, so bars cover it
		y += 24
	}

	var b strings.Builder
	height := int(y) + 10
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := "Lock + release cycles/s per contender (lighter: failed attempts/s)"
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
