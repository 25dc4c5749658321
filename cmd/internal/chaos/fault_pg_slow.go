package chaos

import (
	"context"
	"fmt"
	"time"
)

// faultPGSlow is Postgres slowed down for every ordo process: each round
// trip takes PGSlowMin..PGSlowMax longer.
const faultPGSlow = "pg_slow"

// PGSlowMin and PGSlowMax bound the delay a slow Postgres adds to each
// round trip (half of it each way); PGSlowFor is how long it lasts.
const (
	PGSlowMin = 50 * time.Millisecond
	PGSlowMax = 200 * time.Millisecond
	PGSlowFor = 20 * time.Second
)

// pgSlowKind slows Postgres down Partitions times, each for PGSlowFor.
var pgSlowKind = faultKind{
	name: faultPGSlow,
	plan: func(p *planner) []fault {
		if p.cfg.HA {
			return nil
		}
		return p.place(p.cfg.Partitions, p.cfg.Duration-PGSlowFor-time.Second,
			func() time.Duration { return PGSlowFor },
			func(s slot) fault { return &pgSlow{s: s} })
	},
	summary: func(n int) string { return fmt.Sprintf("%d slow Postgres spells", n) },
}

// pgSlow delays every chunk between the ordo processes and Postgres: the
// drains' statements, the claims, ingest's transactions all take longer,
// and a drain's lease (its session's idle timer) must still hold across a
// slow round trip.
type pgSlow struct{ s slot }

func (f *pgSlow) Kind() string { return faultPGSlow }
func (f *pgSlow) Desc() string {
	return fmt.Sprintf("Postgres %s–%s slower per round trip for %s", PGSlowMin, PGSlowMax, f.s.pause)
}
func (f *pgSlow) slot() slot { return f.s }

func (f *pgSlow) Inject(_ context.Context, r *run) bool {
	proxies := r.dbProxies()
	if len(proxies) == 0 {
		r.log.printf("slow Postgres skipped: no proxies")
		return false
	}
	for _, p := range proxies {
		p.Slow(PGSlowMin/2, PGSlowMax/2)
	}
	r.log.fault(faultPGSlow, "Postgres %s–%s slower per round trip for every process, for %s", PGSlowMin, PGSlowMax, f.s.pause)
	return true
}

func (f *pgSlow) Recover(_ context.Context, r *run) {
	for _, p := range r.dbProxies() {
		p.Slow(0, 0)
	}
	r.log.printf("Postgres at full speed again")
}
