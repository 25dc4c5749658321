package bench

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

// benchResult is one system under one scenario: the contract's JSON line,
// with a few extra fields after the contract's own.
type benchResult struct {
	Scenario        string       `json:"scenario"`
	System          string       `json:"system"`
	Messages        int          `json:"messages"`
	Conversations   int          `json:"conversations"`
	DurationS       float64      `json:"duration_s"`
	Throughput      float64      `json:"throughput_msgs_s"`
	Latency         benchLatency `json:"latency_ms"`
	Duplicates      int          `json:"duplicates"`
	OrderViolations int          `json:"order_violations"`
	Lost            int          `json:"lost"`

	// OfferedRate is the latency scenario's offered messages per second.
	OfferedRate int `json:"offered_msgs_s,omitempty"`
	// Unexpected counts sends of texts that were never offered.
	Unexpected int `json:"unexpected,omitempty"`
	// IngestRetries counts offers repeated after a 429, 5xx or broken connection.
	IngestRetries int64 `json:"ingest_retries,omitempty"`
	// ProviderRequests counts every request the fake Cloud API received.
	ProviderRequests int `json:"provider_requests,omitempty"`
	// PeakRSSMB is the system process's VmHWM (the larger of its api and
	// worker processes in backlog).
	PeakRSSMB float64 `json:"peak_rss_mb,omitempty"`
	// CPU is what the run cost per message offered: the system's process
	// (its api and worker processes in backlog; none for sql-floor) and the
	// whole PostgreSQL cluster. Unlike throughput, it hardly depends on what
	// else runs on the machine.
	CPU *benchCPU `json:"cpu_ms_per_msg,omitempty"`
	// TxPerMsg is the database transactions ended (committed and rolled
	// back: pg_stat_database) per message over the scenario; every
	// statement outside a transaction is one, so it counts round trips.
	TxPerMsg float64 `json:"tx_per_msg,omitempty"`
	// WALKBPerMsg is the WAL the cluster wrote per message, in KB.
	WALKBPerMsg float64 `json:"wal_kb_per_msg,omitempty"`
	// Backlog: how long queueing took and what it cost (CPU also counts it),
	// and the drain's throughput over its first and last 10% of messages (by
	// provider receipt).
	IngestS    float64   `json:"ingest_s,omitempty"`
	IngestCPU  *benchCPU `json:"ingest_cpu_ms_per_msg,omitempty"`
	DrainStart float64   `json:"drain_start_msgs_s,omitempty"`
	DrainEnd   float64   `json:"drain_end_msgs_s,omitempty"`
	// Noisy is the noisy scenario's burst and per-quiet-tenant figures; its
	// latency_ms is the quiet tenants' during the burst, its throughput the
	// burst's with them.
	Noisy *noisyResult `json:"noisy,omitempty"`
	// Claim is the claim scenario's measurement (no messages).
	Claim *claimResult `json:"claim,omitempty"`
	// RoundThroughputs are the throughputs of every round with --rounds N
	// (this result is the median round; duplicates, order violations and
	// lost messages are summed over all of them).
	RoundThroughputs []float64 `json:"round_throughputs_msgs_s,omitempty"`
}

// medianRound returns the median of one system's rounds of one scenario —
// by throughput, or by p99 latency in latency, whose throughput is the
// offered rate — with every round's duplicates, order violations and lost
// messages added up: a bad round is never hidden by a good median.
func medianRound(rounds []benchResult) benchResult {
	if len(rounds) == 1 {
		return rounds[0]
	}
	sorted := slices.Clone(rounds)
	slices.SortFunc(sorted, func(a, b benchResult) int {
		if a.Scenario == "latency" {
			return cmp.Compare(a.Latency.P99, b.Latency.P99)
		}
		return cmp.Compare(a.Throughput, b.Throughput)
	})
	r := sorted[len(sorted)/2]
	r.Duplicates, r.OrderViolations, r.Lost, r.Unexpected = 0, 0, 0, 0
	r.RoundThroughputs = nil
	for _, x := range rounds {
		r.Duplicates += x.Duplicates
		r.OrderViolations += x.OrderViolations
		r.Lost += x.Lost
		r.Unexpected += x.Unexpected
		r.RoundThroughputs = append(r.RoundThroughputs, x.Throughput)
	}
	return r
}

// benchLatency is offer → provider receipt per message, in milliseconds.
type benchLatency struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// benchCPU is CPU milliseconds per message.
type benchCPU struct {
	System   float64 `json:"system"`
	Postgres float64 `json:"postgres"`
}

func cpuPerMessage(system, postgres time.Duration, messages int) *benchCPU {
	if messages == 0 {
		return nil
	}
	per := func(d time.Duration) float64 {
		return math.Round(ms(d)/float64(messages)*1000) / 1000
	}
	return &benchCPU{System: per(system), Postgres: per(postgres)}
}

// judge turns what the fake Cloud API received into a result: it, not the
// system, says what was delivered, when, how often and in what order.
func judge(l benchLoad, system string, o *offered, sends []whatsapptest.Send, from time.Time) benchResult {
	n := l.messages()
	expected := make(map[string][]string, l.convs)
	for i := range n {
		c := conversationID(l.conv(i))
		expected[c] = append(expected[c], messageID(i))
	}
	rep := whatsapptest.Check(sends, expected)
	received := make([]time.Time, n)
	for _, s := range sends {
		if i := messageIndex(s.Text); i >= 0 && i < n && received[i].IsZero() {
			received[i] = s.At
		}
	}
	r := judgeTimes(l, system, o, received, from)
	r.Duplicates, r.OrderViolations, r.Lost, r.Unexpected = rep.Duplicates, rep.OrderViolations, rep.Lost, rep.Unexpected
	return r
}

// judgeTimes computes throughput and latency from each message's completion
// (zero: never completed). Throughput is completed messages over the time
// from `from` (the first offer; in backlog, the drain's start) to the last
// completion.
func judgeTimes(l benchLoad, system string, o *offered, done []time.Time, from time.Time) benchResult {
	r := benchResult{Scenario: l.scenario, System: system, Messages: l.messages(), Conversations: l.convs, OfferedRate: l.rate, IngestRetries: o.retries.Load()}
	var (
		lat   []float64
		times []time.Time
	)
	for i, t := range done {
		if t.IsZero() {
			continue
		}
		lat = append(lat, ms(t.Sub(o.sent[i])))
		times = append(times, t)
	}
	r.Lost = l.messages() - len(times)
	if len(times) == 0 {
		return r
	}
	slices.Sort(lat)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	r.Latency = benchLatency{P50: round1(percentile(lat, 50)), P95: round1(percentile(lat, 95)), P99: round1(percentile(lat, 99))}
	d := times[len(times)-1].Sub(from).Seconds()
	r.DurationS = round2(d)
	if d > 0 {
		r.Throughput = round1(float64(len(times)) / d)
	}
	if l.backlog {
		r.DrainStart, r.DrainEnd = drainRates(times)
	}
	return r
}

// drainRates is the throughput over the first and the last 10% of
// completions (sorted).
func drainRates(times []time.Time) (start, end float64) {
	k := len(times) / 10
	if k < 2 {
		return 0, 0
	}
	rate := func(a, b time.Time) float64 {
		if d := b.Sub(a).Seconds(); d > 0 {
			return round1(float64(k-1) / d)
		}
		return 0
	}
	return rate(times[0], times[k-1]), rate(times[len(times)-k], times[len(times)-1])
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
func round2(v float64) float64 { return math.Round(v*100) / 100 }

// summary is a result on one line, for the progress log.
func (r benchResult) summary() string {
	s := fmt.Sprintf("%.0f msgs/s over %.1fs, p50/p95/p99 %.1f/%.1f/%.1f ms, duplicates %d, order violations %d, lost %d",
		r.Throughput, r.DurationS, r.Latency.P50, r.Latency.P95, r.Latency.P99, r.Duplicates, r.OrderViolations, r.Lost)
	if r.PeakRSSMB > 0 {
		s += fmt.Sprintf(", peak RSS %.0f MB", r.PeakRSSMB)
	}
	if r.CPU != nil {
		s += fmt.Sprintf(", CPU/msg %.2f ms system + %.2f ms postgres", r.CPU.System, r.CPU.Postgres)
	}
	if r.DrainStart > 0 {
		s += fmt.Sprintf(", drain %.0f → %.0f msgs/s", r.DrainStart, r.DrainEnd)
	}
	if r.IngestRetries > 0 {
		s += fmt.Sprintf(", %d ingest retries", r.IngestRetries)
	}
	return s
}

// printBenchTable writes the results, the backlog details and the
// throughput ratios.
// printRounds lists each round's throughput when a run had several
// (--rounds): the table shows the median round.
func printRounds(w io.Writer, results []benchResult) {
	var lines []string
	for _, r := range results {
		if len(r.RoundThroughputs) < 2 {
			continue
		}
		each := make([]string, len(r.RoundThroughputs))
		for i, t := range r.RoundThroughputs {
			each[i] = fmt.Sprintf("%.0f", t)
		}
		lines = append(lines, fmt.Sprintf("  %8s  %11s  %s", r.Scenario, r.System, strings.Join(each, ", ")))
	}
	if len(lines) > 0 {
		fmt.Fprintf(w, "\nrounds (msgs/s of each, in the order they ran; the table shows the median)\n%s\n", strings.Join(lines, "\n"))
	}
}

func printBenchTable(w io.Writer, results []benchResult) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if slices.ContainsFunc(results, func(r benchResult) bool { return r.Noisy == nil && r.Claim == nil }) {
		fmt.Fprintln(tw, "scenario\tsystem\tmessages\tconvs\tseconds\tmsgs/s\tp50 ms\tp95 ms\tp99 ms\tdup\torder\tlost\tRSS MB\tCPU ms/msg: system\tpostgres\ttx/msg\tWAL KB/msg\t")
	}
	for _, r := range results {
		if r.Noisy != nil || r.Claim != nil {
			continue // their own tables (printNoisy, printClaim)
		}
		rss, sysCPU, pgCPU := "-", "-", "-"
		if r.PeakRSSMB > 0 {
			rss = fmt.Sprintf("%.0f", r.PeakRSSMB)
		}
		if r.CPU != nil {
			pgCPU = fmt.Sprintf("%.2f", r.CPU.Postgres)
			if r.CPU.System > 0 {
				sysCPU = fmt.Sprintf("%.2f", r.CPU.System)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t%s\t%s\t%s\t%.2f\t%.1f\t\n",
			r.Scenario, r.System, r.Messages, r.Conversations, r.DurationS, r.Throughput,
			r.Latency.P50, r.Latency.P95, r.Latency.P99, r.Duplicates, r.OrderViolations, r.Lost, rss, sysCPU, pgCPU, r.TxPerMsg, r.WALKBPerMsg)
	}
	tw.Flush()
	printRounds(w, results)

	var backlog []benchResult
	for _, r := range results {
		if r.Scenario == "backlog" {
			backlog = append(backlog, r)
		}
	}
	if len(backlog) > 0 {
		fmt.Fprintln(w, "\nbacklog: queued first (workers off), then drained")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "system\tqueue s\tdrain s\tfirst 10% msgs/s\tlast 10% msgs/s\tlast/first\tRSS MB\tCPU ms/msg queueing: system\tpostgres\tdraining: system\tpostgres\t")
		for _, r := range backlog {
			cells := []string{"-", "-", "-", "-"}
			if r.IngestCPU != nil && r.CPU != nil {
				cells = []string{fmt.Sprintf("%.2f", r.IngestCPU.System), fmt.Sprintf("%.2f", r.IngestCPU.Postgres),
					fmt.Sprintf("%.2f", r.CPU.System-r.IngestCPU.System), fmt.Sprintf("%.2f", r.CPU.Postgres-r.IngestCPU.Postgres)}
			}
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.0f\t%.0f\t%s\t%.0f\t%s\t\n", r.System, r.IngestS, r.DurationS, r.DrainStart, r.DrainEnd,
				ratio(r.DrainEnd, r.DrainStart), r.PeakRSSMB, strings.Join(cells, "\t"))
		}
		tw.Flush()
	}

	printNoisy(w, results)
	printClaim(w, results)

	var rows []string
	for _, sc := range benchScenarios {
		o, ok := find(results, sc, "ordo")
		if !ok {
			continue
		}
		cells, any := []string{sc}, false
		for _, other := range []string{"river-plain", "redis-lock", "sql-floor"} {
			cell := "-"
			if x, ok := find(results, sc, other); ok {
				cell, any = ratio(o.Throughput, x.Throughput), true
			}
			cells = append(cells, cell)
		}
		if any {
			rows = append(rows, strings.Join(cells, "\t")+"\t")
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nthroughput ratios")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tordo / river-plain\tordo / redis-lock\tordo / sql-floor\t")
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	tw.Flush()
}

func find(results []benchResult, scenario, system string) (benchResult, bool) {
	for _, r := range results {
		if r.Scenario == scenario && r.System == system {
			return r, true
		}
	}
	return benchResult{}, false
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// printTargets checks the targets against this run's numbers.
func printTargets(w io.Writer, results []benchResult) {
	fmt.Fprintln(w, "\ntargets (this run)")
	check := func(ok bool, what, got string) {
		mark := "MISS"
		if ok {
			mark = "ok  "
		}
		fmt.Fprintf(w, "  [%s] %-58s %s\n", mark, what, got)
	}
	throughputRatio := func(sc, other string, want float64, what string) {
		o, ok1 := find(results, sc, "ordo")
		x, ok2 := find(results, sc, other)
		if ok1 && ok2 && x.Throughput > 0 {
			check(o.Throughput >= want*x.Throughput, what, ratio(o.Throughput, x.Throughput))
		}
	}
	throughputRatio("spread", "river-plain", 0.8, "spread: ordo ≥ 0.8 × river-plain")
	throughputRatio("hot", "redis-lock", 3, "hot: ordo ≥ 3 × redis-lock")
	if o, ok := find(results, "hot", "ordo"); ok {
		got := fmt.Sprintf("%d order violations, %d duplicates", o.OrderViolations, o.Duplicates)
		if x, ok := find(results, "hot", "redis-lock"); ok {
			got += fmt.Sprintf(" (redis-lock: %d, %d)", x.OrderViolations, x.Duplicates)
		}
		check(o.OrderViolations == 0 && o.Duplicates == 0, "hot: ordo has no order violation and no duplicate", got)
	}
	for _, sc := range []string{"spread", "hot"} {
		throughputRatio(sc, "sql-floor", 0.5, sc+": ordo ≥ 0.5 × sql-floor")
	}
	if o, ok := find(results, "latency", "ordo"); ok {
		check(o.Latency.P99 <= 100 && o.Lost == 0, fmt.Sprintf("latency: ordo p99 ≤ 100 ms at %d msgs/s offered", o.OfferedRate),
			fmt.Sprintf("p99 %.1f ms (it sent %.0f msgs/s)", o.Latency.P99, o.Throughput))
	}
	if o, ok := find(results, "backlog", "ordo"); ok {
		check(o.DrainStart > 0 && o.DrainEnd >= 0.9*o.DrainStart, "backlog: ordo's last 10% ≥ 0.9 × its first 10%", ratio(o.DrainEnd, o.DrainStart))
		check(o.PeakRSSMB > 0 && o.PeakRSSMB <= 300, "backlog: ordo's peak RSS ≤ 300 MB", fmt.Sprintf("%.0f MB", o.PeakRSSMB))
	}
	noisyTargets(results, check)
	var lost []string
	for _, r := range results {
		if r.System == "ordo" && (r.Lost > 0 || r.Duplicates > 0 || r.OrderViolations > 0) {
			lost = append(lost, r.Scenario)
		}
	}
	check(len(lost) == 0, "ordo: nothing lost, duplicated or out of order anywhere", strings.Join(lost, " "))
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
