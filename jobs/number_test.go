package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/tenants"
)

// The Cloud API answers 503 to every send of one tenant's number for 20 s
// while 5 conversations have 3 messages each queued, with max_attempts 2.
// Before, each message's two attempts ran out within a second or two:
// dead letters and halted conversations. The number is a state now: the
// conversations wait for it — no dead letter, no halt — while one probe
// send at a time looks for it, and every message goes out once, in order,
// when it answers again. Another tenant's sends go on meanwhile.
func TestUnreachableNumberIsAStateTheConversationsWaitFor(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	ctx := context.Background()
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET max_attempts = 2, events_url = 'http://127.0.0.1:1/events' WHERE id = $1`, b.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	const otherPhone = "2000002"
	b.AddTenant("other", otherPhone, tenants.UpdateParams{})
	var (
		outage     atomic.Bool
		downSends  atomic.Int32 // the tenant's requests answered 503
		otherSends atomic.Int32 // the other tenant's, answered during the outage
	)
	outage.Store(true)
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if outage.Load() {
			if req.PhoneNumberID == jobstest.PhoneNumberID {
				downSends.Add(1)
				return whatsapptest.Response{Status: http.StatusServiceUnavailable}
			}
			otherSends.Add(1)
		}
		return whatsapptest.Default(req, attempt)
	})
	b.Start()
	start := time.Now()
	convs := []string{"c1", "c2", "c3", "c4", "c5"}
	for i := 1; i <= 3; i++ {
		for _, c := range convs {
			b.Ingest(c, fmt.Sprintf("%s-m%d", c, i), fmt.Sprintf("%s m%d", c, i))
		}
	}
	b.WaitFor("the number to be marked unreachable", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.dependencies WHERE what = 'number' AND down_since IS NOT NULL`) == 1
	})
	// The other tenant's sends are untouched meanwhile.
	for i := 1; i <= 3; i++ {
		b.IngestFor("other", "o1", fmt.Sprintf("o1-m%d", i), fmt.Sprintf("o1 m%d", i))
	}
	b.WaitFor("the other tenant's sends during the outage", 10*time.Second, func() bool {
		return len(b.WhatsApp.SendsTo("o1")) == 3
	})
	if n := otherSends.Load(); n != 3 {
		t.Fatalf("the other tenant's number saw %d sends during the outage; want its 3", n)
	}
	// The outage lasts 20 s (the scenario, not a wait for a result).
	time.Sleep(time.Until(start.Add(20 * time.Second)))
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters during the outage; want none", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.conversations WHERE halted_at IS NOT NULL`); n != 0 {
		t.Fatalf("%d conversations halted during the outage; want none", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.messages m JOIN ordo.conversations c ON c.id = m.conversation_pk
		WHERE c.tenant_id = $1 AND m.status = 'done'`, b.Tenant.ID); n != 0 {
		t.Fatalf("%d of the tenant's messages done while its number was away", n)
	}
	during := downSends.Load()
	outage.Store(false)
	back := time.Now()

	b.WaitFor("every message sent", 90*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 15+3
	})
	t.Logf("number away 20 s: %d requests answered 503 (5 first sends, then probes); all sent %s after it answered",
		during, time.Since(back).Round(time.Millisecond))
	for _, c := range convs {
		got := strings.Join(texts(b.WhatsApp.SendsTo(c)), "|")
		if want := fmt.Sprintf("%[1]s m1|%[1]s m2|%[1]s m3", c); got != want {
			t.Errorf("%s went out as %q; want %q: once each, in order", c, got, want)
		}
	}
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters; want none", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.dependencies WHERE what = 'number' AND (down_since IS NOT NULL OR probe_at IS NOT NULL)`); n != 0 {
		t.Fatal("the number is still marked unreachable after the Cloud API answered")
	}
	if n := b.Count(`SELECT count(*) FROM ordo.conversations WHERE number_wait`); n != 0 {
		t.Fatalf("%d conversations still waiting for the number", n)
	}
	var events string
	if err := b.Pool.QueryRow(ctx, `SELECT string_agg(type, ',' ORDER BY id) FROM ordo.events WHERE type LIKE 'tenant.number%'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != "tenant.number_unreachable,tenant.number_back" {
		t.Fatalf("tenant events %q; want one number_unreachable then one number_back", events)
	}
}

// A number suspected away (enough different messages failed, not yet over
// NumberDownSpan) keeps a step's last attempt until the evidence decides.
// That wait parked the conversation as a wait for the number — which goes
// on at once when the number is not down — so the step was sent again and
// again: 12 sends to Meta in 4 s for one message. It waits out the span.
func TestSuspectedNumberDoesNotResendAtOnce(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	ctx := context.Background()
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET max_attempts = 2 WHERE id = $1`, b.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		per   = map[string]int{}
		start = time.Now()
	)
	window := jobs.NumberDownSpan - time.Second
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if time.Since(start) < window {
			mu.Lock()
			per[req.To]++
			mu.Unlock()
			return whatsapptest.Response{Status: http.StatusServiceUnavailable}
		}
		return whatsapptest.Default(req, attempt)
	})
	b.Start()
	for _, c := range []string{"c1", "c2", "c3"} {
		b.Ingest(c, c+"-m1", c)
	}
	b.WaitFor("every message sent", 60*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	for c, n := range per {
		if n > 3 {
			t.Errorf("%s was sent %d times while the number was only suspected (%s); want its 2 attempts and at most a probe", c, n, window)
		}
	}
	t.Logf("sends per conversation in the first %s: %v", window, per)
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// One message that Meta answers 500 every time (a malformed media id, say)
// is that message's problem: it is retried over more than NumberDownSpan
// while the tenant's other conversations send, and dead-letters after its
// attempts; the number never counts as unreachable.
func TestPoisonMessageNeverTakesTheNumberDown(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{RetryBase: time.Second, RetryMax: time.Second}})
	ctx := context.Background()
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET max_attempts = 12, ambiguous = 'resend', events_url = 'http://127.0.0.1:1/events'`); err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		poisonAt []time.Time // when the poison message's sends came
	)
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if req.Text == "poison" {
			mu.Lock()
			poisonAt = append(poisonAt, time.Now())
			mu.Unlock()
			return whatsapptest.Response{Status: http.StatusInternalServerError}
		}
		return whatsapptest.Default(req, attempt)
	})
	b.Start()
	b.Ingest("c1", "c1-m1", "c1 m1")
	b.Ingest("c1", "c1-poison", "poison")
	b.Ingest("c1", "c1-m3", "c1 m3")
	// The others keep sending while the poison message is retried.
	stop, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }); <-done }
	t.Cleanup(halt) // before the pool closes
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			c := []string{"c2", "c3", "c4"}[i%3]
			_, _ = b.Engine.Ingest(ctx, engine.NewMessage{Tenant: b.Tenant.Slug, ConversationID: c,
				MessageID: fmt.Sprintf("%s-m%d", c, i), Payload: jobstest.Outbound(c, fmt.Sprintf("%s m%d", c, i))})
		}
	}()
	b.WaitFor("the poison message's dead letter", 60*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1
	})
	halt()
	b.WaitFor("the others sent", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages m JOIN ordo.conversations c ON c.id = m.conversation_pk
			WHERE c.conversation_id <> 'c1' AND m.status <> 'done'`) == 0
	})
	var reason string
	if err := b.Pool.QueryRow(ctx, `SELECT reason FROM ordo.dead_letters`).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	tries, span := len(poisonAt), poisonAt[len(poisonAt)-1].Sub(poisonAt[0])
	mu.Unlock()
	if !strings.Contains(reason, "attempts exhausted (12)") || tries != 12 {
		t.Fatalf("poison message dead-lettered for %q after %d sends; want its 12 attempts", reason, tries)
	}
	if span < jobs.NumberDownSpan {
		t.Fatalf("the poison message's sends spanned %s; the test needs more than %s", span, jobs.NumberDownSpan)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.events WHERE type LIKE 'tenant.number%'`); n != 0 {
		t.Fatalf("%d number events: the poison message took the number down", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.dependencies WHERE what = 'number' AND down_since IS NOT NULL`); n != 0 {
		t.Fatal("the number is marked unreachable")
	}
	if got := strings.Join(texts(b.WhatsApp.SendsTo("c1")), "|"); got != "c1 m1" {
		t.Fatalf("c1 went out as %q; want c1 m1, then the halt at the poison message", got)
	}
}

// Past the tenant's outage limit the number's failures count as attempts
// again: a number that never comes back ends in dead letters, instead of
// its messages waiting for ever.
func TestNumberUnreachablePastTheOutageLimitDeadLetters(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	ctx := context.Background()
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET max_attempts = 3, handler_outage_limit_ms = 60000`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(ctx, `INSERT INTO ordo.dependencies (tenant_id, what, down_since, probe_at)
		SELECT id, 'number', now() - interval '2 minutes', now() FROM ordo.tenants`); err != nil {
		t.Fatal(err)
	}
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		return whatsapptest.Response{Status: http.StatusServiceUnavailable, ErrorCode: 131016}
	})
	b.Start()
	for _, c := range []string{"c1", "c2", "c3"} {
		b.Ingest(c, c+"-m1", c+" m1")
	}
	b.WaitFor("the dead letters", 20*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 3 })
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters WHERE reason LIKE 'attempts exhausted (3)%'`); n != 3 {
		t.Fatalf("%d of 3 dead letters say the attempts ran out", n)
	}
}

// ordo.dependency_failed carries out the evidence model (jobs' evidence,
// through ordo.dependency_evidence) on the dependency's row, for the number
// and the handler with the rules their drains pass: the model's tables,
// fed to it with the same clock and the tenant's counters of successful
// calls, give the same verdicts.
func TestEvidenceSQLAgrees(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	ctx := context.Background()
	start := time.Date(2026, 11, 27, 8, 0, 30, 0, time.UTC)
	for _, set := range []struct {
		counter string
		cases   []jobs.EvidenceCase
		args    []any
	}{
		{"sent", jobs.NumberCases(), jobs.DependencyArgs("number")},
		{"handled", jobs.HandlerCases(), jobs.DependencyArgs("handler")},
	} {
		const call = `SELECT verdict FROM ordo.dependency_failed($1, $4, $2, false, 'test', false, $5, $6, $7, $8, $9, $3)`
		for _, c := range set.cases {
			if _, err := b.Pool.Exec(ctx, `DELETE FROM ordo.dependencies`); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Pool.Exec(ctx, `DELETE FROM ordo.stats_minutes`); err != nil {
				t.Fatal(err)
			}
			var ok int64
			for i, step := range c.Steps {
				at := start.Add(c.At[i])
				if d := c.OK[i] - ok; d > 0 {
					// The counter's column is one of two names, not input.
					if _, err := b.Pool.Exec(ctx, `INSERT INTO ordo.stats_minutes AS s (minute, tenant_id, shard, `+set.counter+`)
						VALUES (date_trunc('minute', $1::timestamptz), $2, 0, $3)
						ON CONFLICT (minute, tenant_id, shard) DO UPDATE SET `+set.counter+` = s.`+set.counter+` + EXCLUDED.`+set.counter,
						at, b.Tenant.ID, d); err != nil {
						t.Fatal(err)
					}
					ok = c.OK[i]
				}
				var verdict string
				if err := b.Pool.QueryRow(ctx, call, append([]any{b.Tenant.ID, step, at}, set.args...)...).Scan(&verdict); err != nil {
					t.Fatal(err)
				}
				if verdict != c.Want[i] {
					t.Errorf("%s (%s): event %d: the database says %s, the model %s", c.Name, set.counter, i, verdict, c.Want[i])
					break
				}
			}
		}
	}
}
