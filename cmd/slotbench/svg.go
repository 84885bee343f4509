package main

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
)

// svg renders hot-tx throughput and p99 latency against the number of
// clients, one line per target, as a self-contained SVG document.
func (r *report) svg() string {
	type point struct {
		clients   int
		rate, p99 float64
	}
	series := map[string][]point{}
	var clients []int
	for _, res := range r.Results {
		if res.Workload != wHotTx || res.Ops == 0 {
			continue
		}
		series[res.Target] = append(series[res.Target], point{res.Clients, res.Rate, res.P99Ms})
		if !slices.Contains(clients, res.Clients) {
			clients = append(clients, res.Clients)
		}
	}
	slices.Sort(clients)
	order := []string{"direct", "handwritten", "slotproxy"}
	colors := map[string]string{"direct": "#d62728", "handwritten": "#7f7f7f", "slotproxy": "#1f77b4"}
	labels := map[string]string{"direct": "direct (hot row)", "handwritten": "hand-written slotted upserts", "slotproxy": "through slotproxy"}

	const (
		W, H              = 960, 420
		panelW, panelH    = 380, 280
		left1, left2, top = 80, 560, 70
		tickLen           = 5
		font              = `font-family="sans-serif"`
	)
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", W, H, W, H)
	fmt.Fprintf(&sb, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	title := fmt.Sprintf("hot-tx: increment one hot row + point select + %.3gms work per transaction", r.Options.HoldMs)
	fmt.Fprintf(&sb, `<text x="%d" y="24" font-size="16" font-weight="bold" %s>%s</text>`+"\n", left1-50, font, html.EscapeString(title))
	fmt.Fprintf(&sb, `<text x="%d" y="44" font-size="12" fill="#555" %s>%s</text>`+"\n", left1-50, font, html.EscapeString(
		fmt.Sprintf("%s %s; %d rounds × %.3gs per target, alternating; slots %d", r.Env.Backend, r.Env.BackendVersion,
			r.Options.Rounds, r.Options.DurationS, r.Options.Slots)))

	if len(clients) == 0 {
		fmt.Fprintf(&sb, `<text x="%d" y="%d" font-size="14" %s>no hot-tx results</text>`+"\n", left1, top+40, font)
		sb.WriteString("</svg>\n")
		return sb.String()
	}
	xAt := func(left float64, c int) float64 {
		i := slices.Index(clients, c)
		if len(clients) == 1 {
			return left + panelW/2
		}
		return left + 30 + float64(i)*(panelW-60)/float64(len(clients)-1)
	}

	panel := func(left float64, name string, yOf func(point) float64, log bool, unit string) {
		// Scale.
		lo, hi := math.Inf(1), 0.0
		for _, pts := range series {
			for _, p := range pts {
				v := yOf(p)
				if v > 0 {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
		}
		if hi == 0 {
			lo, hi = 1, 10
		}
		var ticks []float64
		var y func(v float64) float64
		if log {
			a, b := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
			if b == a {
				b++
			}
			for e := a; e <= b; e++ {
				ticks = append(ticks, math.Pow(10, e))
			}
			y = func(v float64) float64 {
				v = max(v, math.Pow(10, a))
				return top + panelH - (math.Log10(v)-a)/(b-a)*panelH
			}
		} else {
			step := niceStep(hi / 5)
			yMax := math.Ceil(hi*1.05/step) * step
			for v := 0.0; v <= yMax+step/2; v += step {
				ticks = append(ticks, v)
			}
			y = func(v float64) float64 { return top + panelH - v/yMax*panelH }
		}
		// Frame, grid and ticks.
		fmt.Fprintf(&sb, `<text x="%.0f" y="%d" font-size="13" font-weight="bold" %s>%s</text>`+"\n", left, top-8, font, html.EscapeString(name))
		fmt.Fprintf(&sb, `<rect x="%.0f" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", left, top, panelW, panelH)
		for _, t := range ticks {
			ty := y(t)
			fmt.Fprintf(&sb, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", left, ty, left+panelW, ty)
			fmt.Fprintf(&sb, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#333"/>`+"\n", left-tickLen, ty, left, ty)
			fmt.Fprintf(&sb, `<text x="%.0f" y="%.1f" font-size="11" text-anchor="end" %s>%s</text>`+"\n", left-8, ty+4, font, axisLabel(t))
		}
		for _, c := range clients {
			x := xAt(left, c)
			fmt.Fprintf(&sb, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", x, top+panelH, x, top+panelH+tickLen)
			fmt.Fprintf(&sb, `<text x="%.1f" y="%d" font-size="11" text-anchor="middle" %s>%d</text>`+"\n", x, top+panelH+18, font, c)
		}
		fmt.Fprintf(&sb, `<text x="%.0f" y="%d" font-size="12" text-anchor="middle" %s>clients</text>`+"\n", left+panelW/2, top+panelH+36, font)
		fmt.Fprintf(&sb, `<text transform="translate(%.0f,%d) rotate(-90)" font-size="12" text-anchor="middle" %s>%s</text>`+"\n",
			left-58, top+panelH/2, font, html.EscapeString(unit))
		// Lines.
		for _, name := range order {
			pts := series[name]
			if len(pts) == 0 {
				continue
			}
			slices.SortFunc(pts, func(a, b point) int { return a.clients - b.clients })
			var path []string
			for _, p := range pts {
				path = append(path, fmt.Sprintf("%.1f,%.1f", xAt(left, p.clients), y(yOf(p))))
			}
			fmt.Fprintf(&sb, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(path, " "), colors[name])
			for _, p := range pts {
				fmt.Fprintf(&sb, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s, %d clients: %s %s</title></circle>`+"\n",
					xAt(left, p.clients), y(yOf(p)), colors[name], name, p.clients, axisLabel(yOf(p)), html.EscapeString(unit))
			}
		}
	}
	panel(left1, "Throughput (higher is better)", func(p point) float64 { return p.rate }, false, "transactions/s")
	panel(left2, "p99 latency (lower is better, log scale)", func(p point) float64 { return p.p99 }, true, "ms")

	// Legend.
	x := float64(left1)
	for _, name := range order {
		if len(series[name]) == 0 {
			continue
		}
		fmt.Fprintf(&sb, `<line x1="%.0f" y1="%d" x2="%.0f" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", x, H-22, x+24, H-22, colors[name])
		fmt.Fprintf(&sb, `<text x="%.0f" y="%d" font-size="12" %s>%s</text>`+"\n", x+30, H-18, font, html.EscapeString(labels[name]))
		x += 60 + 7*float64(len(labels[name]))
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
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

func axisLabel(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
	default:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
	}
}
