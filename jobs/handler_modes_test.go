package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/tenants"
)

// reply is one text reply as a handler or the replies endpoint gives it.
func reply(text string) string { return `{"type":"text","text":{"body":"` + text + `"}}` }

func repliesJSON(texts ...string) json.RawMessage {
	parts := make([]string, len(texts))
	for i, t := range texts {
		parts[i] = reply(t)
	}
	return json.RawMessage("[" + strings.Join(parts, ",") + "]")
}

// inbound accepts an inbound message or fails the test.
func inbound(t *testing.T, b *jobstest.Bundle, conv, id string) {
	t.Helper()
	if _, err := b.Engine.Ingest(context.Background(), engine.NewMessage{
		Tenant: b.Tenant.Slug, ConversationID: conv, MessageID: id, Direction: "inbound", Payload: []byte(`{"text":"hi"}`),
	}); err != nil {
		t.Fatal(err)
	}
}

func setTenant(t *testing.T, b *jobstest.Bundle, p tenants.UpdateParams) {
	t.Helper()
	if _, err := b.Tenants.Update(context.Background(), b.Tenant.Slug, p); err != nil {
		t.Fatal(err)
	}
}

// waitingFor waits until message id's handle step waits for its replies.
func waitingFor(b *jobstest.Bundle, id string) {
	b.WaitFor(id+"'s handle step to wait for its replies", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.steps s JOIN ordo.messages m ON m.id = s.message_pk
			WHERE m.message_id = $1 AND s.kind = 'handle' AND s.status = 'waiting'`, id) == 1
	})
}

// Each handler mode reads each answer n8n gives as the contract says: sync
// wants the replies in the answer (a 202 makes it async for the message),
// async takes any 2xx as "the replies will be posted", notify any 2xx as
// done.
func TestHandlerModes(t *testing.T) {
	t.Parallel()
	started := `{"message":"Workflow was started"}`
	for _, tc := range []struct {
		name, mode string
		status     int
		body       string
		post       bool     // the test posts the replies "later" (later1, later2)
		wantSent   []string // in order
		wantDead   string
	}{
		{name: "sync replies", mode: "sync", status: 200, body: `{"replies":[` + reply("a") + `,` + reply("b") + `]}`, wantSent: []string{"a", "b"}},
		{name: "sync one-element array", mode: "sync", status: 200, body: `[{"replies":[` + reply("a") + `]}]`, wantSent: []string{"a"}},
		{name: "sync empty body", mode: "sync", status: 200, body: ``, wantDead: "empty body"},
		{name: "sync Workflow was started", mode: "sync", status: 200, body: started, wantDead: "Respond option"},
		{name: "sync 202 is async for the message", mode: "sync", status: 202, body: started, post: true, wantSent: []string{"later1", "later2"}},
		{name: "async Workflow was started", mode: "async", status: 200, body: started, post: true, wantSent: []string{"later1", "later2"}},
		{name: "async empty body", mode: "async", status: 200, body: ``, post: true, wantSent: []string{"later1", "later2"}},
		{name: "async replies in the answer are not the replies", mode: "async", status: 200, body: `{"replies":[` + reply("now") + `]}`, post: true, wantSent: []string{"later1", "later2"}},
		{name: "notify Workflow was started", mode: "notify", status: 200, body: started},
		{name: "notify empty body", mode: "notify", status: 204},
		{name: "notify ignores replies in the answer", mode: "notify", status: 200, body: `{"replies":[` + reply("no") + `]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			t.Cleanup(h.Close)
			b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL})
			setTenant(t, b, tenants.UpdateParams{HandlerMode: &tc.mode, MaxAttempts: ptr(1)})
			inbound(t, b, "c1", "in1")
			if tc.post {
				waitingFor(b, "in1")
				if _, err := b.Engine.PostReplies(context.Background(), b.Tenant.ID, "in1", repliesJSON("later1", "later2")); err != nil {
					t.Fatal(err)
				}
			}
			b.WaitFor("the message to finish", 10*time.Second, func() bool {
				return b.Count(`SELECT count(*) FROM ordo.messages WHERE status IN ('done', 'dead')`) == 1
			})
			var reason string
			_ = b.Pool.QueryRow(context.Background(), `SELECT reason FROM ordo.dead_letters`).Scan(&reason)
			if !strings.Contains(reason, tc.wantDead) || (tc.wantDead == "" && reason != "") {
				t.Fatalf("dead letter %q; want %q", reason, tc.wantDead)
			}
			b.WaitFor("the replies", 10*time.Second, func() bool { return len(b.WhatsApp.Sends()) >= len(tc.wantSent) })
			time.Sleep(100 * time.Millisecond) // nothing more may go out
			if got := texts(b.WhatsApp.Sends()); strings.Join(got, "|") != strings.Join(tc.wantSent, "|") {
				t.Fatalf("sent %v, want %v", got, tc.wantSent)
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("handler called %d times, want once", n)
			}
		})
	}
}

// An async handler is called once per message however long its workflow
// runs; the conversation's next message waits (its handler is not called)
// until the first one's replies are posted and sent, in order.
func TestAsyncRepliesPostedLaterGoOutInOrderAndTheNextMessageWaits(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var called []string
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			MessageID string `json:"message_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		called = append(called, req.MessageID)
		mu.Unlock()
		_, _ = io.WriteString(w, `{"message":"Workflow was started"}`)
	}))
	t.Cleanup(h.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL})
	setTenant(t, b, tenants.UpdateParams{HandlerMode: ptr("async")})
	inbound(t, b, "c1", "in1")
	inbound(t, b, "c1", "in2")
	waitingFor(b, "in1")
	time.Sleep(300 * time.Millisecond) // many poll intervals: in2 must not start meanwhile
	mu.Lock()
	if strings.Join(called, ",") != "in1" {
		t.Fatalf("handler called for %v while in1 waits for its replies; want in1 only", called)
	}
	mu.Unlock()
	if n := b.Count(`SELECT count(*) FROM ordo.steps s JOIN ordo.messages m ON m.id = s.message_pk WHERE m.message_id = 'in2'`); n != 0 {
		t.Fatalf("in2 has %d steps while in1 waits", n)
	}
	ctx := context.Background()
	if _, err := b.Engine.PostReplies(ctx, b.Tenant.ID, "in1", repliesJSON("r1", "r2")); err != nil {
		t.Fatal(err)
	}
	waitingFor(b, "in2")
	if _, err := b.Engine.PostReplies(ctx, b.Tenant.ID, "in2", repliesJSON("r3")); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("both messages done", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 2
	})
	if got := texts(b.WhatsApp.Sends()); strings.Join(got, "|") != "r1|r2|r3" {
		t.Fatalf("sent %v, want r1, r2, r3", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(called, ",") != "in1,in2" {
		t.Fatalf("handler calls %v; want each message's once", called)
	}
	// A repeat of the same replies is a duplicate; other replies now are a conflict.
	if a, err := b.Engine.PostReplies(ctx, b.Tenant.ID, "in1", repliesJSON("r1", "r2")); err != nil || !a.Duplicate {
		t.Fatalf("repeat of in1's replies: %+v, %v; want a duplicate", a, err)
	}
	if _, err := b.Engine.PostReplies(ctx, b.Tenant.ID, "in1", repliesJSON("other")); engine.ErrorCode(err) != engine.CodeConflict {
		t.Fatalf("other replies for in1: %v; want conflict", err)
	}
}

// Replies the workflow posts before ordo has even recorded its handler's
// answer (n8n's Respond Immediately, a fast workflow) are not lost. In sync
// mode they are refused until the handler answered 202 (the answer would
// carry the replies otherwise), so a post is never accepted and then
// overridden; a retried post then goes through.
func TestAsyncRepliesPostedBeforeTheAnswerIsRecorded(t *testing.T) {
	t.Parallel()
	t.Run("sync, 202", func(t *testing.T) {
		t.Parallel()
		var b *jobstest.Bundle
		h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := b.Engine.PostReplies(r.Context(), b.Tenant.ID, "in1", repliesJSON("fast")); engine.ErrorCode(err) != engine.CodeNotWaiting {
				t.Errorf("post replies during a sync call: %v; want not_waiting", err)
			}
			w.WriteHeader(http.StatusAccepted)
		}))
		t.Cleanup(h.Close)
		b = jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL})
		inbound(t, b, "c1", "in1")
		waitingFor(b, "in1")
		if _, err := b.Engine.PostReplies(context.Background(), b.Tenant.ID, "in1", repliesJSON("retried")); err != nil {
			t.Fatal(err)
		}
		b.WaitFor("the reply", 10*time.Second, func() bool { return len(b.WhatsApp.Sends()) == 1 })
	})
	var b *jobstest.Bundle
	var calls atomic.Int32
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if _, err := b.Engine.PostReplies(r.Context(), b.Tenant.ID, "in1", repliesJSON("fast")); err != nil {
			t.Errorf("post replies during the call: %v", err)
		}
		_, _ = io.WriteString(w, `{"message":"Workflow was started"}`)
	}))
	t.Cleanup(h.Close)
	b = jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL})
	setTenant(t, b, tenants.UpdateParams{HandlerMode: ptr("async"), ReplyDeadlineMS: ptr(3600_000)})
	inbound(t, b, "c1", "in1")
	b.WaitFor("the reply", 10*time.Second, func() bool { return len(b.WhatsApp.Sends()) == 1 })
	if calls.Load() != 1 {
		t.Fatalf("handler called %d times, want once", calls.Load())
	}
}

// Replies posted while the drain parks the conversation (it found none and
// is about to wait until the deadline, an hour away) wake it at once: the
// interleaving is forced by a hook between the drain's read and its park.
func TestAsyncRepliesPostedWhileTheDrainParks(t *testing.T) {
	t.Parallel()
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	t.Cleanup(h.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL, NoStart: true})
	setTenant(t, b, tenants.UpdateParams{ReplyDeadlineMS: ptr(3600_000)}) // sync: the 202 makes it async
	var posted atomic.Bool
	jobs.SetReplyHooks(b.Runner, func(int64) {
		if posted.Swap(true) {
			return
		}
		if _, err := b.Engine.PostReplies(context.Background(), b.Tenant.ID, "in1", repliesJSON("p1", "p2")); err != nil {
			t.Errorf("post replies while parking: %v", err)
		}
	}, nil)
	b.Start()
	inbound(t, b, "c1", "in1")
	b.WaitFor("the replies, long before the deadline", 10*time.Second, func() bool { return len(b.WhatsApp.Sends()) == 2 })
	if !posted.Load() {
		t.Fatal("the hook never ran")
	}
	if got := texts(b.WhatsApp.Sends()); strings.Join(got, "|") != "p1|p2" {
		t.Fatalf("sent %v", got)
	}
}

// An async handler that posts nothing by the tenant's reply deadline: the
// dead-letter policy applies (halt by default), and replies posted after it
// are refused (409) and stored nowhere.
func TestAsyncDeadlinePassedDeadLetters(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.WriteString(w, `{"message":"Workflow was started"}`)
	}))
	t.Cleanup(h.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL})
	setTenant(t, b, tenants.UpdateParams{HandlerMode: ptr("async"), ReplyDeadlineMS: ptr(1000)})
	inbound(t, b, "c1", "in1")
	inbound(t, b, "c1", "in2")
	b.WaitFor("the dead letter", 10*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1 })
	var reason string
	_ = b.Pool.QueryRow(context.Background(), `SELECT reason FROM ordo.dead_letters`).Scan(&reason)
	if !strings.Contains(reason, "reply deadline (1s)") || !strings.Contains(reason, "/v1/messages/in1/replies") {
		t.Fatalf("dead letter reason %q", reason)
	}
	b.WaitFor("the conversation to halt", 5*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.conversations WHERE halted_at IS NOT NULL`) == 1
	})
	_, err := b.Engine.PostReplies(context.Background(), b.Tenant.ID, "in1", repliesJSON("late"))
	if engine.ErrorCode(err) != engine.CodeNotWaiting {
		t.Fatalf("replies after the deadline: %v; want not_waiting", err)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.steps WHERE replies IS NOT NULL OR kind = 'send'`); n != 0 {
		t.Fatalf("%d steps hold refused replies", n)
	}
	time.Sleep(200 * time.Millisecond)
	if calls.Load() != 1 {
		t.Fatalf("handler called %d times (in2 must wait behind the halted in1)", calls.Load())
	}
}

// Replies posted just as the drain gives up on them (the deadline passed,
// the dead letter not written yet) are sent, not dropped: the dead letter
// rolls back (ordo.check_no_replies). Forced with a hook.
func TestAsyncRepliesRacingTheDeadLetterAreSent(t *testing.T) {
	t.Parallel()
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(h.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL, NoStart: true})
	setTenant(t, b, tenants.UpdateParams{HandlerMode: ptr("async"), ReplyDeadlineMS: ptr(1000)})
	var posted atomic.Bool
	jobs.SetReplyHooks(b.Runner, nil, func(int64) {
		if posted.Swap(true) {
			return
		}
		if _, err := b.Engine.PostReplies(context.Background(), b.Tenant.ID, "in1", repliesJSON("just in time")); err != nil {
			t.Errorf("post replies at the deadline: %v", err)
		}
	})
	b.Start()
	inbound(t, b, "c1", "in1")
	b.WaitFor("the reply", 10*time.Second, func() bool { return len(b.WhatsApp.Sends()) == 1 })
	b.WaitFor("the message done", 5*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 1
	})
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters; the replies won the race", n)
	}
}

// A handler call longer than the drain's lease (an AI step) is allowed up
// to the tenant's handler_timeout: the lease is lengthened for the call, so
// the call is made once and its replies go out.
func TestHandlerTimeoutPerTenantOutlastsTheLease(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		time.Sleep(2500 * time.Millisecond)
		_, _ = io.WriteString(w, `{"replies":[`+reply("slow")+`]}`)
	}))
	t.Cleanup(h.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL, Config: jobs.Config{
		Lease: 1500 * time.Millisecond, SendTimeout: time.Second, HandlerTimeout: time.Minute}})
	setTenant(t, b, tenants.UpdateParams{HandlerTimeoutMS: ptr(5000), MaxAttempts: ptr(1)})
	inbound(t, b, "c1", "in1")
	b.WaitFor("the reply", 15*time.Second, func() bool { return len(b.WhatsApp.Sends()) == 1 })
	if calls.Load() != 1 {
		t.Fatalf("handler called %d times, want once", calls.Load())
	}

	// And a tenant's shorter timeout cuts a call short (not called again: dead).
	setTenant(t, b, tenants.UpdateParams{HandlerTimeoutMS: ptr(1000)})
	inbound(t, b, "c2", "in2")
	b.WaitFor("the dead letter", 15*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1 })
	var reason string
	_ = b.Pool.QueryRow(context.Background(), `SELECT reason FROM ordo.dead_letters`).Scan(&reason)
	if !strings.Contains(reason, "the handler took longer than 1 s") {
		t.Fatalf("dead letter %q; want a timeout", reason)
	}
}

// A handler that is not there (connection refused, 5xx) is retried within
// the attempts, and the dead letter asks whether the workflow is active.
func TestHandlerNotThereIsRetriedThenAsksIfTheWorkflowIsActive(t *testing.T) {
	t.Parallel()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // connection refused from now on
	var calls atomic.Int32
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, `{"replies":[`+reply("back")+`]}`)
	}))
	t.Cleanup(flaky.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: gone.URL, Config: jobs.Config{RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond}})
	setTenant(t, b, tenants.UpdateParams{MaxAttempts: ptr(3), OnDeadLetter: ptr("skip")})
	// Down for longer than the tenant's outage limit: its failures count
	// as attempts again (reachability_test.go has the outage itself).
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET handler_outage_limit_ms = 60000`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(context.Background(), `INSERT INTO ordo.dependencies (tenant_id, what, down_since, probe_at)
		SELECT id, 'handler', now() - interval '2 minutes', now() FROM ordo.tenants`); err != nil {
		t.Fatal(err)
	}
	inbound(t, b, "c1", "in1")
	b.WaitFor("the dead letter", 10*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1 })
	var reason string
	var attempts int
	_ = b.Pool.QueryRow(context.Background(), `SELECT d.reason, s.attempts FROM ordo.dead_letters d JOIN ordo.steps s ON s.id = d.step_id`).Scan(&reason, &attempts)
	if attempts != 3 || !strings.Contains(reason, "is the n8n workflow active?") {
		t.Fatalf("dead letter after %d attempts: %q", attempts, reason)
	}
	setTenant(t, b, tenants.UpdateParams{HandlerURL: &flaky.URL})
	inbound(t, b, "c2", "in2")
	// 503s are the handler unreachable: probes with a backoff of a second,
	// then two.
	b.WaitFor("the reply after two 503s", 30*time.Second, func() bool { return len(b.WhatsApp.Sends()) == 1 })
}

// The tenant's Header Auth or Basic Auth (stored encrypted) reaches the
// handler on every call, and never a log line.
func TestHandlerAuthIsSentAndNeverLogged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, cred string
		check      func(r *http.Request) bool
	}{
		{name: "header", cred: `{"header":"X-N8N-Key","value":"hdr-s3cret-value"}`, check: func(r *http.Request) bool {
			return r.Header.Get("X-N8N-Key") == "hdr-s3cret-value"
		}},
		{name: "basic", cred: `{"basic_user":"n8n","basic_password":"basic-s3cret-value"}`, check: func(r *http.Request) bool {
			u, p, ok := r.BasicAuth()
			return ok && u == "n8n" && p == "basic-s3cret-value"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var seen atomic.Bool
			h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !tc.check(r) {
					w.WriteHeader(http.StatusForbidden) // n8n's answer to a wrong credential
					return
				}
				seen.Store(true)
				_, _ = io.WriteString(w, `{"replies":[`+reply("ok")+`]}`)
			}))
			t.Cleanup(h.Close)
			var logs lockedBuffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL, NoStart: true, Logger: logger})
			if err := b.Vault.Put(context.Background(), nil, b.Tenant.ID, tenants.HandlerAuthCredential, []byte(tc.cred)); err != nil {
				t.Fatal(err)
			}
			b.Start()
			inbound(t, b, "c1", "in1")
			b.WaitFor("the reply", 10*time.Second, func() bool { return len(b.WhatsApp.Sends()) == 1 })
			if !seen.Load() {
				t.Fatal("the handler never got its auth")
			}
			if out := logs.String(); strings.Contains(out, "s3cret") {
				t.Fatalf("a log line carries the handler auth:\n%s", out)
			}
		})
	}
}

// Without the auth the handler asks for, n8n answers 403: a dead letter
// that says what to set.
func TestHandlerRefusingOrdoNamesTheCredential(t *testing.T) {
	t.Parallel()
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) }))
	t.Cleanup(h.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL})
	inbound(t, b, "c1", "in1")
	b.WaitFor("the dead letter", 10*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1 })
	var reason string
	_ = b.Pool.QueryRow(context.Background(), `SELECT reason FROM ordo.dead_letters`).Scan(&reason)
	if !strings.Contains(reason, "--name handler_auth") {
		t.Fatalf("dead letter %q", reason)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Under the skip policy, a message whose async replies never came is
// dead-lettered and the conversation goes on to its next message.
func TestAsyncDeadlinePassedSkipGoesOn(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(h.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL})
	setTenant(t, b, tenants.UpdateParams{HandlerMode: ptr("async"), ReplyDeadlineMS: ptr(1000), OnDeadLetter: ptr("skip")})
	inbound(t, b, "c1", "in1")
	inbound(t, b, "c1", "in2")
	waitingFor(b, "in2")
	if _, err := b.Engine.PostReplies(context.Background(), b.Tenant.ID, "in2", repliesJSON("for in2")); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("in1 dead and in2 done", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE (message_id = 'in1' AND status = 'dead') OR (message_id = 'in2' AND status = 'done')`) == 2
	})
	if got := texts(b.WhatsApp.Sends()); strings.Join(got, "|") != "for in2" {
		t.Fatalf("sent %v", got)
	}
	if calls.Load() != 2 {
		t.Fatalf("handler called %d times, want once per message", calls.Load())
	}
}
