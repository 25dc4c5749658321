package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/tenants"
)

// Issue 16 point 4: a message_id means one body. The same body again is
// 200 duplicate with the original's answer (however its JSON is written);
// another text, conversation or direction is 422 message_id_reused and
// stores nothing; Idempotency-Key stands for a missing message_id.
func TestMessageIDReuse(t *testing.T) {
	t.Parallel()
	e := start(t, options{})
	key := e.APIKey
	post := func(body string, h http.Header) answer {
		return e.call(t, request{method: http.MethodPost, path: "/v1/messages", key: key, body: body, header: h})
	}
	first := post(`{"message_id":"r-1","conversation_id":"c1","type":"text","text":{"body":"Step 1"}}`, nil)
	mustStatus(t, "original", first, http.StatusAccepted)
	orig := decode[engine.Accepted](t, first)

	// The same body with its keys in another order and "to" spelled out.
	again := post(`{"text":{"body":"Step 1"},"type":"text","to":"c1","conversation_id":"c1","message_id":"r-1"}`, nil)
	mustStatus(t, "same body", again, http.StatusOK)
	if a := decode[engine.Accepted](t, again); !a.Duplicate || a.ID != orig.ID || a.Seq != orig.Seq {
		t.Errorf("same body answered %+v, want the original %+v as a duplicate", a, orig)
	}
	for what, body := range map[string]string{
		"another text":         `{"message_id":"r-1","conversation_id":"c1","type":"text","text":{"body":"Step 2"}}`,
		"another conversation": `{"message_id":"r-1","conversation_id":"c2","type":"text","text":{"body":"Step 1"}}`,
		"inbound":              `{"message_id":"r-1","conversation_id":"c1","direction":"inbound","payload":{"type":"text","text":{"body":"Step 1"}}}`,
		"another recipient":    `{"message_id":"r-1","conversation_id":"c1","to":"16505550000","type":"text","text":{"body":"Step 1"}}`,
	} {
		mustError(t, what, post(body, nil), http.StatusUnprocessableEntity, "message_id_reused")
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages`); n != 1 {
		t.Errorf("%d messages stored, want the original only", n)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.conversations`); n != 1 {
		t.Errorf("%d conversations, want 1 (a refused repeat creates none)", n)
	}
	if n := e.Count(`SELECT last_seq FROM ordo.conversations`); n != 1 {
		t.Errorf("last_seq %d, want 1 (a refused repeat takes no seq)", n)
	}

	// Pruned long ago: the hash is part of the dedupe record.
	e.waitStatus(t, key, "r-1", "done")
	if _, err := e.Pool.Exec(t.Context(), `SELECT * FROM ordo.prune_messages($1, 'infinity', 'infinity')`, e.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.messages WHERE payload IS NULL AND body_hash IS NOT NULL`); n != 1 {
		t.Fatalf("the message was not pruned with its hash kept (%d)", n)
	}
	mustError(t, "another text after pruning", post(`{"message_id":"r-1","conversation_id":"c1","type":"text","text":{"body":"Step 2"}}`, nil), http.StatusUnprocessableEntity, "message_id_reused")
	mustStatus(t, "same body after pruning", post(`{"message_id":"r-1","conversation_id":"c1","type":"text","text":{"body":"Step 1"}}`, nil), http.StatusOK)

	// Idempotency-Key.
	h := http.Header{"Idempotency-Key": {"idem-1"}}
	a := post(`{"conversation_id":"c3","type":"text","text":{"body":"keyed"}}`, h)
	mustStatus(t, "Idempotency-Key as the id", a, http.StatusAccepted)
	if got := decode[engine.Accepted](t, a).MessageID; got != "idem-1" {
		t.Errorf("message_id %q, want the Idempotency-Key", got)
	}
	mustStatus(t, "Idempotency-Key repeat", post(`{"conversation_id":"c3","type":"text","text":{"body":"keyed"}}`, h), http.StatusOK)
	mustStatus(t, "Idempotency-Key and the same message_id", post(`{"message_id":"idem-1","conversation_id":"c3","type":"text","text":{"body":"keyed"}}`, h), http.StatusOK)
	mustError(t, "Idempotency-Key repeat with another body", post(`{"conversation_id":"c3","type":"text","text":{"body":"other"}}`, h), http.StatusUnprocessableEntity, "message_id_reused")
	mustError(t, "Idempotency-Key and another message_id", post(`{"message_id":"idem-2","conversation_id":"c3","type":"text","text":{"body":"keyed"}}`, h), http.StatusBadRequest, "invalid_request")
	mustError(t, "Idempotency-Key of 257 characters", post(`{"conversation_id":"c3","type":"text","text":{"body":"keyed"}}`, http.Header{"Idempotency-Key": {fmt.Sprintf("%0257d", 1)}}), http.StatusBadRequest, "invalid_request")
	mustError(t, "neither", post(`{"conversation_id":"c3","type":"text","text":{"body":"keyed"}}`, nil), http.StatusBadRequest, "invalid_request")
	if n := e.Count(`SELECT count(*) FROM ordo.messages WHERE message_id <> 'r-1'`); n != 1 {
		t.Errorf("%d keyed messages stored, want 1", n)
	}

	// Another tenant's key: its own namespace, the other body is its own message.
	other := e.otherTenant(t, "globex")
	mustStatus(t, "another tenant's r-1", e.call(t, request{method: http.MethodPost, path: "/v1/messages", key: other,
		body: `{"message_id":"r-1","conversation_id":"c1","type":"text","text":{"body":"Globex"}}`}), http.StatusAccepted)
}

// A reused id in a group-committed batch fails only itself: the batch's
// other messages are accepted (each once), the reuse is 422.
func TestMessageIDReuseInABatch(t *testing.T) {
	t.Parallel()
	e := start(t, options{})
	e.client = newClient(t, 64)
	mustStatus(t, "original", e.post(t, e.APIKey, "/v1/messages", outbound("dup", "c0", "original")), http.StatusAccepted)
	const n = 40
	var wg sync.WaitGroup
	answers := make([]answer, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, text := fmt.Sprintf("m-%d", i), "t"
			if i%10 == 0 {
				id, text = "dup", fmt.Sprintf("reused %d", i)
			}
			body, _ := json.Marshal(outbound(id, fmt.Sprintf("c%d", i%7), text))
			a, err := e.send(request{method: http.MethodPost, path: "/v1/messages", key: e.APIKey, body: string(body)})
			if err != nil {
				t.Error(err)
			}
			answers[i] = a
		}()
	}
	wg.Wait()
	for i, a := range answers {
		if i%10 == 0 {
			mustError(t, "reuse", a, http.StatusUnprocessableEntity, "message_id_reused")
		} else {
			mustStatus(t, fmt.Sprintf("m-%d", i), a, http.StatusAccepted)
		}
	}
	if got := e.Count(`SELECT count(*) FROM ordo.messages`); got != n-n/10+1 {
		t.Errorf("%d messages stored, want %d", got, n-n/10+1)
	}
}

// otherTenant creates another tenant and returns its API key.
func (e *env) otherTenant(t *testing.T, slug string) string {
	t.Helper()
	c, err := e.Tenants.Create(t.Context(), tenants.CreateParams{Slug: slug, Name: slug})
	if err != nil {
		t.Fatal(err)
	}
	return c.APIKey
}
