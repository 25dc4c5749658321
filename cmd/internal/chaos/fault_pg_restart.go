package chaos

import (
	"context"
	"fmt"
	"time"
)

// faultPGRestart is pg_ctl restart -m immediate: Postgres crashes and
// recovers from its WAL.
const faultPGRestart = "pg_restart"

// pgRestartKind restarts Postgres PGRestarts times.
var pgRestartKind = faultKind{
	name: faultPGRestart,
	plan: func(p *planner) []fault {
		if p.cfg.HA {
			return nil // the failover faults take its place (fault_ha.go)
		}
		return p.place(p.cfg.PGRestarts, p.cfg.Duration-5*time.Second,
			func() time.Duration { return 0 },
			func(s slot) fault { return &pgRestart{s: s} })
	},
	summary: func(n int) string { return fmt.Sprintf("%d Postgres restarts", n) },
}

// pgRestart is one immediate restart of Postgres: every session is cut,
// and everything committed (every 2xx) must survive it.
type pgRestart struct {
	s     slot
	began time.Time
}

func (f *pgRestart) Kind() string { return faultPGRestart }
func (f *pgRestart) Desc() string { return "pg_ctl restart -m immediate" }
func (f *pgRestart) slot() slot   { return f.s }

// Inject restarts Postgres; pg_ctl returns once it is back.
func (f *pgRestart) Inject(ctx context.Context, r *run) bool {
	r.log.fault(faultPGRestart, "pg_ctl restart -m immediate")
	f.began = time.Now()
	if err := r.cluster.Restart(ctx, true); err != nil {
		r.log.printf("postgres restart failed: %v", err)
		return false
	}
	return true
}

// Recover has nothing to put back; it reports how long Postgres was away.
func (f *pgRestart) Recover(_ context.Context, r *run) {
	r.log.printf("postgres is back after %s", time.Since(f.began).Round(time.Millisecond))
}
