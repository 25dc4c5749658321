package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

// Every documented Cloud API failure, end to end: each conversation's first
// send fails one way, then the fake answers normally. Permanent errors
// dead-letter the message with the reason and halt the conversation;
// throttling and pair-rate errors are retried; ambiguous failures (5xx,
// 131000, 131016, a dropped connection, a timeout) are counted, waited on
// for a status webhook (none comes here) and resent. Every conversation
// keeps its order.
func TestSendFailureClassesEndToEnd(t *testing.T) {
	t.Parallel()
	type outcome int
	const (
		deadLetter outcome = iota
		retried
		ambiguous
	)
	cases := map[string]struct {
		resp  whatsapptest.Response
		want  outcome
		sends int // deliveries of the failing message the provider saw
	}{
		"perm-131026":  {whatsapptest.Response{Status: 400, ErrorCode: 131026}, deadLetter, 0},
		"perm-131047":  {whatsapptest.Response{Status: 400, ErrorCode: 131047}, deadLetter, 0},
		"perm-100":     {whatsapptest.Response{Status: 400, ErrorCode: 100}, deadLetter, 0},
		"perm-131008":  {whatsapptest.Response{Status: 400, ErrorCode: 131008}, deadLetter, 0},
		"perm-131009":  {whatsapptest.Response{Status: 400, ErrorCode: 131009}, deadLetter, 0},
		"perm-132001":  {whatsapptest.Response{Status: 404, ErrorCode: 132001}, deadLetter, 0},
		"thr-130429":   {whatsapptest.Response{Status: 400, ErrorCode: 130429}, retried, 1},
		"thr-4":        {whatsapptest.Response{Status: 400, ErrorCode: 4}, retried, 1},
		"thr-80007":    {whatsapptest.Response{Status: 400, ErrorCode: 80007}, retried, 1},
		"pair-131056":  {whatsapptest.Response{Status: 400, ErrorCode: 131056}, retried, 1},
		"amb-500":      {whatsapptest.Response{Status: 500}, ambiguous, 1},
		"amb-131000":   {whatsapptest.Response{Status: 500, ErrorCode: 131000}, ambiguous, 1},
		"amb-131016":   {whatsapptest.Response{Status: 503, ErrorCode: 131016}, ambiguous, 1},
		"amb-drop":     {whatsapptest.Response{DropAfterRead: true}, ambiguous, 1},
		"amb-drop-got": {whatsapptest.Response{DropAfterRead: true, Record: true}, ambiguous, 2},
		// Meta took it, the answer came too late: without a status webhook
		// reconcile has to resend, and the user gets it twice.
		"amb-timeout": {whatsapptest.Response{Delay: 1500 * time.Millisecond}, ambiguous, 2},
	}
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{
		SendTimeout: 500 * time.Millisecond, HandlerTimeout: 500 * time.Millisecond, PairRateUnit: 20 * time.Millisecond,
	}})
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if c, ok := cases[req.To]; ok && attempt == 1 && strings.HasSuffix(req.Text, "first") {
			return c.resp
		}
		return whatsapptest.Default(req, attempt)
	})
	b.Start()
	for conv := range cases {
		b.Ingest(conv, conv+"-1", conv+" first")
		b.Ingest(conv, conv+"-2", conv+" second")
	}
	ctx := context.Background()
	b.WaitFor("every conversation to finish or halt", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.conversations WHERE halted_at IS NOT NULL OR head_seq = 2`) == len(cases)
	})
	for conv, c := range cases {
		m, err := b.Engine.Message(ctx, b.Tenant.ID, conv+"-1")
		if err != nil {
			t.Fatal(err)
		}
		st := m.Steps[0]
		texts := texts(b.WhatsApp.SendsTo(conv))
		firsts := strings.Count(strings.Join(texts, "|"), "first")
		switch c.want {
		case deadLetter:
			var reason string
			_ = b.Pool.QueryRow(ctx, `SELECT d.reason FROM ordo.dead_letters d JOIN ordo.messages m ON m.id = d.message_pk WHERE m.message_id = $1`, conv+"-1").Scan(&reason)
			code := strings.TrimPrefix(conv, "perm-")
			if m.Status != "dead" || st.Attempts != 1 || !strings.Contains(reason, "code "+code) || len(texts) != 0 {
				t.Errorf("%s: %s after %d attempts, dead letter reason %q, provider saw %v; want dead at once with the code, nothing sent",
					conv, m.Status, st.Attempts, reason, texts)
			}
		case retried, ambiguous:
			wantAmbiguous := 0
			if c.want == ambiguous {
				wantAmbiguous = 1
			}
			if m.Status != "done" || st.Attempts != 2 || st.AmbiguousCount != wantAmbiguous || firsts != c.sends ||
				len(texts) != c.sends+1 || texts[len(texts)-1] != conv+" second" {
				t.Errorf("%s: %s after %d attempts, %d ambiguous, provider saw %v; want done after 2 attempts, %d ambiguous, %d deliveries, then the second",
					conv, m.Status, st.Attempts, st.AmbiguousCount, texts, wantAmbiguous, c.sends)
			}
		}
	}
	if n := b.Count(`SELECT count(*) FROM ordo.conversations WHERE halted_at IS NOT NULL`); n != 6 {
		t.Fatalf("%d conversations halted, want the 6 with permanent errors", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.tenants WHERE sending_paused_at IS NOT NULL`); n != 0 {
		t.Fatal("a send failure that is not about the account paused the tenant")
	}
}

// The resend policy does not wait for a status webhook: an ambiguous send is
// sent again after the backoff, well before ReconcileWait, and counted.
func TestAmbiguousResendPolicyResendsAtOnce(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{ReconcileWait: time.Minute}})
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET ambiguous = 'resend'`); err != nil {
		t.Fatal(err)
	}
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if attempt == 1 && req.Text == "one" {
			return whatsapptest.Response{DropAfterRead: true, Record: true}
		}
		return whatsapptest.Default(req, attempt)
	})
	b.Start()
	b.Ingest("c1", "m1", "one")
	b.Ingest("c1", "m2", "two")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if got := texts(b.WhatsApp.Sends()); fmt.Sprint(got) != "[one one two]" {
		t.Fatalf("provider saw %v; want one (answer lost), one (resent), two", got)
	}
	b.WaitFor("m1 done", 5*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 2 })
	m, _ := b.Engine.Message(ctx, b.Tenant.ID, "m1")
	if s := m.Steps[0]; s.Attempts != 2 || s.AmbiguousCount != 1 || s.ProviderMessageID != b.WhatsApp.Sends()[1].WAMID {
		t.Fatalf("m1's step %+v; want 2 attempts, 1 ambiguous, the resend's wamid", s)
	}
}

// Out of attempts while the outcome is unknown: the message is dead-lettered
// (it may or may not have gone out; an operator decides), not resent again.
func TestAmbiguousOutOfAttemptsIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET max_attempts = 2`); err != nil {
		t.Fatal(err)
	}
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		return whatsapptest.Response{Status: http.StatusBadGateway}
	})
	b.Start()
	b.Ingest("c1", "m1", "one")
	b.WaitFor("the dead letter", 10*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1 })
	var reason string
	var attempts, ambiguous int
	if err := b.Pool.QueryRow(context.Background(), `SELECT d.reason, s.attempts, s.ambiguous_count FROM ordo.dead_letters d JOIN ordo.steps s ON s.id = d.step_id`).Scan(&reason, &attempts, &ambiguous); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 || ambiguous != 2 || !strings.Contains(reason, "attempts exhausted (2)") || b.WhatsApp.Attempts() != 2 {
		t.Fatalf("dead letter %q after %d attempts (%d ambiguous, %d requests); want 2 of each", reason, attempts, ambiguous, b.WhatsApp.Attempts())
	}
}
