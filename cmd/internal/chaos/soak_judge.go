package chaos

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// soakSeries is one quantity over the soak, and how much it may grow.
type soakSeries struct {
	name, unit string
	values     []float64 // per sample; NaN where it could not be read
	// A series is flat or bounded when the median of its last third is at
	// most factor times the median of its first third, plus slack; or,
	// when limit is set, at most limit (a bound the process is configured
	// with, such as its pool's size; NaN: that bound was never read).
	factor, slack float64
	limit         float64
}

// soakVerdict is a series' judgement.
type soakVerdict struct {
	series             soakSeries
	first, last, slope float64 // medians of the first and last thirds; least-squares slope per hour
	ok                 bool
	why                string
}

// soakSeriesOf turns the samples into the judged series. Table and index
// sizes are judged per stored message: ordo keeps every message's record
// for ever (accepted once, for ever), so the bytes grow with the messages;
// what must not grow is the bytes each one takes (bloat).
// DeadTuplesPerLiveMax bounds the soak's dead tuples per 100 live rows:
// autovacuum's default scale factor (20) and what accrues between its
// rounds (a minute apart).
const DeadTuplesPerLiveMax = 50

func soakSeriesOf(samples []soakSample) []soakSeries {
	var names []string
	for _, s := range samples {
		for n := range s.procs {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	val := func(f func(s soakSample) float64) []float64 {
		out := make([]float64, len(samples))
		for i, s := range samples {
			out[i] = f(s)
		}
		return out
	}
	pos := func(v int64, scale float64) float64 {
		if v < 0 {
			return math.NaN()
		}
		return float64(v) / scale
	}
	diff := func(v int64, less ...int64) float64 {
		for _, l := range less {
			if l < 0 {
				return math.NaN()
			}
			v -= l
		}
		return pos(v, 1)
	}
	var out []soakSeries
	for _, n := range names {
		poolMax := math.NaN()
		for _, s := range samples {
			if p, ok := s.procs[n]; ok && p.poolMax > 0 {
				poolMax = max(float64(p.poolMax), nanToZero(poolMax))
			}
		}
		// Goroutines and open files are judged without what the clients
		// and the load legitimately hold at the moment of the sample (one
		// goroutine and one file per open connection, one goroutine more
		// per request in flight, one file per pool connection): on a
		// slower machine there are more of those, with nothing leaked
		// (soak_conns.go). What they hold is judged on its own: every
		// connection the process keeps is one a client keeps too, and the
		// pool stays within its size.
		out = append(out,
			soakSeries{name: "rss " + n, unit: "MB", factor: 1.5, slack: 8,
				values: val(func(s soakSample) float64 { return pos(s.procs[n].rssBytes, 1<<20) })},
			soakSeries{name: "goroutines " + n + " beyond connections and requests", unit: "", factor: 1.5, slack: 20,
				values: val(func(s soakSample) float64 {
					p := s.procs[n]
					return diff(p.goroutines, p.conns, p.inFlight)
				})},
			soakSeries{name: "open files " + n + " beyond connections", unit: "", factor: 1.5, slack: 10,
				values: val(func(s soakSample) float64 {
					p := s.procs[n]
					return diff(p.openFiles, p.conns, p.poolConns)
				})},
			soakSeries{name: "connections " + n + " no client holds", unit: "", factor: 1.5, slack: 10,
				values: val(func(s soakSample) float64 {
					p := s.procs[n]
					if p.conns < 0 || p.clientConns < 0 {
						return math.NaN()
					}
					return float64(max(0, p.conns-p.clientConns))
				})},
			soakSeries{name: "database connections " + n, unit: "", limit: poolMax,
				values: val(func(s soakSample) float64 { return pos(s.procs[n].poolConns, 1) })})
	}
	perMsg := func(b, m int64) float64 {
		if b < 0 || m <= 0 {
			return math.NaN()
		}
		return float64(b) / float64(m)
	}
	out = append(out,
		soakSeries{name: "table bytes per message", unit: "B", factor: 1.5, slack: 200,
			values: val(func(s soakSample) float64 { return perMsg(s.tableBytes, s.messages) })},
		soakSeries{name: "index bytes per message", unit: "B", factor: 1.5, slack: 200,
			values: val(func(s soakSample) float64 { return perMsg(s.indexBytes, s.messages) })},
		// Dead tuples grow with the tables until autovacuum's scale
		// factor (20% of a table's rows) starts a vacuum: an hour's
		// tables grow all along (nothing is past its retention), so the
		// count saw-tooths ever higher (soak of 2026-11-27 11:17: 4,153 in
		// the first third, 29,816 in the last, a failure judged by count).
		// What is a problem — vacuum not keeping up, or held back by an
		// old snapshot — shows as dead tuples beyond autovacuum's share of
		// the live rows (every row of ordo's is updated a few times).
		soakSeries{name: "dead tuples per 100 live rows", unit: "%", limit: DeadTuplesPerLiveMax,
			values: val(func(s soakSample) float64 { return 100 * perMsg(s.deadTuples, s.liveTuples) })},
		soakSeries{name: "p99 accept", unit: "ms", factor: 2, slack: 250,
			values: val(func(s soakSample) float64 { return float64(s.p99Accept) / float64(time.Millisecond) })},
		soakSeries{name: "p99 offer to send", unit: "ms", factor: 2, slack: 500,
			values: val(func(s soakSample) float64 { return float64(s.p99Send) / float64(time.Millisecond) })},
	)
	return out
}

// judgeSoakSeries says whether a series stayed flat or bounded; every
// sample is one SoakSampleEvery apart.
func judgeSoakSeries(s soakSeries, every time.Duration) soakVerdict {
	v := soakVerdict{series: s}
	n := len(s.values)
	third := n / 3
	if third < 2 {
		v.why = fmt.Sprintf("%d samples: too few to judge (6 at least)", n)
		return v
	}
	v.first, v.last = median(s.values[:third]), median(s.values[n-third:])
	v.slope = slopePerHour(s.values, every)
	if math.IsNaN(v.first) || math.IsNaN(v.last) {
		v.why = "not read in the first or the last third"
		return v
	}
	bound := s.factor*v.first + s.slack
	v.why = fmt.Sprintf("last third %s ≤ %s (%.1f× first third %s + %s)", fmtUnit(v.last, s.unit), fmtUnit(bound, s.unit), s.factor, fmtUnit(v.first, s.unit), fmtUnit(s.slack, s.unit))
	if math.IsNaN(s.limit) {
		v.why = "its bound was never read"
		return v
	}
	if s.limit > 0 {
		bound = s.limit
		v.why = fmt.Sprintf("last third %s ≤ %s (the configured bound)", fmtUnit(v.last, s.unit), fmtUnit(bound, s.unit))
	}
	v.ok = v.last <= bound
	if !v.ok {
		v.why = strings.Replace(v.why, "≤", ">", 1)
	}
	return v
}

func fmtUnit(x float64, unit string) string {
	switch {
	case unit == "":
		return fmt.Sprintf("%.0f", x)
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%.0f %s", x, unit)
	}
	return fmt.Sprintf("%.1f %s", x, unit)
}

func nanToZero(x float64) float64 {
	if math.IsNaN(x) {
		return 0
	}
	return x
}

// median of the values that are not NaN; NaN if none.
func median(xs []float64) float64 {
	var s []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// slopePerHour is the least-squares slope of the values that are not NaN.
func slopePerHour(xs []float64, every time.Duration) float64 {
	var n, sx, sy, sxx, sxy float64
	for i, y := range xs {
		if math.IsNaN(y) {
			continue
		}
		x := float64(i) * every.Hours()
		n++
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	d := n*sxx - sx*sx
	if n < 2 || d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// soakReport is what a soak writes: the samples, the verdicts, the run's
// own summary.
type soakReport struct {
	cfg      Config
	started  time.Time
	samples  []soakSample
	verdicts []soakVerdict
	summary  string // the crash run's counts and its "N passed, N failed"
}

// writeMarkdown writes the report as a markdown table.
func (sr soakReport) writeMarkdown(w io.Writer) {
	cfg := sr.cfg
	fmt.Fprintf(w, "# ordo soak, %s\n\n", sr.started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "seed %d; %s of load: REST clients at %.1f msg/s and an SQL application in batches of %d (about %.1f msg/s); %d workers, %d tenants, %d conversations; a sample every %s.\n\n",
		cfg.Seed, cfg.Duration, cfg.Rate, cfg.SQLBatch, float64(sqlBatchers*cfg.SQLBatch)*3/4, cfg.Workers, cfg.Tenants, cfg.Conversations, cfg.SoakSampleEvery)
	fmt.Fprintf(w, "```\n%s\n```\n\n", strings.TrimSpace(sr.summary))
	fmt.Fprintln(w, "## Verdicts\n\n| series | first third | last third | slope per hour | verdict |\n|---|---:|---:|---:|---|")
	passed := 0
	for _, v := range sr.verdicts {
		verdict := "FAIL"
		if v.ok {
			verdict, passed = "flat or bounded", passed+1
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s: %s |\n", v.series.name, fmtUnit(v.first, v.series.unit), fmtUnit(v.last, v.series.unit),
			fmtUnit(v.slope, v.series.unit), verdict, v.why)
	}
	fmt.Fprintf(w, "\n%d passed, %d failed\n\n", passed, len(sr.verdicts)-passed)

	fmt.Fprintln(w, "## Samples\n\nRSS in MB, goroutines (gor), open files (fds), connections accepted and held by the process / by the run's clients at their end (conns), HTTP requests in flight (req) and database pool connections (pool) per process (– while it was down); sizes in MB; over the minute before the sample: the REST copies answered 2xx (a message is offered in 1 to 3 copies) and the p99 of their wait, the texts first delivered at the provider and the p99 from their message's offer; the machine's one-minute load average.")
	var names []string
	if len(sr.samples) > 0 {
		names = sortedKeys(sr.samples[len(sr.samples)-1].procs)
	}
	head := []string{"min"}
	for _, n := range names {
		head = append(head, n+" rss", n+" gor", n+" fds", n+" conns", n+" req", n+" pool")
	}
	head = append(head, "tables MB", "indexes MB", "messages", "dead tuples", "REST 2xx", "p99 accept", "first sends", "p99 send", "load")
	fmt.Fprintf(w, "\n| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---:|", len(head)))
	num := func(x int64) string {
		if x < 0 {
			return "–"
		}
		return fmt.Sprint(x)
	}
	mb := func(x int64) string {
		if x < 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f", float64(x)/(1<<20))
	}
	for _, s := range sr.samples {
		row := []string{fmt.Sprintf("%.0f", s.at.Minutes())}
		for _, n := range names {
			p, ok := s.procs[n]
			if !ok {
				p = unreadProc
			}
			conns := num(p.conns)
			if p.conns >= 0 {
				conns += "/" + num(p.clientConns)
			}
			row = append(row, mb(p.rssBytes), num(p.goroutines), num(p.openFiles), conns, num(p.inFlight), num(p.poolConns))
		}
		row = append(row, mb(s.tableBytes), mb(s.indexBytes), num(s.messages), num(s.deadTuples),
			fmt.Sprint(s.accepted), fmt.Sprint(s.p99Accept.Milliseconds()), fmt.Sprint(s.sent), fmt.Sprint(s.p99Send.Milliseconds()),
			fmt.Sprintf("%.1f", s.load1))
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}
