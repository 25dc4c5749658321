package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs/fair"
	ordosql "github.com/ordo-dev/ordo/sql"
)

// The drain loop of a runner (a River job, river.go): claim the next
// conversations its process's scheduler points it to, drain them, repeat.
// runDrains is one runner: claim, drain, repeat, until RunnerLifetime or
// a stop. It keeps its connection while it finds work (the claim and the
// release of the previous drain's slot ride in one round trip) and hands it
// back when it waits.
func (r *Runner) runDrains(ctx context.Context, name string) error {
	d := r.drainer
	end := time.Now().Add(RunnerLifetime)
	var (
		conn *pgxpool.Conn
		held *slotHold // the previous drain's slot, released by the next claim
	)
	drop := func(usable bool) {
		if conn == nil {
			return
		}
		if usable && held != nil {
			_, err := conn.Exec(context.WithoutCancel(ctx), releaseSlot, held.slot, held.tenant)
			usable = err == nil
		}
		held = nil
		if usable {
			conn.Release()
		} else {
			_ = conn.Hijack().Close(context.WithoutCancel(ctx))
		}
		conn = nil
	}
	defer func() { drop(true) }()
	for !d.stopping.Load() && time.Now().Before(end) && ctx.Err() == nil {
		room, t, urgent := r.takeRoom(ctx)
		if room == 0 {
			continue // stopping
		}
		ok := urgent
		if !urgent {
			t, ok = r.sched.pick(ctx)
		}
		if !ok {
			r.sched.give(room)
			drop(true)
			r.sched.wait(ctx)
			continue
		}
		if conn == nil {
			c, err := r.pool.Acquire(ctx)
			if err != nil {
				r.sched.give(room)
				if !r.waitedOut(err) {
					r.logger.WarnContext(ctx, "runner: acquire a connection", slog.String("error", err.Error()))
				}
				r.sched.pause(ctx, r.cfg.FetchPollInterval)
				continue
			}
			conn = c
		}
		var phone *string
		if p, ok := d.creds.phone(t.Tenant); ok {
			phone = &p
		} else if t.Cap == 0 {
			phone = d.warmCredential(ctx, conn, t.Tenant)
		}
		var bt *batch
		if t.Cap == 0 && phone != nil {
			bt = &batch{tenant: t.Tenant, max: room}
		}
		claimed := time.Now()
		s, st, err := claimAndOpen(ctx, conn, t, d.cfg.Lease.Milliseconds(), phone, held, bt, true)
		if err != nil {
			// The batch failed: what it locked is unknown, so the
			// connection (and every lock on it) goes.
			r.sched.give(room)
			held = nil
			drop(false)
			if ctx.Err() == nil {
				if !r.waitedOut(err) {
					r.logger.WarnContext(ctx, "claim a conversation", slog.Int64("tenant_id", t.Tenant), slog.String("error", err.Error()))
				}
				r.sched.pause(ctx, max(r.cfg.FetchPollInterval, r.cfg.Schema.Wait()))
			}
			continue
		}
		held = nil
		r.claims.Add(1)
		if bt != nil && len(bt.convs) > 0 {
			r.sched.give(room - len(bt.convs))
			r.batches.Add(1)
			d.cfg.Metrics.BatchClaimed()
			if !r.drainBatch(ctx, conn, bt, claimed, name) { // gives back the batch's room
				drop(false)
			}
			r.sched.released(t.Tenant, false)
			continue
		}
		r.sched.give(room - 1)
		if s == nil {
			r.sched.give(1)
			r.claimsEmpty.Add(1)
			r.sched.missed(t.Tenant, claimed)
			continue
		}
		r.sched.passOn(t.Tenant, st.more)
		held = s.slot
		how, err := d.drain(ctx, s, st, name)
		usable := r.end(ctx, s, how, err)
		r.sched.give(1)
		if !usable {
			held = nil
			drop(false)
		}
		// A slot of a capped tenant is about to free up (the next claim
		// releases it).
		r.sched.released(t.Tenant, held != nil)
	}
	return nil
}

// takeRoom waits for room for a claim (fair.Take), as much as the model
// wants (fair.Scheduler.Want: for a while after a batch left a backlog,
// room for half a batch first). A tenant that waits and has nothing
// running here gets room beyond Workers (urgent: t is its turn).
func (r *Runner) takeRoom(ctx context.Context) (n int, t fair.Turn, urgent bool) {
	since := time.Now()
	// A look when the model would want less, and one at the ready set
	// every poll interval even if nothing wakes this runner: a lost
	// notification must not leave a waiting tenant behind a full room
	// (fair.Take reads it then).
	late := time.NewTimer(0)
	late.Stop()
	defer late.Stop()
	poll := time.NewTicker(r.cfg.FetchPollInterval)
	defer poll.Stop()
	for ctx.Err() == nil {
		n, t, urgent, later, freed := r.sched.take(ctx, r.cfg.BatchSize, since)
		if n > 0 || freed == nil {
			return n, t, urgent
		}
		if later > 0 {
			late.Reset(later)
		}
		select {
		case <-freed:
		case <-late.C:
		case <-poll.C:
		case <-ctx.Done():
		}
	}
	return 0, fair.Turn{}, false
}

const releaseSlot = `SELECT pg_advisory_unlock(-1 - $1::int, $2::int)`

// end ends a drain run as it ended (end, err) and the session with it;
// false when the connection cannot be used again.
func (r *Runner) end(ctx context.Context, s *session, end ended, err error) bool {
	d := r.drainer
	park := func(wait time.Duration) {
		if perr := s.park(ctx, wait); perr != nil && !errors.Is(perr, ErrFenced) {
			d.logger.WarnContext(ctx, "park conversation", slog.Int64("conversation", s.conv), slog.String("error", perr.Error()))
		}
	}
	switch {
	case err == nil && (end.park || end.parked):
		if end.park {
			park(end.wait)
		}
		r.sched.dueIn(end.wait)
	case err != nil:
		if !s.broken {
			// An infrastructure error on a connection that still works:
			// try again after a pause rather than after the lease.
			park(d.cfg.DrainErrorDelay)
		}
		if ctx.Err() == nil && !r.waitedOut(err) {
			d.logger.WarnContext(ctx, "drain failed", slog.Int64("conversation", s.conv), slog.String("error", err.Error()))
		}
	}
	return s.close()
}

// waitedOut reports err to the process's watches and says whether it is
// one of their states — Postgres away, or a schema that no longer matches
// this build (a newer build migrated it) — logged once by its watch and
// waited out with its backoff, rather than a failure to log. Only a
// readiness check that finds the schema this build's again brings the
// schema back: other statements may still work meanwhile.
func (r *Runner) waitedOut(err error) bool {
	return r.cfg.Database.Report(err, ordosql.Unavailable) || r.cfg.Schema.Report(err, ordosql.SchemaChanged)
}
