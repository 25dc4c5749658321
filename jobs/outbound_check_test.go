package jobs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs/jobstest"
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
		if !strings.Contains(reason, c.want) || !strings.Contains(reason, "WhatsApp would refuse it") || attempts != 1 {
			t.Errorf("%s: dead letter %q after %d attempts; want one attempt and a reason naming %q", c.payload, reason, attempts, c.want)
		}
	}
	if n := b.WhatsApp.Attempts(); n != 1 {
		t.Fatalf("%d requests to the Cloud API, want 1 (the good message; none for the refused ones)", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.conversations WHERE halted_at IS NOT NULL`); n != len(cases) {
		t.Fatalf("%d conversations halted, want %d (the default policy)", n, len(cases))
	}
}
