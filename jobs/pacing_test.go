package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/tenants"
)

// secondRunner starts another worker process's runner on b's database: its
// own pool and River client, the same test clocks as jobstest's.
func secondRunner(t *testing.T, b *jobstest.Bundle, workers int, onSend func()) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, b.URL+"&pool_max_conns="+strconv.Itoa(workers+10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	r, err := jobs.NewRunner(pool, jobs.Config{
		Workers: workers, HandlerTimeout: 2 * time.Second, SendTimeout: 2 * time.Second, Lease: 4 * time.Second,
		RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, DrainErrorDelay: 100 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		ReconcileWait:     300 * time.Millisecond, WhatsAppAPIURL: b.WhatsApp.URL(),
	}, b.Tenants, b.Vault, b.Logger)
	if err != nil {
		t.Fatal(err)
	}
	jobs.SetHooks(r, nil, func(int64) { onSend() })
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Stop(ctx)
	})
}

// A 200 msg/s offered load over many conversations of one phone number,
// drained by two worker processes, reaches the Cloud API at the number's 80
// msg/s: the pacing lives in Postgres, so two processes share one budget.
//
// Judged on the times the sends were let go (each step's start, on the
// database's one clock, which ordo.reserve_send spaces 1/send_rate apart
// with a small tolerance: at most a few over the rate in any second, however
// late a drain comes back for its slot) and, loosely, on the fake Cloud API's
// receipt times, which also carry this test process's own scheduling (a
// send's way from its start to its receipt is not free under make test).
// Two budgets instead of one would show about twice the rate in both.
func TestPacingHoldsRateAcrossTwoRunners(t *testing.T) {
	t.Parallel()
	const (
		rate    = 80 // the tenant's default send_rate
		offered = 200
		load    = 3 * time.Second
		convs   = 60
	)
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{Workers: 10}})
	var sentBy [2]atomic.Int64
	jobs.SetHooks(b.Runner, nil, func(int64) { sentBy[0].Add(1) })
	b.Start()
	secondRunner(t, b, 10, func() { sentBy[1].Add(1) })

	tick := time.NewTicker(time.Second / offered)
	defer tick.Stop()
	next := make([]int, convs)
	for i, end := 0, time.Now().Add(load); time.Now().Before(end); i++ {
		<-tick.C
		c := i % convs
		conv := fmt.Sprintf("1555%04d", c)
		b.Ingest(conv, fmt.Sprintf("%s-%d", conv, next[c]), fmt.Sprintf("%s #%d", conv, next[c]))
		next[c]++
	}
	// The load took 3s; by now sends have run at the paced rate for about
	// as long. Measure a 3s window from the first send.
	first := b.WhatsApp.Sends()[0].At
	time.Sleep(time.Until(first.Add(load + 200*time.Millisecond)))

	// busiest counts the sends in the busiest second of at (sorted), and
	// the average rate over load from the first.
	busiest := func(at []time.Time) (most int, avg float64) {
		sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
		n := 0
		for i, j := 0, 0; i < len(at); i++ {
			for at[i].Sub(at[j]) >= time.Second {
				j++
			}
			most = max(most, i-j+1)
			if at[i].Sub(at[0]) < load {
				n++
			}
		}
		return most, float64(n) / load.Seconds()
	}
	var received []time.Time
	perConv := map[string][]int{}
	for _, s := range b.WhatsApp.Sends() {
		received = append(received, s.At)
		var n int
		_, _ = fmt.Sscanf(s.Text[strings.Index(s.Text, "#")+1:], "%d", &n)
		perConv[s.To] = append(perConv[s.To], n)
	}
	var started []time.Time
	rows, err := b.Pool.Query(context.Background(), `SELECT started_at FROM ordo.steps WHERE kind = 'send'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		started = append(started, at)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	mostStarted, avg := busiest(started)
	mostReceived, avgReceived := busiest(received)
	t.Logf("offered %d msg/s; started %.1f msg/s over %s, busiest second %d; received %.1f msg/s, busiest second %d; runner sends %d and %d",
		offered, avg, load, mostStarted, avgReceived, mostReceived, sentBy[0].Load(), sentBy[1].Load())
	if avg > rate*1.05 || mostStarted > rate+rate/10 {
		t.Fatalf("sends started at %.1f msg/s on average and %d in the busiest second; the number's rate is %d", avg, mostStarted, rate)
	}
	if mostReceived > rate+rate/4 {
		t.Fatalf("the Cloud API received %d sends in one second; the number's rate is %d", mostReceived, rate)
	}
	if avg < rate/20 {
		// Only a sanity check that a backlog drains at all: on a starved
		// CPU (make test runs the crash run's processes beside this one)
		// the drains cannot keep up with the rate. TestReserveSendSpacing
		// pins the slots themselves.
		t.Fatalf("sent only %.1f msg/s with a backlog", avg)
	}
	if sentBy[0].Load() < int64(len(started))/10 || sentBy[1].Load() < int64(len(started))/10 {
		t.Fatalf("runner sends %d and %d: both processes must have drained", sentBy[0].Load(), sentBy[1].Load())
	}
	for conv, ns := range perConv {
		for i, n := range ns {
			if n != i {
				t.Fatalf("%s: sends %v out of order or duplicated", conv, ns)
			}
		}
	}
}

// The pair gap spaces the sends to one user, and only to that user: two
// conversations each get their messages spaced, interleaved with the other's.
func TestPairGapSpacesSendsToOneUser(t *testing.T) {
	t.Parallel()
	const gap = 400 * time.Millisecond
	b := jobstest.Setup(t, jobstest.Options{})
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET pair_gap_ms = $1`, gap.Milliseconds()); err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		b.Ingest("u1", fmt.Sprintf("u1-%d", k), fmt.Sprintf("u1 #%d", k))
		b.Ingest("u2", fmt.Sprintf("u2-%d", k), fmt.Sprintf("u2 #%d", k))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(ctx, 6); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"u1", "u2"} {
		sends := b.WhatsApp.SendsTo(user)
		for i := 1; i < len(sends); i++ {
			// The gap runs from a send's answer, which the fake gives after
			// recording it: arrivals are at least the gap apart.
			if d := sends[i].At.Sub(sends[i-1].At); d < gap {
				t.Fatalf("%s: sends %d and %d only %s apart; the pair gap is %s", user, i-1, i, d, gap)
			}
		}
	}
	u1, u2 := b.WhatsApp.SendsTo("u1"), b.WhatsApp.SendsTo("u2")
	if !u2[0].At.Before(u1[1].At) || !u1[0].At.Before(u2[1].At) {
		t.Fatal("one user's gap held up the other user's sends")
	}
}

// attemptLog records every request the fake Cloud API receives, by text.
type attemptLog struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (l *attemptLog) add(text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at == nil {
		l.at = map[string][]time.Time{}
	}
	l.at[text] = append(l.at[text], time.Now())
}

func (l *attemptLog) get(text string) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at[text]...)
}

// Meta's throughput error (130429, here with Retry-After: 1) slows the whole
// phone number: the failed send and every other conversation's next send
// wait out the second, and then go.
func TestThrottledSlowsTheWholeNumber(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{})
	var log attemptLog
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		log.add(req.Text)
		if req.Text == "throttled" && attempt == 1 {
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 130429, RetryAfter: "1"}
		}
		return whatsapptest.Default(req, attempt)
	})
	b.Ingest("c1", "m1", "throttled")
	b.WaitFor("the throttled attempt", 5*time.Second, func() bool {
		return len(log.get("throttled")) == 1 && b.Count(`SELECT count(*) FROM ordo.send_pacing WHERE throttled_until IS NOT NULL`) == 1
	})
	throttledAt := log.get("throttled")[0]
	b.Ingest("c2", "n1", "other conversation")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"throttled", "other conversation"} {
		at := log.get(text)
		if d := at[len(at)-1].Sub(throttledAt); d < 900*time.Millisecond {
			t.Errorf("%q went %s after the number was throttled for 1s", text, d)
		}
	}
	b.WaitFor("m1 done", 5*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 2 })
	m, err := b.Engine.Message(ctx, b.Tenant.ID, "m1")
	// The throttle stays in the step's history (the admin page's
	// timeline); the view's last_error is only for a step not done.
	throttleKept := b.Count(`SELECT count(*) FROM ordo.steps s JOIN ordo.messages m ON m.id = s.message_pk
		WHERE m.message_id = 'm1' AND s.errors::text LIKE '%130429%'`) == 1
	if err != nil || m.Status != "done" || m.Steps[0].Attempts != 2 || !throttleKept || m.Steps[0].LastError != "" {
		t.Fatalf("m1 = %+v, %v; want done after 2 attempts with the throttle in its history and no stale last_error", m, err)
	}
}

// A 131056 storm on one conversation: that conversation retries after 4^X
// units (1, 4, 16 here) with its head blocked, while the number's other
// conversations are sent at full pace and the number is not slowed.
func TestPairRateStormDoesNotSlowOthers(t *testing.T) {
	t.Parallel()
	const unit = 50 * time.Millisecond
	b := jobstest.Setup(t, jobstest.Options{Config: jobs.Config{PairRateUnit: unit}})
	var log attemptLog
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		log.add(req.Text)
		if req.Text == "storm 1" && attempt <= 3 {
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131056}
		}
		return whatsapptest.Default(req, attempt)
	})
	b.Ingest("storm", "s1", "storm 1")
	b.Ingest("storm", "s2", "storm 2")
	expected := map[string][]string{"storm": {"storm 1", "storm 2"}}
	for c := range 4 {
		conv := fmt.Sprintf("calm%d", c)
		for k := range 5 {
			text := fmt.Sprintf("%s #%d", conv, k)
			b.Ingest(conv, fmt.Sprintf("%s-%d", conv, k), text)
			expected[conv] = append(expected[conv], text)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(ctx, 22); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if rep := whatsapptest.Check(b.WhatsApp.Sends(), expected); !rep.OK() {
		t.Fatalf("provider saw: %s", rep)
	}
	// The storm's retries keep Meta's schedule...
	at := log.get("storm 1")
	if len(at) != 4 {
		t.Fatalf("storm 1 attempted %d times, want 3 refusals and a success", len(at))
	}
	for i, want := range []time.Duration{unit, 4 * unit, 16 * unit} {
		if d := at[i+1].Sub(at[i]); d < want-10*time.Millisecond {
			t.Errorf("retry %d came %s after the pair-rate error; want at least %s", i+1, d, want)
		}
	}
	// ...its head stays blocked meanwhile...
	if s2 := log.get("storm 2"); len(s2) != 1 || s2[0].Before(at[3]) {
		t.Fatalf("storm 2 attempted at %v, before storm 1 went out at %s", s2, at[3])
	}
	// ...and everyone else went out before the storm was over.
	for _, s := range b.WhatsApp.Sends() {
		if s.To != "storm" && s.At.After(at[3]) {
			t.Fatalf("%q went out after the storm ended (%s later): the storm slowed the others", s.Text, s.At.Sub(at[3]))
		}
	}
	if n := b.Count(`SELECT count(*) FROM ordo.send_pacing WHERE throttled_until IS NOT NULL`); n != 0 {
		t.Fatal("a pair-rate error throttled the whole number")
	}
}

// A paced send whose start was tried with the claim (or with the previous
// message's last write) and told to wait for its slot is not asked about
// again: the drain parks for the wait it was told. It asked ordo.start_step
// the same question once more first, a transaction each time a paced send
// waits for its slot (`make bench` noisy, paced: 10 transactions a message).
func TestAPacedSendToldToWaitIsNotAskedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	if _, err := b.Tenants.Update(ctx, "acme", tenants.UpdateParams{SendRate: ptr(1)}); err != nil {
		t.Fatal(err)
	}
	calls := countCalls(t, b) // from the runner's connections on
	b.Start()
	starts := func() int { return calls("start_step") }
	before := starts()
	// Two conversations at once at one send a second: one goes, the other
	// is told to wait about a second for its slot.
	b.Ingest("p1", "p1-1", "p1 one")
	b.Ingest("p2", "p2-1", "p2 one")
	b.WaitFor("both sent", 20*time.Second, func() bool { return len(b.WhatsApp.Sends()) == 2 })
	b.WaitFor("both done", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 2
	})
	reportCalls(t, b)
	// p1: started with its claim; p2: told to wait with its claim, started
	// with its claim after the wait.
	if asked := starts() - before; asked > 3 {
		t.Fatalf("ordo.start_step called %d times for 2 sends, one of them told once to wait; want 3", asked)
	}
}
