package bench

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

// The bench's judging and load shaping are pure logic, tested here; the
// measuring itself is `make bench`, never a timed test.

func TestPercentileIsNearestRank(t *testing.T) {
	t.Parallel()
	values := make([]float64, 100)
	for i := range values {
		values[i] = float64(i + 1)
	}
	for _, c := range []struct{ p, want float64 }{{50, 50}, {95, 95}, {99, 99}, {100, 100}, {0, 1}} {
		if got := percentile(values, c.p); got != c.want {
			t.Errorf("p%.0f of 1..100 = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v, want 0", got)
	}
}

func TestDrainRatesCompareFirstAndLastTenth(t *testing.T) {
	t.Parallel()
	start := time.Now()
	var times []time.Time
	// 100 completions: the first 50 at 100/s, the last 50 at 50/s.
	for i := range 50 {
		times = append(times, start.Add(time.Duration(i)*10*time.Millisecond))
	}
	for i := range 50 {
		times = append(times, start.Add(time.Second+time.Duration(i)*20*time.Millisecond))
	}
	first, last := drainRates(times)
	if first != 100 || last != 50 {
		t.Errorf("drain rates = %v, %v msgs/s; want 100, 50", first, last)
	}
}

func TestJudgeCountsWhatTheProviderReceived(t *testing.T) {
	t.Parallel()
	l := benchLoad{scenario: "spread", tenants: 1, convs: 2, perConv: 3}
	// Messages 0, 2, 4 belong to conversation 0; 1, 3, 5 to conversation 1.
	start := time.Now()
	o := &offered{sent: make([]time.Time, 6), accepted: make([]time.Time, 6), start: start}
	for i := range o.sent {
		o.sent[i] = start
	}
	send := func(i int, after time.Duration) whatsapptest.Send {
		return whatsapptest.Send{To: conversationID(l.conv(i)), Text: messageID(i), At: start.Add(after)}
	}
	sends := []whatsapptest.Send{
		send(0, 10*time.Millisecond),
		send(4, 20*time.Millisecond), // overtakes message 2: an order violation
		send(2, 30*time.Millisecond),
		send(1, 40*time.Millisecond),
		send(1, 50*time.Millisecond), // sent twice: a duplicate
		send(3, 100*time.Millisecond),
		// message 5 never arrives: lost
	}
	r := judge(l, "river-plain", o, sends, start)
	if r.Messages != 6 || r.Conversations != 2 {
		t.Errorf("messages, conversations = %d, %d; want 6, 2", r.Messages, r.Conversations)
	}
	if r.Duplicates != 1 || r.OrderViolations != 1 || r.Lost != 1 {
		t.Errorf("duplicates, order violations, lost = %d, %d, %d; want 1, 1, 1", r.Duplicates, r.OrderViolations, r.Lost)
	}
	// Five distinct messages delivered, the last 100ms after the first offer.
	if r.Throughput != 50 || r.DurationS != 0.1 {
		t.Errorf("throughput %v msgs/s over %vs; want 50 over 0.1", r.Throughput, r.DurationS)
	}
	// Latencies (first delivery): 10, 20, 30, 40, 100 ms.
	if r.Latency.P50 != 30 || r.Latency.P99 != 100 {
		t.Errorf("latency p50 %v, p99 %v; want 30, 100", r.Latency.P50, r.Latency.P99)
	}
}

func TestOfferKeepsEachConversationInOrder(t *testing.T) {
	t.Parallel()
	for _, l := range []benchLoad{
		{scenario: "hot", tenants: 1, convs: 7, perConv: 20, concurrency: 3},
		{scenario: "latency", tenants: 1, convs: 3, rate: 400, duration: 100 * time.Millisecond, concurrency: 3},
	} {
		t.Run(l.scenario, func(t *testing.T) {
			t.Parallel()
			var (
				mu       sync.Mutex
				seen     = map[int][]int{} // conversation → message indexes in acceptance order
				attempts = map[int]int{}
			)
			o, err := offer(context.Background(), l, func(ctx context.Context, i int) error {
				mu.Lock()
				defer mu.Unlock()
				attempts[i]++
				if i == 5 && attempts[i] == 1 {
					return errRetry // offered again, still in order
				}
				seen[l.conv(i)] = append(seen[l.conv(i)], i)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for c, list := range seen {
				for k, i := range list {
					if i != c+k*l.convs {
						t.Fatalf("conversation %d accepted %v: not in order", c, list)
					}
				}
				total += len(list)
			}
			if total != l.messages() || o.retries.Load() != 1 {
				t.Errorf("accepted %d of %d with %d retries; want all, 1 retry", total, l.messages(), o.retries.Load())
			}
			for i, at := range o.accepted {
				if at.IsZero() || at.Before(o.sent[i]) {
					t.Fatalf("message %d: accepted %v, sent %v", i, at, o.sent[i])
				}
			}
		})
	}
}

func TestOfferStopsOnAnError(t *testing.T) {
	t.Parallel()
	l := benchLoad{scenario: "spread", tenants: 1, convs: 4, perConv: 50, concurrency: 2}
	boom := errors.New("400 Bad Request")
	_, err := offer(context.Background(), l, func(ctx context.Context, i int) error {
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("offer = %v, want the failure", err)
	}
}

func TestPickListKeepsKnownOrder(t *testing.T) {
	t.Parallel()
	got, err := pickList("--systems", "sql-floor, ordo", benchSystems)
	if err != nil || len(got) != 2 || got[0] != "ordo" || got[1] != "sql-floor" {
		t.Errorf("pickList = %v, %v; want [ordo sql-floor]", got, err)
	}
	if _, err := pickList("--scenario", "spread,nope", benchScenarios); err == nil {
		t.Error("an unknown scenario was accepted")
	}
}

func TestParseBaselineMessageMatchesTheRESTBody(t *testing.T) {
	t.Parallel()
	a, err := parseBaselineMessage("acme", restBody(7, 3))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"text":{"body":"m7"},"to":"15550000003","type":"text"}`
	if a.MessageID != "m7" || a.Conversation != conversationID(3) || string(a.Message) != want {
		t.Errorf("parsed %+v (message %s); want m7 to %s as %s", a, a.Message, conversationID(3), want)
	}
	if _, err := parseBaselineMessage("acme", []byte(`{"message_id":"x","conversation_id":"y"}`)); err == nil {
		t.Error("a message without type was accepted")
	}
}

// The latency warm-up's messages go to the measured conversations but never
// share an id with a measured message, and the judge does not count them.
func TestWarmupMessagesAreNeverJudged(t *testing.T) {
	l := benchLoad{scenario: "latency", tenants: 1, convs: 4, rate: 100, duration: time.Second}
	w := l
	w.warmup = true
	var got struct {
		MessageID      string `json:"message_id"`
		ConversationID string `json:"conversation_id"`
	}
	if err := json.Unmarshal(w.body(6), &got); err != nil {
		t.Fatal(err)
	}
	if got.MessageID != "w6" || got.ConversationID != conversationID(l.conv(6)) {
		t.Errorf("warm-up message 6 = %+v; want w6 to %s", got, conversationID(l.conv(6)))
	}
	if string(l.body(6)) == string(w.body(6)) {
		t.Error("the warm-up's message 6 is the measured message 6")
	}
	if i := messageIndex(got.MessageID); i != -1 {
		t.Errorf("messageIndex(%q) = %d; want -1 (not a measured message)", got.MessageID, i)
	}
}

func TestJudgeNoisySplitsBurstAndQuiet(t *testing.T) {
	t.Parallel()
	b := &benchEnv{env: &cli.Env{Stdout: io.Discard, Stderr: io.Discard}}
	start := time.Now()
	ph := &noisyPhase{name: "both", burst: map[string][]string{"c1": {"n3-0", "n3-1"}, "c2": {"n3-2"}},
		burstIDs:  map[string]bool{"n3-0": true, "n3-1": true, "n3-2": true},
		quietSent: map[string]time.Time{"q3-1-0": start}, quietOwner: map[string]int{"q3-1-0": 1}, quietConv: map[string]string{"q3-1-0": "c9"}}
	sends := []whatsapptest.Send{
		{To: "c1", Text: "n3-1", At: start},                              // out of order
		{To: "c9", Text: "q3-1-0", At: start.Add(40 * time.Millisecond)}, // the quiet message, 40 ms after its offer
		{To: "c1", Text: "n3-0", At: start.Add(500 * time.Millisecond)},
		{To: "c1", Text: "n3-0", At: start.Add(600 * time.Millisecond)}, // a duplicate
		{To: "c2", Text: "n3-2", At: start.Add(time.Second)},
	}
	res := benchResult{System: "ordo"}
	nr := &noisyResult{Quiet: []quietLatency{{Tenant: "quiet-1"}}}
	tp := b.judgeNoisy(&res, nr, ph, sends, 1)
	if tp != 2 { // 3 distinct burst sends over 1 s: 2 intervals
		t.Errorf("burst throughput = %v msgs/s, want 2", tp)
	}
	if res.OrderViolations == 0 || res.Duplicates != 1 || res.Lost != 0 {
		t.Errorf("order violations %d, duplicates %d, lost %d; want >0, 1, 0", res.OrderViolations, res.Duplicates, res.Lost)
	}
	if got := nr.Quiet[0].lat[1]; len(got) != 1 || got[0] != 40 {
		t.Errorf("quiet latencies during the burst = %v, want [40]", got)
	}
}

// The median of several rounds keeps every round's faults: a run that lost
// or duplicated a message in any round shows it, whatever the median's.
func TestMedianRoundKeepsEveryRoundsFaults(t *testing.T) {
	rounds := []benchResult{
		{Scenario: "spread", System: "ordo", Throughput: 900},
		{Scenario: "spread", System: "ordo", Throughput: 1100, Lost: 2},
		{Scenario: "spread", System: "ordo", Throughput: 1000, Duplicates: 1},
	}
	r := medianRound(rounds)
	if r.Throughput != 1000 || r.Lost != 2 || r.Duplicates != 1 || len(r.RoundThroughputs) != 3 || r.RoundThroughputs[1] != 1100 {
		t.Fatalf("median = %.0f msgs/s, lost %d, duplicates %d, rounds %v; want 1000, 2, 1, [900 1100 1000]", r.Throughput, r.Lost, r.Duplicates, r.RoundThroughputs)
	}
	lat := medianRound([]benchResult{
		{Scenario: "latency", Throughput: 500, Latency: benchLatency{P99: 50}},
		{Scenario: "latency", Throughput: 500, Latency: benchLatency{P99: 20}},
		{Scenario: "latency", Throughput: 499, Latency: benchLatency{P99: 200}},
	})
	if lat.Latency.P99 != 50 {
		t.Fatalf("latency median p99 = %.0f, want 50", lat.Latency.P99)
	}
	if one := medianRound(rounds[:1]); one.RoundThroughputs != nil {
		t.Fatalf("one round reports rounds %v", one.RoundThroughputs)
	}
}

// Each run appends its report to the results file under its own heading
// (date, commit, flags): the file keeps every run, the README none.
func TestAppendResults(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "RESULTS.md")
	for _, scenario := range []string{"hot", "spread"} {
		if err := appendResults(path, "abc1234", []string{"--scenario", scenario}, []byte("table of "+scenario+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Count(s, "\n## ") != 2 || strings.Count(s, ", commit abc1234\n") != 2 || !strings.Contains(s, `ARGS="--scenario hot"`) || !strings.Contains(s, "table of spread\n```") ||
		strings.Index(s, "table of hot") > strings.Index(s, "table of spread") {
		t.Fatalf("results file:\n%s\nwant both runs, in order, each with its commit and flags", s)
	}
}
