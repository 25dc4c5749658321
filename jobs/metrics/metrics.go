// Package metrics is ordo's Prometheus exposition: the counters and
// histograms that ingest (engine), the drains (jobs) and the HTTP server
// (web) record, the gauges read from the database on scrape (stats.go), the
// pgx pool (pool.go), the Go runtime and the build. Everything lives on one
// registry per process, injected from cmd/ (no global registry): a *Metrics
// is passed down in each package's Config, and a nil *Metrics records
// nothing, so tests and tools that do not care need not build one.
//
// Labels are bounded: a source, a direction, a step kind, an outcome, a
// status code, a route template; a tenant's slug only on the database gauges
// and only for Config.MaxTenants tenants; never a conversation or message
// id.
package metrics

import (
	"cmp"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric of ordo's own.
const Namespace = "ordo"

// Defaults of Config, by field.
const (
	StatsTTLDefault     = 5 * time.Second
	StatsTimeoutDefault = 2 * time.Second
	MaxTenantsDefault   = 50
)

// Build is what ordo_build_info says about the binary (`ordo version`).
type Build struct {
	Version   string
	Commit    string
	GoVersion string
}

// Config says what a process exports besides its own counters.
type Config struct {
	// Registry receives every collector. Default: a new one.
	Registry *prometheus.Registry
	// Build labels ordo_build_info. Default: empty labels.
	Build Build
	// Pool, if set, is exported as ordo_db_pool_* (pool.go).
	Pool *pgxpool.Pool
	// Stats, if set, is read on scrape for the database gauges (stats.go),
	// at most once per StatsTTL (default StatsTTLDefault, 5s), each read
	// bounded by StatsTimeout (default StatsTimeoutDefault, 2s).
	Stats        StatsFunc
	StatsTTL     time.Duration
	StatsTimeout time.Duration
	// MaxTenants is how many tenants (the largest backlogs first) get a
	// label of their own on the database gauges; the rest are summed under
	// tenant="_other" (an underscore is never in a slug). Default
	// MaxTenantsDefault (50).
	MaxTenants int
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	c.StatsTTL = cmp.Or(c.StatsTTL, StatsTTLDefault)
	c.StatsTimeout = cmp.Or(c.StatsTimeout, StatsTimeoutDefault)
	c.MaxTenants = cmp.Or(c.MaxTenants, MaxTenantsDefault)
	return c
}

// Metrics records what a process does. Its methods are safe for concurrent
// use, and do nothing on a nil *Metrics.
type Metrics struct {
	reg *prometheus.Registry

	accepted         *prometheus.CounterVec
	duplicates       *prometheus.CounterVec
	steps            *prometheus.CounterVec
	sendSeconds      *prometheus.HistogramVec
	handlerSeconds   *prometheus.HistogramVec
	acceptToSend     prometheus.Histogram
	webhooks         *prometheus.CounterVec
	webhookStatuses  prometheus.Counter
	httpRequests     *prometheus.CounterVec
	httpSeconds      *prometheus.HistogramVec
	httpInFlight     prometheus.Gauge
	drainsRunning    prometheus.Gauge
	drainRunsStarted prometheus.Counter
	drainBatches     prometheus.Counter
	billable         *prometheus.CounterVec
}

// Sources of an accepted message.
const (
	SourceREST    = "rest"
	SourceWebhook = "webhook"
)

// Outcomes of a step attempt (ordo_steps_total's outcome label).
const (
	StepDone      = "done"      // recorded done
	StepRetry     = "retry"     // failed; retried after backoff
	StepAmbiguous = "ambiguous" // may have gone out; settled before any resend
	StepDead      = "dead"      // dead-lettered
	StepPaused    = "paused"    // the tenant's sending paused; the attempt given back
	StepWaiting   = "waiting"   // the tenant's handler or number unreachable; the attempt given back
)

// latencyBuckets are for calls to the outside (a send, a handler): from a
// loopback fake's millisecond to a timeout's tens of seconds.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// endToEndBuckets are for accept→send: queueing, pacing and retries
// included, so they reach an hour.
var endToEndBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// New registers ordo's collectors on cfg.Registry and returns the recorder.
func New(cfg Config) (*Metrics, error) {
	cfg = cfg.WithDefaults()
	m := &Metrics{
		reg: cfg.Registry,
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "messages_accepted_total",
			Help: "Messages accepted for the first time, by source (rest, webhook) and direction. Messages accepted through SQL (ordo.enqueue_message) are not counted here: they show in the backlog gauges.",
		}, []string{"source", "direction"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "messages_duplicate_total",
			Help: "Repeats of an accepted message_id, answered with the original, by source and direction.",
		}, []string{"source", "direction"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "steps_total",
			Help: "Step attempts by kind (handle, send) and outcome (done, retry, ambiguous, dead, paused).",
		}, []string{"kind", "outcome"}),
		sendSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "send_duration_seconds",
			Help:    "Duration of one request to the WhatsApp Cloud API, by result (ok, error).",
			Buckets: latencyBuckets,
		}, []string{"result"}),
		handlerSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "handler_duration_seconds",
			Help:    "Duration of one call of a tenant's handler, by result (ok, error).",
			Buckets: latencyBuckets,
		}, []string{"result"}),
		acceptToSend: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "accept_to_send_seconds",
			Help:    "From a message's acceptance to the answer of each of its sends (an inbound message's replies included).",
			Buckets: endToEndBuckets,
		}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "webhook_deliveries_total",
			Help: "Meta's webhook deliveries (POST) by HTTP status answered.",
		}, []string{"code"}),
		webhookStatuses: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "webhook_statuses_total",
			Help: "Delivery statuses (sent, delivered, read, failed) in committed webhook deliveries.",
		}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "http_requests_total",
			Help: "HTTP requests by route template, method and status code.",
		}, []string{"route", "method", "code"}),
		httpSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "http_request_duration_seconds",
			Help:    "HTTP request duration by route template.",
			Buckets: latencyBuckets,
		}, []string{"route"}),
		httpInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "http_requests_in_flight",
			Help: "HTTP requests being served now (each holds a goroutine beside its connection's).",
		}),
		drainsRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "drains_running",
			Help: "Conversations this process is draining now.",
		}),
		drainRunsStarted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "drain_runs_total",
			Help: "Drain runs this process started (a claimed conversation each).",
		}),
		drainBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "drain_batches_total",
			Help: "Batches of conversations this process claimed and drained together (the batched drain).",
		}),
		billable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "billable_messages_total",
			Help: "Sent messages Meta bills, by tenant and pricing category, counted once per message when the first status with its pricing is stored (GET /v1/usage has the totals).",
		}, []string{"tenant", "category"}),
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "The build, as `ordo version` prints it; always 1.",
		ConstLabels: prometheus.Labels{"version": cfg.Build.Version, "commit": cfg.Build.Commit, "goversion": cfg.Build.GoVersion},
	})
	build.Set(1)
	cs := []prometheus.Collector{
		m.accepted, m.duplicates, m.steps, m.sendSeconds, m.handlerSeconds, m.acceptToSend,
		m.webhooks, m.webhookStatuses, m.httpRequests, m.httpSeconds, m.httpInFlight, m.drainsRunning, m.drainRunsStarted, m.drainBatches, m.billable, build,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	if cfg.Pool != nil {
		cs = append(cs, newPoolCollector(cfg.Pool))
	}
	if cfg.Stats != nil {
		cs = append(cs, newStatsCollector(cfg))
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Handler serves the exposition (GET /metrics).
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, Timeout: 10 * time.Second})
}

// Accepted counts offered messages of source and direction: accepted new
// ones and duplicates.
func (m *Metrics) Accepted(source, direction string, accepted, duplicates int) {
	if m == nil {
		return
	}
	if direction == "" {
		direction = "outbound"
	}
	if accepted > 0 {
		m.accepted.WithLabelValues(source, direction).Add(float64(accepted))
	}
	if duplicates > 0 {
		m.duplicates.WithLabelValues(source, direction).Add(float64(duplicates))
	}
}

// Step counts a step attempt's outcome; kind is handle or send.
func (m *Metrics) Step(kind, outcome string) {
	if m == nil {
		return
	}
	m.steps.WithLabelValues(kind, outcome).Inc()
}

// Call records the duration of a step's external call: kind send (the
// Cloud API) or handle (the tenant's handler).
func (m *Metrics) Call(kind string, d time.Duration, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	h := m.sendSeconds
	if kind == "handle" {
		h = m.handlerSeconds
	}
	h.WithLabelValues(result).Observe(d.Seconds())
}

// AcceptToSend records the time from a message's acceptance to a send's
// answer.
func (m *Metrics) AcceptToSend(d time.Duration) {
	if m == nil {
		return
	}
	m.acceptToSend.Observe(d.Seconds())
}

// Webhook counts a webhook delivery answered code.
func (m *Metrics) Webhook(code int) {
	if m == nil {
		return
	}
	m.webhooks.WithLabelValues(strconv.Itoa(code)).Inc()
}

// WebhookStatuses counts the delivery statuses of a committed webhook.
func (m *Metrics) WebhookStatuses(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.webhookStatuses.Add(float64(n))
}

// Billable counts n newly recorded billable messages of tenant in category.
func (m *Metrics) Billable(tenant, category string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.billable.WithLabelValues(tenant, category).Add(float64(n))
}

// HTTP records a request; route is the matched route's template (never
// the path itself, which holds ids), empty for none.
func (m *Metrics) HTTP(route, method string, code int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = "none"
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
	default:
		method = "other" // the method is the client's choice: keep the label bounded
	}
	m.httpRequests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	m.httpSeconds.WithLabelValues(route).Observe(d.Seconds())
}

// HTTPStarted counts a request in flight and returns the function that
// ends it (ordo_http_requests_in_flight): the soak reads it to tell the
// goroutines requests hold from ones that stay (cmd/internal/chaos).
func (m *Metrics) HTTPStarted() (done func()) {
	if m == nil {
		return func() {}
	}
	m.httpInFlight.Inc()
	return m.httpInFlight.Dec
}

// BatchClaimed counts a batch of conversations claimed together.
func (m *Metrics) BatchClaimed() {
	if m != nil {
		m.drainBatches.Inc()
	}
}

// DrainStarted counts a drain run and returns the function that ends it.
func (m *Metrics) DrainStarted() (done func()) {
	if m == nil {
		return func() {}
	}
	m.drainRunsStarted.Inc()
	m.drainsRunning.Inc()
	return m.drainsRunning.Dec
}
