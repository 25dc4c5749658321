package metrics

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TenantStats is one tenant's state as read from the database.
type TenantStats struct {
	Tenant string // the slug
	// Backlog is the messages accepted and not yet finished.
	Backlog int64
	// OldestUnfinished is the age of the oldest message at the head of one
	// of the tenant's conversations with work (a halted conversation's head
	// is its dead message); zero with none.
	OldestUnfinished time.Duration
	// Halted is the conversations waiting for an operator.
	Halted int64
	// OpenDeadLetters is the dead letters not replayed or skipped yet.
	OpenDeadLetters int64
	// SendingPaused says the tenant's sending is paused.
	SendingPaused bool
	// HandlerUnreachable says the tenant's handler does not answer: its
	// conversations wait for it.
	HandlerUnreachable bool
	// NumberUnreachable says the Cloud API does not serve the tenant's
	// WhatsApp number: its sends wait for it.
	NumberUnreachable bool
}

// StatsFunc reads every tenant that has a backlog, a halted conversation, an
// open dead letter or paused sending (engine.Engine.TenantStats): one
// bounded query, run at most once per Config.StatsTTL.
type StatsFunc func(ctx context.Context) ([]TenantStats, error)

// OtherTenants labels the sum of the tenants beyond Config.MaxTenants.
const OtherTenants = "_other"

// statsCollector turns StatsFunc's rows into gauges on scrape, caching them
// for the TTL so that several Prometheus servers (or a dashboard's burst)
// cost one query. Every ordo process exports them, whichever role: they
// describe the shared database, so aggregate them with max, not sum.
type statsCollector struct {
	read       StatsFunc
	ttl, limit time.Duration
	maxTenants int

	backlog, oldest, halted, deadLetters, paused, unreachable, numberDown, up, age *prometheus.Desc

	mu     sync.Mutex
	at     time.Time
	rows   []TenantStats
	failed bool
}

func newStatsCollector(cfg Config) *statsCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(Namespace+"_"+name, help, labels, nil)
	}
	return &statsCollector{
		read: cfg.Stats, ttl: cfg.StatsTTL, limit: cfg.StatsTimeout, maxTenants: cfg.MaxTenants,
		backlog:     d("backlog_messages", "Messages accepted and not finished, by tenant (the largest backlogs; the rest under tenant=\"_other\").", "tenant"),
		oldest:      d("oldest_unfinished_age_seconds", "Age of the oldest message at the head of a conversation with work, by tenant (\"_other\": the oldest of the rest).", "tenant"),
		halted:      d("halted_conversations", "Conversations halted on a dead letter, waiting for an operator, by tenant.", "tenant"),
		deadLetters: d("dead_letters_open", "Dead letters neither replayed nor skipped, by tenant.", "tenant"),
		paused:      d("sending_paused_tenants", "Tenants whose sending is paused (until `ordo tenant resume`)."),
		unreachable: d("handler_unreachable", "1 for each tenant whose handler does not answer (its conversations wait; one probe at a time looks for it).", "tenant"),
		numberDown:  d("number_unreachable", "1 for each tenant whose WhatsApp number the Cloud API does not serve (its sends wait; one probe send at a time looks for it).", "tenant"),
		up:          d("stats_up", "1 if the last read of the database gauges succeeded."),
		age:         d("stats_age_seconds", "Age of the database gauges served (they are cached for a few seconds)."),
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.backlog, c.oldest, c.halted, c.deadLetters, c.paused, c.unreachable, c.numberDown, c.up, c.age} {
		ch <- d
	}
}

// load returns the cached rows, read again once older than the TTL.
func (c *statsCollector) load() ([]TenantStats, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) >= c.ttl {
		ctx, cancel := context.WithTimeout(context.Background(), c.limit)
		rows, err := c.read(ctx)
		cancel()
		c.at, c.failed = time.Now(), err != nil
		if err == nil {
			c.rows = rows
		}
	}
	return c.rows, c.at, !c.failed
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	rows, at, ok := c.load()
	up := 0.0
	if ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, time.Since(at).Seconds())
	if !ok && rows == nil {
		return
	}
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b TenantStats) int {
		return cmp.Or(cmp.Compare(b.Backlog, a.Backlog), cmp.Compare(b.OpenDeadLetters, a.OpenDeadLetters), cmp.Compare(a.Tenant, b.Tenant))
	})
	var (
		other  TenantStats
		paused int
	)
	for i, r := range rows {
		if r.SendingPaused {
			paused++
		}
		if r.HandlerUnreachable {
			// Never folded into _other: an outage is what an alert is for.
			ch <- prometheus.MustNewConstMetric(c.unreachable, prometheus.GaugeValue, 1, r.Tenant)
		}
		if r.NumberUnreachable {
			ch <- prometheus.MustNewConstMetric(c.numberDown, prometheus.GaugeValue, 1, r.Tenant)
		}
		if i >= c.maxTenants {
			other.Backlog += r.Backlog
			other.OldestUnfinished = max(other.OldestUnfinished, r.OldestUnfinished)
			other.Halted += r.Halted
			other.OpenDeadLetters += r.OpenDeadLetters
			continue
		}
		c.tenant(ch, r.Tenant, r)
	}
	if len(rows) > c.maxTenants {
		c.tenant(ch, OtherTenants, other)
	}
	ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, float64(paused))
}

func (c *statsCollector) tenant(ch chan<- prometheus.Metric, label string, r TenantStats) {
	ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(r.Backlog), label)
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, r.OldestUnfinished.Seconds(), label)
	ch <- prometheus.MustNewConstMetric(c.halted, prometheus.GaugeValue, float64(r.Halted), label)
	ch <- prometheus.MustNewConstMetric(c.deadLetters, prometheus.GaugeValue, float64(r.OpenDeadLetters), label)
}
