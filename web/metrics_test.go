package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/metrics"
	"github.com/ordo-dev/ordo/web"
)

// GET /metrics after one message sent and one dead-lettered (which halts
// its conversation, the tenant's default policy): the ingest counters, the
// step outcomes, the latencies and the database gauges say so, with the
// tenant's slug on the gauges only and no conversation or message id
// anywhere.
func TestMetricsOverHTTP(t *testing.T) {
	t.Parallel()
	var eng atomic.Pointer[engine.Engine]
	m, err := metrics.New(metrics.Config{
		StatsTTL: time.Millisecond,
		Stats:    func(ctx context.Context) ([]metrics.TenantStats, error) { return eng.Load().TenantStats(ctx) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var o options
	o.jobs = jobstest.Options{}
	o.jobs.Config.Metrics, o.web.Metrics = m, m
	e := start(t, o)
	eng.Store(e.Engine)
	e.WhatsApp.SetResponder(failPrefixed)

	mustStatus(t, "post ok-1", e.post(t, e.APIKey, "/v1/messages", outbound("ok-1", "conv-ok", "hello")), http.StatusAccepted)
	mustStatus(t, "repeat ok-1", e.post(t, e.APIKey, "/v1/messages", outbound("ok-1", "conv-ok", "hello")), http.StatusOK)
	e.waitStatus(t, e.APIKey, "ok-1", "done")
	e.deadLetter(t, "bad-1", "conv-bad")
	mustStatus(t, "post behind the dead letter", e.post(t, e.APIKey, "/v1/messages", outbound("ok-2", "conv-bad", "waits")), http.StatusAccepted)

	a := e.get(t, "", "/metrics")
	mustStatus(t, "GET /metrics without a key", a, http.StatusOK)
	body := string(a.body)
	for _, want := range []string{
		`ordo_messages_accepted_total{direction="outbound",source="rest"} 3`,
		`ordo_messages_duplicate_total{direction="outbound",source="rest"} 1`,
		`ordo_steps_total{kind="send",outcome="done"} 1`,
		`ordo_steps_total{kind="send",outcome="dead"} 1`,
		`ordo_send_duration_seconds_count{result="ok"} 1`,
		`ordo_send_duration_seconds_count{result="error"} 1`,
		`ordo_accept_to_send_seconds_count 1`,
		`ordo_backlog_messages{tenant="acme"} 2`, // the dead message and the one behind it
		`ordo_halted_conversations{tenant="acme"} 1`,
		`ordo_dead_letters_open{tenant="acme"} 1`,
		`ordo_sending_paused_tenants 0`,
		`ordo_http_requests_total{code="202",method="POST",route="/v1/messages"} 3`,
		`ordo_stats_up 1`,
		`ordo_http_requests_in_flight 1`, // this GET /metrics, and nothing left over
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	if !strings.Contains(body, `ordo_oldest_unfinished_age_seconds{tenant="acme"} `) {
		t.Error("/metrics has no ordo_oldest_unfinished_age_seconds for acme")
	}
	for _, id := range []string{"conv-ok", "conv-bad", "ok-1", "bad-1", "ok-2"} {
		if strings.Contains(body, id) {
			t.Errorf("/metrics names %q: no conversation or message id may be a label", id)
		}
	}
}

// Meta's webhook deliveries are counted by the status answered, their
// messages as accepted or duplicate inbound messages of source webhook.
func TestMetricsWebhookDeliveries(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := waStart(t, jobstest.Options{NoStart: true, Config: jobs.Config{Metrics: m}}, web.Config{Metrics: m})
	body := oneMessage(jobstest.PhoneNumberID, "16505551234", "wamid.metrics-1")
	e.deliverSigned(t, body)
	e.deliverSigned(t, body) // Meta's redelivery
	if status, _ := e.deliver(t, "acme", body, "sha256=00"); status != http.StatusUnauthorized {
		t.Fatalf("badly signed webhook answered %d, want 401", status)
	}
	rec := httptest.NewRecorder()
	e.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body = rec.Body.Bytes()
	for _, want := range []string{
		`ordo_webhook_deliveries_total{code="200"} 2`,
		`ordo_webhook_deliveries_total{code="401"} 1`,
		`ordo_messages_accepted_total{direction="inbound",source="webhook"} 1`,
		`ordo_messages_duplicate_total{direction="inbound",source="webhook"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}
