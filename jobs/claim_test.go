package jobs_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
)

// A claim walks its tenant's due conversations as it read them when it
// began, and may come to one only later: here it waits for the row of the
// first (an operator's purge holds it) while another worker process
// claims the second, calls its handler, gets 429 with Retry-After: 2 and
// parks it for 2 s. The purge commits; the claim goes on to the second
// conversation, which it had read as due. It must see that it is not due
// any more. Before, it took it over and called the handler again at once,
// ignoring the Retry-After — as it would have sent a 131056 retry early
// (TestPairRateStormDoesNotSlowOthers, rarely, on a loaded machine: there
// a claim stalled by the CPU stood in for the purge).
func TestClaimTakesOnlyAConversationStillDue(t *testing.T) {
	t.Parallel()
	const retryAfter = 2 * time.Second
	handler := newBusyOnceHandler(t)
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, HandlerURL: handler.URL, Config: jobs.Config{Workers: 1}})
	jobs.NoOverdraft(b.Runner) // one claim at a time in this process
	ctx := context.Background()
	inbound(t, b, "purged", "p1")
	inbound(t, b, "h", "h1")
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.ready SET due_at = now() - interval '1 minute'
		WHERE conversation_pk = (SELECT id FROM ordo.conversations WHERE conversation_id = 'purged')`); err != nil {
		t.Fatal(err)
	}
	purge, err := b.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = purge.Rollback(ctx) }()
	if _, err := purge.Exec(ctx, `DELETE FROM ordo.conversations WHERE conversation_id = 'purged'`); err != nil {
		t.Fatal(err)
	}

	// This process's one claim reads both as due and waits for the purged row.
	b.Start()
	b.WaitFor("a claim waiting for the purged row", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%ordo.claim(%'`) == 1
	})
	// Another process claims h meanwhile; its handler asks for 2 s.
	b.StartAnother()
	b.WaitFor("h parked after its handler's 429", 10*time.Second, func() bool {
		// Its failure recorded and its ready row no longer running: the
		// park committed. Or done already, on a machine so slow that the
		// wait ran out meanwhile.
		return b.Count(`SELECT count(*) FROM ordo.ready r JOIN ordo.conversations c ON c.id = r.conversation_pk
			JOIN ordo.messages m ON m.conversation_pk = c.id JOIN ordo.steps s ON s.message_pk = m.id
			WHERE c.conversation_id = 'h' AND NOT r.running AND jsonb_array_length(s.errors) > 0`) == 1 ||
			b.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'h1' AND status = 'done'`) == 1
	})
	if err := purge.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	b.WaitFor("h handled", 15*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'h1' AND status = 'done'`) == 1
	})
	handler.checkRetryAfter(t, retryAfter, "it answered")
}

// A tenant's handler was unreachable; the probe call finds it there, and it
// answers 429 with Retry-After: 2 (n8n busy). The answer brings the handler
// back (ordo.dependency_back), which wakes the conversations that waited for
// it — the probing conversation among them, its drain still running. That
// wake-up must not cut short the Retry-After the same drain records next.
// Before, the park took it for "go on at once": called again 20 ms later.
func TestProbeAnswersRetryAfterIsKept(t *testing.T) {
	t.Parallel()
	const retryAfter = 2 * time.Second
	handler := newBusyOnceHandler(t)
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, HandlerURL: handler.URL})
	ctx := context.Background()
	inbound(t, b, "h", "h1")
	// The state an outage leaves (TestUnreachableHandlerIsAStateTheConversationsWaitFor drives
	// it through real failures): the handler down, its probe free, the
	// conversation marked waiting for it.
	if _, err := b.Pool.Exec(ctx, `INSERT INTO ordo.dependencies (tenant_id, what, down_since, probe_at)
		VALUES ($1, 'handler', now() - interval '1 minute', now() - interval '1 second')`, b.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.conversations SET handler_wait = true WHERE conversation_id = 'h'`); err != nil {
		t.Fatal(err)
	}
	b.Start()
	b.WaitFor("h handled", 15*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'h1' AND status = 'done'`) == 1
	})
	if n := b.Count(`SELECT count(*) FROM ordo.dependencies WHERE what = 'handler' AND down_since IS NOT NULL`); n != 0 {
		t.Fatal("the probe's answer did not bring the handler back")
	}
	if n := b.Count(`SELECT count(*) FROM ordo.conversations WHERE handler_wait`); n != 0 {
		t.Fatal("the way back left the probing conversation marked waiting")
	}
	handler.checkRetryAfter(t, retryAfter, "its probe answered")
}

// busyOnceHandler is a tenant's handler that answers its first call 429
// with Retry-After: 2 (n8n busy) and every later one with no replies; it
// records when each call came.
type busyOnceHandler struct {
	*httptest.Server
	mu    sync.Mutex
	calls []time.Time
}

func newBusyOnceHandler(t *testing.T) *busyOnceHandler {
	h := &busyOnceHandler{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h.mu.Lock()
		h.calls = append(h.calls, time.Now())
		first := len(h.calls) == 1
		h.mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"replies":[]}`))
	}))
	t.Cleanup(h.Close)
	return h
}

// checkRetryAfter fails t unless the handler was called twice, the second
// time at least retryAfter after the 429 (what names that answer).
func (h *busyOnceHandler) checkRetryAfter(t *testing.T, retryAfter time.Duration, what string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.calls) != 2 {
		t.Fatalf("the handler was called %d times; want a 429 and a success", len(h.calls))
	}
	if d := h.calls[1].Sub(h.calls[0]); d < retryAfter {
		t.Fatalf("the handler was called again %s after %s 429 with Retry-After: 2", d, what)
	}
}
