package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ordo-dev/ordo/jobs/metrics"
)

// Past MaxTenants, the tenants with the smaller backlogs are summed under
// tenant="_other" (their oldest age is the oldest of them); paused tenants
// are counted whoever they are; reads are cached for the TTL.
func TestStatsBoundedAndCached(t *testing.T) {
	t.Parallel()
	var reads atomic.Int32
	rows := []metrics.TenantStats{
		{Tenant: "small", Backlog: 1, OldestUnfinished: 90 * time.Second, OpenDeadLetters: 2, Halted: 1},
		{Tenant: "big", Backlog: 100, OldestUnfinished: 5 * time.Second},
		{Tenant: "mid", Backlog: 10, OldestUnfinished: 30 * time.Second, SendingPaused: true},
		{Tenant: "tiny", Backlog: 0, OpenDeadLetters: 1, Halted: 1, SendingPaused: true},
	}
	reg := prometheus.NewRegistry()
	_, err := metrics.New(metrics.Config{
		Registry: reg, MaxTenants: 2, StatsTTL: time.Hour,
		Stats: func(context.Context) ([]metrics.TenantStats, error) { reads.Add(1); return rows, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP ordo_backlog_messages Messages accepted and not finished, by tenant (the largest backlogs; the rest under tenant="_other").
# TYPE ordo_backlog_messages gauge
ordo_backlog_messages{tenant="_other"} 1
ordo_backlog_messages{tenant="big"} 100
ordo_backlog_messages{tenant="mid"} 10
# HELP ordo_dead_letters_open Dead letters neither replayed nor skipped, by tenant.
# TYPE ordo_dead_letters_open gauge
ordo_dead_letters_open{tenant="_other"} 3
ordo_dead_letters_open{tenant="big"} 0
ordo_dead_letters_open{tenant="mid"} 0
# HELP ordo_halted_conversations Conversations halted on a dead letter, waiting for an operator, by tenant.
# TYPE ordo_halted_conversations gauge
ordo_halted_conversations{tenant="_other"} 2
ordo_halted_conversations{tenant="big"} 0
ordo_halted_conversations{tenant="mid"} 0
# HELP ordo_oldest_unfinished_age_seconds Age of the oldest message at the head of a conversation with work, by tenant ("_other": the oldest of the rest).
# TYPE ordo_oldest_unfinished_age_seconds gauge
ordo_oldest_unfinished_age_seconds{tenant="_other"} 90
ordo_oldest_unfinished_age_seconds{tenant="big"} 5
ordo_oldest_unfinished_age_seconds{tenant="mid"} 30
# HELP ordo_sending_paused_tenants Tenants whose sending is paused (until ` + "`ordo tenant resume`" + `).
# TYPE ordo_sending_paused_tenants gauge
ordo_sending_paused_tenants 2
# HELP ordo_stats_up 1 if the last read of the database gauges succeeded.
# TYPE ordo_stats_up gauge
ordo_stats_up 1
`
	names := []string{"ordo_backlog_messages", "ordo_dead_letters_open", "ordo_halted_conversations",
		"ordo_oldest_unfinished_age_seconds", "ordo_sending_paused_tenants", "ordo_stats_up"}
	for i := range 3 {
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
			t.Fatalf("scrape %d: %v", i+1, err)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("3 scrapes within the TTL read the database %d times, want 1", n)
	}
}

// A failed read says so (ordo_stats_up 0) and keeps serving the last good
// rows rather than dropping every series.
func TestStatsReadFailure(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	reg := prometheus.NewRegistry()
	_, err := metrics.New(metrics.Config{
		Registry: reg, StatsTTL: time.Nanosecond,
		Stats: func(context.Context) ([]metrics.TenantStats, error) {
			if fail.Load() {
				return nil, errors.New("database away")
			}
			return []metrics.TenantStats{{Tenant: "acme", Backlog: 7}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []bool{false, true} {
		fail.Store(f)
		up := 1
		if f {
			up = 0
		}
		want := fmt.Sprintf(`
# HELP ordo_backlog_messages Messages accepted and not finished, by tenant (the largest backlogs; the rest under tenant="_other").
# TYPE ordo_backlog_messages gauge
ordo_backlog_messages{tenant="acme"} 7
# HELP ordo_stats_up 1 if the last read of the database gauges succeeded.
# TYPE ordo_stats_up gauge
ordo_stats_up %d
`, up)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ordo_backlog_messages", "ordo_stats_up"); err != nil {
			t.Errorf("read failing %v: %v", f, err)
		}
	}
}
