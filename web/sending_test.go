package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// getConversation reads GET /v1/conversations/{id} with the tenant's key.
func (e *waEnv) getConversation(t *testing.T, apiKey, conv string) engine.Conversation {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.URL+"/v1/conversations/"+conv, nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := contractClient(t, http.DefaultClient).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var c engine.Conversation
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &c) != nil {
		t.Fatalf("GET conversation %s: %d %s", conv, resp.StatusCode, body)
	}
	return c
}

// Meta refuses the tenant's token (190): the tenant's sending pauses. Its
// conversations wait — nothing is dead-lettered, no attempt is burnt — the
// conversation view says so, one WARN line says so, and when the operator
// has fixed the token and resumes, every conversation goes on in order at
// once (the drains were told, not left to their 1-minute recheck).
func TestPausedSendingWaitsAndResumesInOrder(t *testing.T) {
	t.Parallel()
	logs := &waLogs{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e := waStart(t, jobstest.Options{NoStart: true, Logger: logger, Config: jobs.Config{PausedRecheck: time.Minute}}, web.Config{})
	var tokenBad atomic.Bool
	tokenBad.Store(true)
	e.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if tokenBad.Load() {
			return whatsapptest.Response{Status: http.StatusUnauthorized, ErrorCode: 190}
		}
		return whatsapptest.Default(req, attempt)
	})
	e.Start()
	ctx := context.Background()
	for k := 1; k <= 3; k++ {
		e.Ingest("c1", fmt.Sprintf("m%d", k), fmt.Sprintf("one #%d", k))
	}
	e.Ingest("c2", "n1", "two #1")
	e.WaitFor("the tenant's sending to pause", 10*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.tenants WHERE sending_paused_at IS NOT NULL`) == 1
	})
	time.Sleep(500 * time.Millisecond) // both conversations' drains have looked by now

	if n := len(e.WhatsApp.Sends()); n != 0 {
		t.Fatalf("%d sends went out while paused", n)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.dead_letters`) + e.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'dead'`); n != 0 {
		t.Fatal("a paused tenant's message was dead-lettered")
	}
	if n := e.Count(`SELECT coalesce(sum(attempts), 0) FROM ordo.steps`); n != 0 {
		t.Fatalf("paused sends burnt %d attempts", n)
	}
	c := e.getConversation(t, e.APIKey, "c1")
	if c.Sending != "paused" || !strings.Contains(c.SendingPausedReason, "code 190") || c.Status != "active" || c.HeadSeq != 0 {
		t.Fatalf("conversation view %+v; want sending paused with the reason, not halted", c)
	}
	if n := strings.Count(logs.String(), `"level":"WARN","msg":"tenant's sending paused`); n != 1 {
		t.Fatalf("%d WARN lines about the pause, want 1; logs:\n%s", n, logs)
	}
	if strings.Contains(logs.String(), jobstest.AccessToken) {
		t.Fatal("the logs show the access token")
	}

	tokenBad.Store(false)
	resumedAt := time.Now()
	if resumed, err := e.Tenants.ResumeSending(ctx, "acme"); err != nil || !resumed {
		t.Fatalf("resume = %t, %v", resumed, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.WhatsApp.WaitForSends(wctx, 4); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(resumedAt); d > 8*time.Second {
		t.Fatalf("conversations went on %s after the resume; the drains were not woken", d)
	}
	time.Sleep(100 * time.Millisecond)
	rep := whatsapptest.Check(e.WhatsApp.Sends(), map[string][]string{"c1": {"one #1", "one #2", "one #3"}, "c2": {"two #1"}})
	if !rep.OK() {
		t.Fatalf("after resume the provider saw: %s", rep)
	}
	if c := e.getConversation(t, e.APIKey, "c1"); c.Sending != "active" || c.SendingPausedReason != "" {
		t.Fatalf("conversation view after resume %+v", c)
	}
	m, _ := e.Engine.Message(ctx, e.Tenant.ID, "m1")
	if s := m.Steps[0]; s.Attempts != 1 || !strings.Contains(s.LastError, "190") && s.LastError != "" {
		t.Fatalf("m1's step %+v; want the one successful attempt counted", s)
	}
}

// A tenant with no whatsapp credential has its sending paused too (every
// send would fail alike) and goes on once the credential is stored and
// sending resumed; its messages are never dead-lettered for it.
func TestMissingCredentialPausesSending(t *testing.T) {
	t.Parallel()
	e := waStart(t, jobstest.Options{Config: jobs.Config{PausedRecheck: time.Minute}}, web.Config{})
	ctx := context.Background()
	bare, err := e.Tenants.Create(ctx, tenants.CreateParams{Slug: "bare"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Engine.Ingest(ctx, engine.NewMessage{Tenant: "bare", ConversationID: "u1", MessageID: "b1", Payload: jobstest.Outbound("u1", "hello")}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor("bare's sending to pause", 10*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.tenants WHERE slug = 'bare' AND sending_paused_reason = 'tenant has no whatsapp credential'`) == 1
	})
	if c := e.getConversation(t, bare.APIKey, "u1"); c.Sending != "paused" {
		t.Fatalf("bare's conversation %+v; want sending paused", c)
	}
	e.Ingest("c1", "m1", "acme goes on") // other tenants are not affected
	cred, _ := json.Marshal(map[string]string{"phone_number_id": "3000003", "access_token": "t3"})
	if err := e.Vault.Put(ctx, e.Pool, bare.Tenant.ID, "whatsapp", cred); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Tenants.ResumeSending(ctx, "bare"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.WhatsApp.WaitForSends(wctx, 2); err != nil {
		t.Fatal(err)
	}
	if s := e.WhatsApp.SendsTo("u1"); len(s) != 1 || s[0].PhoneNumberID != "3000003" {
		t.Fatalf("bare's sends %+v; want one from its new number", s)
	}
}
