package chaos

// The soak's plot, drawn with gonum.org/v1/plot: a well-kept pure-Go
// library from the module proxy, so the plot needs nothing installed on
// the machine (no gnuplot, no fonts: it embeds its own) and draws the same
// wherever the run runs.

import (
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// soakPanels groups the series into the plot's panels, by name prefix.
var soakPanels = []struct {
	title, yLabel string
	prefixes      []string
}{
	{"RSS per process", "MB", []string{"rss "}},
	{"goroutines per process", "goroutines", []string{"goroutines "}},
	{"open files per process", "files", []string{"open files "}},
	{"connections per process", "connections", []string{"connections ", "database connections "}},
	{"table and index bytes per stored message", "bytes", []string{"table bytes", "index bytes"}},
	{"dead tuples per 100 live rows", "%", []string{"dead tuples"}},
	{"p99 latency", "ms", []string{"p99 "}},
}

// writeSoakPlot draws the series, each panel against the minutes of the
// run, as a PNG.
func writeSoakPlot(w io.Writer, series []soakSeries, everyMinutes float64) error {
	const cols = 2
	rows := (len(soakPanels) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, panel := range soakPanels {
		p := plot.New()
		p.Title.Text = panel.title
		p.X.Label.Text = "minutes"
		p.Y.Label.Text = panel.yLabel
		p.Y.Min = 0
		p.Legend.Top = true
		n := 0
		for _, s := range series {
			if !hasAnyPrefix(s.name, panel.prefixes) {
				continue
			}
			var xys plotter.XYs
			for j, v := range s.values {
				if !math.IsNaN(v) {
					xys = append(xys, plotter.XY{X: float64(j+1) * everyMinutes, Y: v})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return err
			}
			l.Color = plotutil.Color(n)
			l.Width = vg.Points(1.2)
			p.Add(l)
			p.Legend.Add(s.name, l)
			n++
		}
		plots[i/cols][i%cols] = p
	}
	img := vgimg.New(vg.Points(1100), vg.Points(float64(rows)*330))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(20), PadY: vg.Points(20),
		PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	canvases := plot.Align(plots, tiles, dc)
	for j := range plots {
		for i := range plots[j] {
			if plots[j][i] != nil {
				plots[j][i].Draw(canvases[j][i])
			}
		}
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
