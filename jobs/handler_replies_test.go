package jobs_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/jobstest"
)

// A handler reply WhatsApp would refuse is refused when the handler answers:
// the message is dead-lettered with a reason naming the reply and the path,
// and none of its replies is sent (sending the valid first one would leave
// the conversation half answered).
func TestInvalidHandlerReplyIsDeadLetteredWithItsPath(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"fine"}},{"type":"text","text":{"preview_url":false}}]}`)
	}))
	defer srv.Close()
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: srv.URL})
	ctx := context.Background()
	if _, err := b.Engine.Ingest(ctx, engine.NewMessage{
		Tenant: "acme", ConversationID: "u1", MessageID: "in-1", Direction: "inbound",
		Payload: json.RawMessage(`{"message":{"type":"text","text":{"body":"hi"}}}`),
	}); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("dead letter", 10*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1 })
	dls, err := b.Engine.DeadLetters(ctx, engine.DeadLetterFilter{TenantID: b.Tenant.ID})
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters = %+v, %v", dls, err)
	}
	const want = "reply 2 of 2: text.body: required"
	if dls[0].MessageID != "in-1" || !strings.Contains(dls[0].Reason+string(dls[0].Errors), want) {
		t.Errorf("dead letter %s: reason %q, errors %s; want them to name %q", dls[0].MessageID, dls[0].Reason, dls[0].Errors, want)
	}
	if n := len(b.WhatsApp.SendsTo("u1")); n != 0 {
		t.Errorf("%d replies sent for a refused answer, want none", n)
	}
}

// A reply whose text Postgres cannot store as it is (a lone surrogate
// escape, a NUL) is a dead letter that says so, after one call of the
// handler; not a step whose write fails on every try.
func TestHandlerReplyWithTextPostgresRefusesIsDeadLettered(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"half a pair \ud83d"}}]}`)
	}))
	defer srv.Close()
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: srv.URL})
	ctx := context.Background()
	if _, err := b.Engine.Ingest(ctx, engine.NewMessage{
		Tenant: "acme", ConversationID: "u1", MessageID: "in-1", Direction: "inbound",
		Payload: json.RawMessage(`{"message":{"type":"text","text":{"body":"hi"}}}`),
	}); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("dead letter", 10*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1 })
	dls, err := b.Engine.DeadLetters(ctx, engine.DeadLetterFilter{TenantID: b.Tenant.ID})
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters = %+v, %v", dls, err)
	}
	const want = `reply 1 of 1: a lone UTF-16 surrogate escape (\ud83d)`
	if !strings.Contains(dls[0].Reason+string(dls[0].Errors), want) || calls.Load() != 1 {
		t.Errorf("dead letter after %d handler calls: reason %q, errors %s; want one call and a reason naming %q", calls.Load(), dls[0].Reason, dls[0].Errors, want)
	}
}
