package jobs_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

// fakeHandler is a tenant's handler: it checks ordo's signature, answers three
// replies per message after a delay, and fails some calls with 500 before
// answering (an answer ordo never got, so it must call again).
type fakeHandler struct {
	secret   string
	failRate float64
	mu       sync.Mutex
	answered map[string]int // message_id -> 2xx answers
	badSig   int
}

func (h *fakeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	mac := hmac.New(sha256.New, []byte(h.secret))
	mac.Write(body)
	var in struct {
		Tenant, ConversationID, MessageID string
		Seq                               int64
	}
	_ = json.Unmarshal(body, &struct {
		Tenant         *string `json:"tenant"`
		ConversationID *string `json:"conversation_id"`
		MessageID      *string `json:"message_id"`
		Seq            *int64  `json:"seq"`
	}{&in.Tenant, &in.ConversationID, &in.MessageID, &in.Seq})
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Header.Get("X-Ordo-Signature") != "sha256="+hex.EncodeToString(mac.Sum(nil)) ||
		r.Header.Get("Idempotency-Key") != in.Tenant+":"+in.MessageID {
		h.badSig++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	h.mu.Unlock()
	time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond)
	h.mu.Lock()
	if rand.Float64() < h.failRate {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	h.answered[in.MessageID]++
	replies := make([]map[string]any, 3)
	for i := range replies {
		replies[i] = map[string]any{"type": "text", "text": map[string]string{"body": fmt.Sprintf("%s r%d", in.MessageID, i+1)}}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"replies": replies})
}

// Inbound messages with three replies each, a slow handler that sometimes
// fails: every reply is sent once, all of message k's before any of k+1's,
// and the handler answers each message once.
func TestInboundRepliesInOrderDespiteHandlerFailures(t *testing.T) {
	t.Parallel()
	h := &fakeHandler{failRate: 0.25, answered: map[string]int{}}
	srv := httptest.NewServer(h)
	defer srv.Close()
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: srv.URL, NoStart: true})
	h.secret = b.Secret
	b.Start()

	const convs, perConv = 8, 6
	expected := map[string][]string{}
	var wg sync.WaitGroup
	for c := range convs {
		conv := fmt.Sprintf("u%d", c)
		for k := range perConv {
			for r := 1; r <= 3; r++ {
				expected[conv] = append(expected[conv], fmt.Sprintf("%s-in%d r%d", conv, k, r))
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range perConv {
				_, err := b.Engine.Ingest(context.Background(), engine.NewMessage{
					Tenant: "acme", ConversationID: conv, MessageID: fmt.Sprintf("%s-in%d", conv, k), Direction: "inbound",
					Payload: json.RawMessage(`{"message":{"type":"text","text":{"body":"hi"}}}`),
				})
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(ctx, convs*perConv*3); err != nil {
		t.Fatalf("waiting for replies: %v (got %d)", err, len(b.WhatsApp.Sends()))
	}
	time.Sleep(200 * time.Millisecond)
	if rep := whatsapptest.Check(b.WhatsApp.Sends(), expected); !rep.OK() {
		t.Fatalf("provider saw: %s", rep)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.badSig != 0 {
		t.Fatalf("%d handler calls had a bad signature or idempotency key", h.badSig)
	}
	for id, n := range h.answered {
		if n != 1 {
			t.Errorf("handler answered %s %d times; an answer ordo received must not be asked again", id, n)
		}
	}
	if len(h.answered) != convs*perConv {
		t.Fatalf("handler answered %d messages, want %d", len(h.answered), convs*perConv)
	}
}

// A permanently failing message is dead-lettered with its errors. Under halt
// its conversation waits (other conversations do not), and replay sends it
// and then the ones behind it, in order.
func TestDeadLetterHaltsThenReplayResumesInOrder(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{})
	fail := map[string]bool{"bad": true}
	var mu sync.Mutex
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		mu.Lock()
		defer mu.Unlock()
		if fail[req.Text] {
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131026}
		}
		return whatsapptest.Default(req, attempt)
	})
	b.Ingest("c1", "m1", "one")
	b.Ingest("c1", "m2", "bad")
	b.Ingest("c1", "m3", "three")
	b.Ingest("c2", "n1", "other")
	b.WaitFor("dead letter", 10*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1 })
	b.WaitFor("c2 to be sent", 10*time.Second, func() bool { return len(b.WhatsApp.SendsTo("c2")) == 1 })
	time.Sleep(300 * time.Millisecond)
	if got := texts(b.WhatsApp.SendsTo("c1")); fmt.Sprint(got) != "[one]" {
		t.Fatalf("c1 sent %v while halted on m2; want [one]", got)
	}
	conv, err := b.Engine.Conversation(context.Background(), b.Tenant.ID, "c1")
	if err != nil || conv.Status != "halted" || conv.HeadSeq != 1 || conv.LastSeq != 3 {
		t.Fatalf("conversation = %+v, %v; want halted at head 1 of 3", conv, err)
	}
	dls, err := b.Engine.DeadLetters(context.Background(), engine.DeadLetterFilter{TenantID: b.Tenant.ID})
	if err != nil || len(dls) != 1 || dls[0].MessageID != "m2" || len(dls[0].Errors) < 10 {
		t.Fatalf("dead letters = %+v, %v", dls, err)
	}
	if m, _ := b.Engine.Message(context.Background(), b.Tenant.ID, "m2"); m.Status != "dead" || m.Steps[0].Status != "failed" || m.Steps[0].LastError == "" {
		t.Fatalf("m2 = %+v", m)
	}

	mu.Lock()
	fail["bad"] = false
	mu.Unlock()
	if _, err := b.Engine.Replay(context.Background(), b.Tenant.ID, dls[0].ID, engine.ActorCLI); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine.Replay(context.Background(), b.Tenant.ID, dls[0].ID, engine.ActorCLI); engine.ErrorCode(err) != engine.CodeConflict {
		t.Fatalf("second replay: %v, want conflict", err)
	}
	b.WaitFor("c1 to finish", 10*time.Second, func() bool { return len(b.WhatsApp.SendsTo("c1")) == 3 })
	if got := texts(b.WhatsApp.SendsTo("c1")); fmt.Sprint(got) != "[one bad three]" {
		t.Fatalf("c1 sent %v after replay, want [one bad three]", got)
	}
}

// Under the skip policy a dead message does not hold its conversation up.
func TestDeadLetterSkipPolicyGoesOn(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{})
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET on_dead_letter = 'skip', max_attempts = 3`); err != nil {
		t.Fatal(err)
	}
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if req.Text == "flaky" {
			return whatsapptest.Response{Status: http.StatusInternalServerError}
		}
		return whatsapptest.Default(req, attempt)
	})
	b.Ingest("c1", "m1", "one")
	b.Ingest("c1", "m2", "flaky")
	b.Ingest("c1", "m3", "three")
	b.WaitFor("c1 to go on", 10*time.Second, func() bool { return len(b.WhatsApp.SendsTo("c1")) == 2 })
	if got := texts(b.WhatsApp.SendsTo("c1")); fmt.Sprint(got) != "[one three]" {
		t.Fatalf("c1 sent %v, want [one three]", got)
	}
	var attempts, errs int
	if err := b.Pool.QueryRow(context.Background(), `SELECT s.attempts, jsonb_array_length(d.errors) FROM ordo.dead_letters d JOIN ordo.steps s ON s.id = d.step_id`).Scan(&attempts, &errs); err != nil {
		t.Fatal(err)
	}
	if attempts != 3 || errs != 3 {
		t.Fatalf("dead letter after %d attempts with %d errors; want 3 and 3", attempts, errs)
	}
	// The provider records a send before ordo records its answer: wait for the head.
	b.WaitFor("the conversation to be active at head 3", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.conversations WHERE halted_at IS NULL AND head_seq = 3`) == 1
	})
}

// ordo.enqueue_message inside a caller's transaction: a commit makes the
// message real and sent, a rollback leaves no trace (no message, no seq, no job).
func TestEnqueueInCallerTransaction(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{})
	ctx := context.Background()
	const q = `SELECT id, seq, duplicate FROM ordo.enqueue_message('acme', 'c9', $1, 'outbound', $2)`
	tx, _ := b.Pool.Begin(ctx)
	var id, seq int64
	var dup bool
	if err := tx.QueryRow(ctx, q, "rolled-back", jobstest.Outbound("c9", "never")).Scan(&id, &seq, &dup); err != nil || seq != 1 || dup {
		t.Fatalf("enqueue in tx: seq %d dup %t err %v", seq, dup, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.messages`) + b.Count(`SELECT count(*) FROM ordo.conversations`) + b.Count(`SELECT count(*) FROM ordo.ready`); n != 0 {
		t.Fatalf("rollback left %d rows behind", n)
	}
	tx, _ = b.Pool.Begin(ctx)
	if err := tx.QueryRow(ctx, q, "committed", jobstest.Outbound("c9", "hello")).Scan(&id, &seq, &dup); err != nil || seq != 1 || dup {
		t.Fatalf("enqueue in tx: seq %d dup %t err %v", seq, dup, err)
	}
	time.Sleep(200 * time.Millisecond)
	if len(b.WhatsApp.Sends()) != 0 {
		t.Fatal("a message was sent before its transaction committed")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("the committed message to be sent", 10*time.Second, func() bool { return len(b.WhatsApp.Sends()) == 1 })
	if err := b.Pool.QueryRow(ctx, q, "committed", jobstest.Outbound("c9", "hello")).Scan(&id, &seq, &dup); err != nil || !dup || seq != 1 {
		t.Fatalf("repeat: seq %d dup %t err %v; want the original as a duplicate", seq, dup, err)
	}
	for _, bad := range []struct{ conv, id, want string }{
		{"", "x", "conversation_id: required"},
		{"c\x01", "x", "conversation_id: must be 1 to 256 printable characters, without control characters or line separators: U+0001 at character 2"},
		{"c", string(make([]byte, 0)), "message_id: required"},
	} {
		_, err := b.Engine.Ingest(ctx, engine.NewMessage{Tenant: "acme", ConversationID: bad.conv, MessageID: bad.id, Payload: jobstest.Outbound("c", "x")})
		if engine.ErrorCode(err) != engine.CodeInvalid || engine.ErrorMessage(err) != bad.want {
			t.Errorf("ingest(%q, %q) = %v; want invalid %q", bad.conv, bad.id, err, bad.want)
		}
	}
}

func texts(sends []whatsapptest.Send) []string {
	out := make([]string, len(sends))
	for i, s := range sends {
		out[i] = s.Text
	}
	return out
}
