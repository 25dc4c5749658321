package chaos

// What the failover faults share (--ha): the Patroni cluster the run starts
// in place of its single Postgres, and the record of each failover from
// which the checker reads its recovery (check_ha.go).

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/hacluster"
)

// startHA installs Patroni and etcd if they are missing, starts the HA
// cluster, and points ordo at it with the multi-host URL an operator would
// write.
func (r *run) startHA(ctx context.Context, dir string) error {
	if err := hacluster.Install(ctx, r.cfg.Out); err != nil {
		return err
	}
	var err error
	// fsync off as in the single-Postgres run: the faults crash processes,
	// not the machine. synchronous_commit on, with a synchronous standby
	// in strict mode: a 2xx is in two nodes' WAL before it is answered.
	r.ha, err = hacluster.Start(ctx, hacluster.Config{
		Dir:      filepath.Join(dir, "ha"),
		Port:     chaosFreePort,
		Settings: map[string]string{"fsync": "off", "max_connections": "400"},
		Logf:     r.log.printf,
	})
	if err != nil {
		return err
	}
	h, err := r.ha.Healthy(ctx)
	if err != nil {
		return err
	}
	r.dbURL = r.ha.URL("postgres")
	r.log.printf("ha cluster in %s: primary %s, synchronous standby %s; DATABASE_URL=%s", r.ha.Dir, h.Leader, h.Sync, r.dbURL)
	return nil
}

// haRecoverBound is how long ordo may take, after a failover fault, to
// accept and send again: far above what Patroni needs (seconds), so only
// an engine that does not reconnect by itself fails it.
const haRecoverBound = time.Minute

// haFault is one failover fault as it happened, for the checker.
type haFault struct {
	kind     string
	what     string
	at       time.Time     // when it was injected
	from, to string        // the primary before and after
	healthy  time.Duration // from at until the cluster was healthy again; 0: not within its bound
	err      string        // why it was not
}

func (r *run) recordFailover(f haFault) {
	r.windowMu.Lock()
	defer r.windowMu.Unlock()
	r.failovers = append(r.failovers, f)
}

func (r *run) failoverRecords() []haFault {
	r.windowMu.Lock()
	defer r.windowMu.Unlock()
	return append([]haFault(nil), r.failovers...)
}

// failover is the part of a failover fault the three kinds share: the
// cluster as it was before, the moment of injection, and a Recover that
// waits until the cluster is healthy again (a primary, every standby
// streaming, one of them synchronous) and ordo answers a 2xx to a request
// sent after that, and records it all.
type failover struct {
	s      slot
	kind   string
	before hacluster.Health
	at     time.Time
	what   string
}

func (f *failover) slot() slot { return f.s }

// exclusive: a failover runs alone, like a deploy, so that the recovery
// time measured is its own (no API kill or Postgres-side stall inside it).
func (f *failover) exclusive() {}

// healthyBefore waits for the cluster to be healthy (the previous fault's
// old primary may still be rejoining) and remembers who is who.
func (f *failover) healthyBefore(ctx context.Context, r *run) bool {
	h, err := r.ha.WaitHealthy(ctx)
	if err != nil {
		r.log.printf("%s skipped: %v", f.kind, err)
		return false
	}
	f.before = h
	return true
}

// injected logs the fault and starts its clock.
func (f *failover) injected(r *run, what string) {
	f.at, f.what = time.Now(), what
	r.log.fault(f.kind, "%s", what)
}

// Recover waits for the cluster and then for ordo, and records both.
func (f *failover) Recover(ctx context.Context, r *run) {
	rec := haFault{kind: f.kind, what: f.what, at: f.at, from: f.before.Leader}
	h, err := r.ha.WaitHealthy(ctx)
	if err != nil {
		rec.err = err.Error()
		r.log.printf("%s: %v", f.kind, err)
		r.recordFailover(rec)
		return
	}
	rec.healthy, rec.to = time.Since(f.at), h.Leader
	healthyAt := time.Now()
	r.log.printf("%s: cluster healthy after %s: primary %s (was %s), synchronous standby %s, timeline %d",
		f.kind, rec.healthy.Round(time.Millisecond), h.Leader, f.before.Leader, h.Sync, h.Timeline)
	// The next fault waits until ordo writes again (bounded; the checker
	// judges the bound).
	for deadline := healthyAt.Add(haRecoverBound); time.Now().Before(deadline) && ctx.Err() == nil; {
		if acks := r.ledger.acked(); len(acks) > 0 && acks[len(acks)-1].sent.After(healthyAt) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.recordFailover(rec)
}

// haKind places n failover faults of one kind, each made by mk; the last
// may start 30 s before the end of the load (its recovery runs past it).
func haKind(name string, mk func(slot) fault, noun string) faultKind {
	return faultKind{
		name: name,
		plan: func(p *planner) []fault {
			if !p.cfg.HA {
				return nil
			}
			return p.place(p.cfg.Failovers, max(p.cfg.Duration-30*time.Second, p.cfg.Duration/2),
				func() time.Duration { return 0 }, mk)
		},
		summary: func(n int) string {
			if n == 0 {
				return ""
			}
			return fmt.Sprintf("%d %s", n, noun)
		},
	}
}

// postgresLogs are the Postgres logs the run reads errors from: the one
// cluster's, or every HA node's.
func (r *run) postgresLogs() []string {
	if r.ha != nil {
		var out []string
		for _, n := range r.ha.Nodes {
			out = append(out, n.LogPath())
		}
		return out
	}
	if r.cluster != nil {
		return []string{filepath.Join(r.cluster.Dir, "postgres.log")}
	}
	return nil
}
