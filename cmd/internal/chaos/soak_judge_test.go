package chaos

import (
	"bytes"
	"image/png"
	"math"
	"strings"
	"testing"
	"time"
)

// TestJudgeSoakSeries: a flat, a noisy-but-bounded and a sawtooth series
// pass; a leak fails; too few samples fail rather than pass.
func TestJudgeSoakSeries(t *testing.T) {
	t.Parallel()
	ramp := func(n int, from, step float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = from + step*float64(i)
		}
		return out
	}
	saw := make([]float64, 60)
	for i := range saw {
		saw[i] = 40 + float64(i%7)*3 // a worker killed and restarted every few minutes
	}
	for _, tc := range []struct {
		name   string
		values []float64
		ok     bool
	}{
		{"flat", ramp(60, 50, 0), true},
		{"sawtooth", saw, true},
		{"bounded growth then flat", append(ramp(20, 30, 1), ramp(40, 50, 0)...), true},
		{"a leak: 1 MB a minute", ramp(60, 30, 1), false},
		{"missing readings in the middle", append(append(ramp(20, 30, 0), math.NaN(), math.NaN()), ramp(38, 30, 0)...), true},
		{"too few samples", ramp(5, 30, 0), false},
		{"never read at the end", append(ramp(40, 30, 0), []float64{math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()}...), false},
	} {
		v := judgeSoakSeries(soakSeries{name: tc.name, unit: "MB", factor: 1.5, slack: 8, values: tc.values}, time.Minute)
		if v.ok != tc.ok {
			t.Errorf("%s: ok %v, want %v (%s)", tc.name, v.ok, tc.ok, v.why)
		}
	}
	if v := judgeSoakSeries(soakSeries{values: ramp(60, 30, 1)}, time.Minute); math.Abs(v.slope-60) > 0.01 {
		t.Errorf("slope of 1 a minute: %v per hour, want 60", v.slope)
	}
}

// TestSoakReport: the table names every process and series, and the plot
// is a PNG.
func TestSoakReport(t *testing.T) {
	t.Parallel()
	var samples []soakSample
	for i := range 9 {
		samples = append(samples, soakSample{
			at:         time.Duration(i+1) * time.Minute,
			procs:      map[string]soakProc{"api": {40 << 20, 30, 12}, "worker-1": {50 << 20, 80, 20}},
			tableBytes: int64(i+1) << 20, indexBytes: int64(i+1) << 19, messages: int64(i+1) * 1000, deadTuples: 100,
			p99Accept: 20 * time.Millisecond, p99Send: 300 * time.Millisecond, accepted: 2000, sent: 2000,
		})
	}
	samples[4].procs["worker-1"] = soakProc{-1, -1, -1} // restarting
	series := soakSeriesOf(samples)
	sr := soakReport{cfg: Config{Seed: 1, Duration: 9 * time.Minute, Rate: 30, SoakSampleEvery: time.Minute}, samples: samples, summary: "1 passed, 0 failed"}
	for _, s := range series {
		sr.verdicts = append(sr.verdicts, judgeSoakSeries(s, time.Minute))
	}
	var md bytes.Buffer
	sr.writeMarkdown(&md)
	for _, want := range []string{"rss worker-1", "goroutines api", "open files api", "table bytes per message", "dead tuples", "p99 offer to send", "| 5 |", "–", "passed, 0 failed"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
	var img bytes.Buffer
	if err := writeSoakPlot(&img, series, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&img); err != nil {
		t.Fatalf("plot is not a PNG: %v", err)
	}
}
