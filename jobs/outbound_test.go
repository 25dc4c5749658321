package jobs_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/tenants"
)

// A handler URL whose name resolves to a refused address is refused when
// it is dialled, not only when it is set: "localhost" passes when set (a
// name is not resolved then), but with the operator denying 127.0.0.0/8
// the call is never made and the message is dead-lettered saying why.
// (main: no check at dial time; a name resolving to 169.254.169.254 was
// called.)
func TestHandlerRefusedAtDialTime(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte(`{"replies":[]}`))
	}))
	t.Cleanup(h.Close)
	port := h.URL[strings.LastIndex(h.URL, ":")+1:]
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: "http://localhost:" + port + "/hook", Config: jobs.Config{
		Outbound: tenants.OutboundPolicy{Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}},
	}})
	if _, err := b.Engine.Ingest(context.Background(), engine.NewMessage{
		Tenant: b.Tenant.Slug, ConversationID: "c1", MessageID: "in1", Direction: "inbound", Payload: []byte(`{"text":"hello"}`),
	}); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("the message to finish", 15*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status IN ('done', 'dead')`) == 1
	})
	var reason string
	_ = b.Pool.QueryRow(context.Background(), `SELECT reason FROM ordo.dead_letters`).Scan(&reason)
	if !strings.Contains(reason, "outbound address policy") || !strings.Contains(reason, "127.0.0.1") {
		t.Fatalf("dead letter reason %q; want the policy's refusal of 127.0.0.1", reason)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the handler was called %d times; want none", n)
	}
}
