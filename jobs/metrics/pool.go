package metrics

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolCollector exports pgxpool.Stat on each scrape: reading it costs a
// lock of the pool, no query.
type poolCollector struct {
	pool  *pgxpool.Pool
	descs map[string]*prometheus.Desc
}

// poolMetrics are the pool's numbers: name, help, counter or gauge.
var poolMetrics = []struct {
	name, help string
	counter    bool
}{
	{"db_pool_acquired_conns", "Connections in use (a running drain holds one for its whole run).", false},
	{"db_pool_idle_conns", "Idle connections.", false},
	{"db_pool_constructing_conns", "Connections being opened.", false},
	{"db_pool_total_conns", "Connections open or being opened.", false},
	{"db_pool_max_conns", "The pool's size (pool_max_conns; default workers + 25).", false},
	{"db_pool_acquires_total", "Successful acquires.", true},
	{"db_pool_acquire_duration_seconds_total", "Time spent acquiring, summed.", true},
	{"db_pool_empty_acquires_total", "Acquires that had to wait for a connection.", true},
	{"db_pool_canceled_acquires_total", "Acquires cancelled by their context.", true},
	{"db_pool_new_conns_total", "Connections opened.", true},
	{"db_pool_max_lifetime_destroys_total", "Connections closed for their age.", true},
	{"db_pool_max_idle_destroys_total", "Connections closed for idling.", true},
}

func newPoolCollector(pool *pgxpool.Pool) *poolCollector {
	c := &poolCollector{pool: pool, descs: map[string]*prometheus.Desc{}}
	for _, pm := range poolMetrics {
		c.descs[pm.name] = prometheus.NewDesc(Namespace+"_"+pm.name, pm.help, nil, nil)
	}
	return c
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	values := map[string]float64{
		"db_pool_acquired_conns":                 float64(s.AcquiredConns()),
		"db_pool_idle_conns":                     float64(s.IdleConns()),
		"db_pool_constructing_conns":             float64(s.ConstructingConns()),
		"db_pool_total_conns":                    float64(s.TotalConns()),
		"db_pool_max_conns":                      float64(s.MaxConns()),
		"db_pool_acquires_total":                 float64(s.AcquireCount()),
		"db_pool_acquire_duration_seconds_total": s.AcquireDuration().Seconds(),
		"db_pool_empty_acquires_total":           float64(s.EmptyAcquireCount()),
		"db_pool_canceled_acquires_total":        float64(s.CanceledAcquireCount()),
		"db_pool_new_conns_total":                float64(s.NewConnsCount()),
		"db_pool_max_lifetime_destroys_total":    float64(s.MaxLifetimeDestroyCount()),
		"db_pool_max_idle_destroys_total":        float64(s.MaxIdleDestroyCount()),
	}
	for _, pm := range poolMetrics {
		t := prometheus.GaugeValue
		if pm.counter {
			t = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(c.descs[pm.name], t, values[pm.name])
	}
}
