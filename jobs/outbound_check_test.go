package jobs_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/tenants"
)

// An application's outbound message through ordo.enqueue_message skips the
// REST door's schema check: the drain checks it before sending, and a
// message WhatsApp would refuse is dead-lettered at once, its reason naming
// the JSON path, with no request to the Cloud API. The
// conversation then follows its tenant's policy (halt, by default), and the
// other conversations go on.
func TestSQLOutboundCheckedBeforeSending(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{})
	ctx := context.Background()
	const q = `SELECT seq FROM ordo.enqueue_message('acme', $1, $2, 'outbound', $3::jsonb)`
	cases := []struct {
		conv, payload, want string
	}{
		{"c-text-string", `{"type":"text","text":"hi"}`, "text: "},
		{"c-type-number", `{"type":123,"text":{"body":"hi"}}`, "type: "},
		{"c-huge-number", `{"type":"location","location":{"latitude":1e999,"longitude":2}}`, "location.latitude: "},
		{"c-no-body", `{"type":"text","text":{}}`, "text.body: "},
	}
	for _, c := range cases {
		var seq int64
		if err := b.Pool.QueryRow(ctx, q, c.conv, "bad-"+c.conv, c.payload).Scan(&seq); err != nil || seq != 1 {
			t.Fatalf("enqueue %s: seq %d, %v", c.payload, seq, err)
		}
		// Behind it, a good message: under the default policy it waits.
		if err := b.Pool.QueryRow(ctx, q, c.conv, "good-"+c.conv, string(jobstest.Outbound(c.conv, "after "+c.conv))).Scan(&seq); err != nil || seq != 2 {
			t.Fatalf("enqueue behind %s: seq %d, %v", c.conv, seq, err)
		}
	}
	b.Ingest("c-fine", "fine-1", "a good message elsewhere")
	b.WaitFor("a dead letter per bad message and the good conversation sent", 15*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == len(cases) && len(b.WhatsApp.Sends()) == 1
	})
	for _, c := range cases {
		var (
			reason   string
			attempts int
		)
		if err := b.Pool.QueryRow(ctx, `
SELECT d.reason, s.attempts FROM ordo.dead_letters d JOIN ordo.messages m ON m.id = d.message_pk JOIN ordo.steps s ON s.id = d.step_id
WHERE m.message_id = $1`, "bad-"+c.conv).Scan(&reason, &attempts); err != nil {
			t.Fatalf("dead letter of %s: %v", c.conv, err)
		}
		// Refused before any attempt: nothing was tried.
		if !strings.Contains(reason, c.want) || !strings.Contains(reason, "WhatsApp would refuse it") || attempts != 0 {
			t.Errorf("%s: dead letter %q after %d attempts; want none and a reason naming %q", c.payload, reason, attempts, c.want)
		}
	}
	if n := b.WhatsApp.Attempts(); n != 1 {
		t.Fatalf("%d requests to the Cloud API, want 1 (the good message; none for the refused ones)", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.conversations WHERE halted_at IS NOT NULL`); n != len(cases) {
		t.Fatalf("%d conversations halted, want %d (the default policy)", n, len(cases))
	}
}

// Each outbound message is checked against WhatsApp's schema once, where it
// enters: the ingest (REST's Engine.Ingest) and the handler's answer check
// theirs and the drain does not check them again; a message another
// application put in through SQL, which no Go saw, is checked by the drain
// once before its first attempt (not again on a retry), and again after an
// operator's replay of its refusal. No refused message reaches the Cloud API.
func TestOutboundCheckedOnce(t *testing.T) {
	t.Parallel()
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"a reply"}}]}`)
	}))
	defer handler.Close()
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: handler.URL, NoStart: true})
	ctx := context.Background()
	var (
		mu     sync.Mutex
		checks = map[int64]int{} // by message row
	)
	jobs.SetCheckHook(b.Runner, func(messagePK int64) {
		mu.Lock()
		defer mu.Unlock()
		checks[messagePK]++
	})
	// The SQL message's first attempt is throttled: its retry is not
	// checked again.
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if req.To == "c-sql" && attempt == 1 {
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 130429}
		}
		return whatsapptest.Default(req, attempt)
	})

	// The ingest refuses what WhatsApp would, naming the path.
	_, err := b.Engine.Ingest(ctx, engine.NewMessage{Tenant: "acme", ConversationID: "c-door", MessageID: "door-1",
		Direction: "outbound", Payload: json.RawMessage(`{"to":"c-door","type":"text","text":{}}`)})
	if engine.ErrorCode(err) != engine.CodeInvalid || !strings.Contains(err.Error(), "text.body: required") {
		t.Fatalf("ingest of a message WhatsApp would refuse: %v; want invalid_request naming text.body", err)
	}
	b.Ingest("c-rest", "rest-1", "through the ingest")
	const q = `SELECT seq FROM ordo.enqueue_message('acme', $1, $2, 'outbound', $3::jsonb)`
	for _, m := range []struct{ conv, id, payload string }{
		{"c-sql", "sql-1", string(jobstest.Outbound("c-sql", "through SQL"))},
		{"c-bad", "bad-1", `{"type":"text","text":{}}`},
	} {
		var seq int64
		if err := b.Pool.QueryRow(ctx, q, m.conv, m.id, m.payload).Scan(&seq); err != nil {
			t.Fatalf("enqueue %s: %v", m.id, err)
		}
	}
	if _, err := b.Engine.Ingest(ctx, engine.NewMessage{Tenant: "acme", ConversationID: "c-in", MessageID: "in-1",
		Direction: "inbound", Payload: json.RawMessage(`{"message":{"type":"text","text":{"body":"hi"}}}`)}); err != nil {
		t.Fatal(err)
	}
	// Not checked yet: the API shows its send pending, as any not tried.
	if v, err := b.Engine.Message(ctx, b.Tenant.ID, "sql-1"); err != nil || len(v.Steps) != 1 || v.Steps[0].Status != "pending" || v.Steps[0].Kind != "send" {
		t.Fatalf("sql-1 before its drain: %+v, %v; want one pending send step", v, err)
	}
	b.Start()
	b.WaitFor("three sent, one dead letter", 15*time.Second, func() bool {
		return len(b.WhatsApp.SendsTo("c-rest")) == 1 && len(b.WhatsApp.SendsTo("c-sql")) == 1 &&
			len(b.WhatsApp.SendsTo("c-in")) == 1 && b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1
	})
	checksOf := func(messageID string) int {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		var pk int64
		if err := b.Pool.QueryRow(ctx, `SELECT id FROM ordo.messages WHERE message_id = $1`, messageID).Scan(&pk); err != nil {
			t.Fatalf("message %s: %v", messageID, err)
		}
		return checks[pk]
	}
	for id, want := range map[string]int{"rest-1": 0, "in-1": 0, "sql-1": 1, "bad-1": 1} {
		if got := checksOf(id); got != want {
			t.Errorf("%s: the drain checked it %d times, want %d", id, got, want)
		}
	}

	// The operator replays the refusal: checked again, refused again.
	var dl int64
	if err := b.Pool.QueryRow(ctx, `SELECT id FROM ordo.dead_letters`).Scan(&dl); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine.Replay(ctx, b.Tenant.ID, strconv.FormatInt(dl, 10), engine.ActorCLI); err != nil {
		t.Fatalf("replay: %v", err)
	}
	b.WaitFor("the replay refused again", 15*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.dead_letters WHERE resolved_at IS NULL`) == 1
	})
	if got := checksOf("bad-1"); got != 2 {
		t.Errorf("bad-1: checked %d times after its replay, want 2", got)
	}
	if n := len(b.WhatsApp.SendsTo("c-bad")); n != 0 {
		t.Errorf("%d requests to the Cloud API for a message WhatsApp would refuse, want none", n)
	}
	if n := b.WhatsApp.Attempts(); n != 4 {
		t.Errorf("%d requests to the Cloud API, want 4 (one each, and the throttled first attempt)", n)
	}
}

// The drain that checks an imported send takes the tenant's other unchecked
// sends along (the sweep: a query over the tenant's ready set), so that they
// can go in batches. Only a tenant that batches sweeps: a paced one's sends
// never batch, and each of its runs swept again, since a send told to wait
// for its slot is checked again when it comes back (bench noisy, paced 80/s:
// 2,873 sweeps for 1,600 imported messages, 7.6 s of Postgres time, the
// second costliest statement).
func TestOnlyATenantThatBatchesSweepsUncheckedSends(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		rate  int
		swept bool
	}{
		{"unpaced", 0, true},
		{"paced", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := jobstest.Setup(t, jobstest.Options{NoStart: true})
			if _, err := b.Tenants.Update(ctx, "acme", tenants.UpdateParams{SendRate: ptr(tc.rate)}); err != nil {
				t.Fatal(err)
			}
			// An import of two conversations; the second is due only in an
			// hour, so the first's drain is the only one that can check it.
			const q = `SELECT seq FROM ordo.enqueue_message('acme', $1, $2, 'outbound', $3::jsonb)`
			for _, c := range []string{"c-now", "c-later"} {
				var seq int64
				if err := b.Pool.QueryRow(ctx, q, c, c+"-1", string(jobstest.Outbound(c, "imported"))).Scan(&seq); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := b.Pool.Exec(ctx, `UPDATE ordo.ready r SET due_at = now() + interval '1 hour'
				FROM ordo.conversations c WHERE c.id = r.conversation_pk AND c.conversation_id = 'c-later'`); err != nil {
				t.Fatal(err)
			}
			b.Start()
			b.WaitFor("c-now sent", 15*time.Second, func() bool { return len(b.WhatsApp.SendsTo("c-now")) == 1 })
			left := b.Count(`SELECT count(*) FROM ordo.steps s JOIN ordo.messages m ON m.id = s.message_pk
				WHERE m.message_id = 'c-later-1' AND s.status = 'unchecked'`)
			if swept := left == 0; swept != tc.swept {
				t.Fatalf("c-later's send checked by c-now's drain: %v, want %v", swept, tc.swept)
			}
		})
	}
}
