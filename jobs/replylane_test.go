package jobs_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/tenants"
)

// A user who writes to a number in the middle of its campaign gets the
// answer at once, not after the campaign: each of the campaign's
// conversations holds a slot of the number's line (send_rate 10 and 40
// conversations: a line of 4 s), and a reply took the next free slot at its
// end, so the user waited the whole line. That holds for the handler's
// replies (sync) and for an answer the workflow posts itself (notify mode:
// an outbound message right after the user's inbound one). The number's
// rate holds all the same.
func TestAReplyGoesAheadOfTheNumbersCampaign(t *testing.T) {
	t.Parallel()
	const (
		rate  = 10
		convs = 40
	)
	for _, mode := range []string{"sync", "notify"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if mode == "sync" {
					_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"the answer"}}]}`)
					return
				}
				_, _ = io.WriteString(w, `{}`)
			}))
			t.Cleanup(h.Close)
			b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL, NoStart: true})
			if _, err := b.Tenants.Update(ctx, b.Tenant.Slug, tenants.UpdateParams{SendRate: ptr(rate), HandlerMode: ptr(mode)}); err != nil {
				t.Fatal(err)
			}
			for c := range convs {
				for k := range 2 {
					conv := fmt.Sprintf("campaign%02d", c)
					b.Ingest(conv, fmt.Sprintf("%s-%d", conv, k), fmt.Sprintf("%s #%d", conv, k))
				}
			}
			b.Start()
			// The line is built once every campaign conversation was claimed
			// and holds its slot.
			b.WaitFor("the campaign's line", 20*time.Second, func() bool {
				return b.Count(`SELECT count(*) FROM ordo.conversations WHERE send_slot_at IS NOT NULL`) >= convs-rate
			})
			asked := time.Now()
			if _, err := b.Engine.Ingest(ctx, engine.NewMessage{
				Tenant: b.Tenant.Slug, ConversationID: "user", MessageID: "in-1", Direction: "inbound", Payload: []byte(`{"text":"hello?"}`),
			}); err != nil {
				t.Fatal(err)
			}
			if mode == "notify" {
				b.WaitFor("the handler's call", 10*time.Second, func() bool {
					return b.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'in-1' AND status = 'done'`) == 1
				})
				b.Ingest("user", "out-1", "the answer")
			}
			took, before := answered(t, b, asked, 20*time.Second)
			if took > time.Second {
				t.Fatalf("the answer went %s after the user wrote, behind %d of the campaign's sends; want it ahead of the campaign's line (%d sends, %s)",
					took, before, convs, time.Duration(convs)*time.Second/rate)
			}
			// The campaign and the answer together keep the number's rate.
			b.WaitFor("the campaign", 30*time.Second, func() bool { return len(b.WhatsApp.Sends()) >= convs })
			var at []time.Time
			for _, s := range b.WhatsApp.Sends() {
				at = append(at, s.At)
			}
			sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
			for i, j := 0, 0; i < len(at); i++ {
				for at[i].Sub(at[j]) >= time.Second {
					j++
				}
				if n := i - j + 1; n > rate+rate/4+1 {
					t.Fatalf("%d sends within a second at %s; the number's rate is %d", n, at[i].Format(time.StampMilli), rate)
				}
			}
		})
	}
}

// The same for a tenant that does not pace: its campaign's conversations
// are claimed in the order they became due, and a user who writes in the
// middle of the campaign came after every conversation the campaign had
// queued before; a 20,000-conversation import kept the user waiting for
// minutes. A conversation whose next message is the user's goes ahead of
// the tenant's bulk sends.
func TestAUserIsAnsweredAheadOfTheTenantsUnpacedCampaign(t *testing.T) {
	t.Parallel()
	const (
		convs = 300
		msgs  = 4
		delay = 50 * time.Millisecond
	)
	ctx := context.Background()
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"the answer"}}]}`)
	}))
	t.Cleanup(h.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL, NoStart: true, Config: jobs.Config{Workers: 4}})
	if _, err := b.Tenants.Update(ctx, b.Tenant.Slug, tenants.UpdateParams{SendRate: ptr(0)}); err != nil {
		t.Fatal(err)
	}
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		r := whatsapptest.Default(req, attempt)
		r.Delay = delay
		return r
	})
	// The campaign, imported in one transaction.
	batch := &pgx.Batch{}
	for c := range convs {
		for k := range msgs {
			conv := fmt.Sprintf("campaign%03d", c)
			batch.Queue(`SELECT ordo.enqueue_message('acme', $1, $2, 'outbound', $3)`, conv, fmt.Sprintf("%s-%d", conv, k), jobstest.Outbound(conv, fmt.Sprintf("%s #%d", conv, k)))
		}
	}
	if err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, batch).Close() }); err != nil {
		t.Fatal(err)
	}
	b.Start()
	b.WaitFor("the campaign's first sends", 20*time.Second, func() bool { return len(b.WhatsApp.Sends()) >= 20 })
	asked := time.Now()
	if _, err := b.Engine.Ingest(ctx, engine.NewMessage{
		Tenant: b.Tenant.Slug, ConversationID: "user", MessageID: "in-1", Direction: "inbound", Payload: []byte(`{"text":"hello?"}`),
	}); err != nil {
		t.Fatal(err)
	}
	took, before := answered(t, b, asked, 60*time.Second)
	if took > time.Second {
		t.Fatalf("the answer went %s after the user wrote, behind %d of the campaign's %d sends; want it ahead of the campaign",
			took, before, convs*msgs)
	}
}

// answered waits up to timeout for the one send to "user" and says how
// long after asked it reached the provider, and how many of the
// campaign's sends went in between.
func answered(t *testing.T, b *jobstest.Bundle, asked time.Time, timeout time.Duration) (took time.Duration, before int) {
	t.Helper()
	b.WaitFor("the answer", timeout, func() bool { return len(b.WhatsApp.SendsTo("user")) == 1 })
	at := b.WhatsApp.SendsTo("user")[0].At
	for _, s := range b.WhatsApp.Sends() {
		if s.To != "user" && s.At.After(asked) && s.At.Before(at) {
			before++
		}
	}
	took = at.Sub(asked)
	t.Logf("answered %s after the user wrote; %d campaign sends went between", took, before)
	return took, before
}
