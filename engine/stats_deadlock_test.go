package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs/jobstest"
)

// The console's counters never make an application's import and a drain
// wait for each other. An import (one transaction, several conversations)
// counts its first message, then needs the next conversation's row; a
// drain holding that row counts its send for the same tenant. When both
// counted on one row (backends whose pids agree modulo 16) each waited for
// the other: Postgres broke the cycle by failing one (`make chaos` seed 1:
// "deadlock detected", a drain's finish (ordo.finish) against an import's
// enqueue_message). Forced here with two such backends.
func TestCountersNeverDeadlockAnImportWithADrain(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	ctx := context.Background()
	// Conversation y, committed, with a send step running (a drain's).
	acc := b.Ingest("y", "y1", "y one")
	var step int64
	if err := b.Pool.QueryRow(ctx, `INSERT INTO ordo.steps (message_pk, idx, kind, request, status, attempts, started_at)
		VALUES ($1, 0, 'send', '{}', 'running', 1, now()) RETURNING id`, acc.ID).Scan(&step); err != nil {
		t.Fatal(err)
	}
	// Two backends that shared a counter row: pids equal modulo 16.
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	byShard := map[uint32]*pgxpool.Conn{}
	var imp, drain *pgxpool.Conn
	for imp == nil {
		c, err := b.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		pid := c.Conn().PgConn().PID()
		if other, ok := byShard[pid%16]; ok {
			imp, drain = other, c
		}
		byShard[pid%16] = c
	}
	// The import counts its first message…
	itx, err := imp.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = itx.Rollback(ctx) }()
	if _, err := itx.Exec(ctx, `SELECT ordo.enqueue_message($1, 'x', 'x1', 'outbound', $2::jsonb)`, b.Tenant.Slug, jobstest.Outbound("x", "x one")); err != nil {
		t.Fatal(err)
	}
	// …the drain holds y's row and records its send…
	dtx, err := drain.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dtx.Rollback(ctx) }()
	if _, err := dtx.Exec(ctx, `SELECT 1 FROM ordo.conversations WHERE tenant_id = $1 AND conversation_id = 'y' FOR NO KEY UPDATE`, b.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	drained := make(chan error, 1)
	go func() {
		_, err := dtx.Exec(ctx, `UPDATE ordo.steps SET status = 'done', finished_at = now() WHERE id = $1`, step)
		if err == nil {
			err = dtx.Commit(ctx)
		}
		drained <- err
	}()
	// …and the import's next message is in y.
	_, ierr := itx.Exec(ctx, `SELECT ordo.enqueue_message($1, 'y', 'y2', 'outbound', $2::jsonb)`, b.Tenant.Slug, jobstest.Outbound("y", "y two"))
	if ierr == nil {
		ierr = itx.Commit(ctx)
	}
	var derr error
	select {
	case derr = <-drained:
	case <-time.After(30 * time.Second):
		t.Fatal("the drain's write still waits 30 s on")
	}
	for _, err := range []error{ierr, derr} {
		if err != nil {
			t.Errorf("import %v; drain %v: want both to commit", ierr, derr)
			break
		}
	}
	if n := b.Count(`SELECT coalesce(sum(accepted), 0) FROM ordo.stats_minutes`); n != 3 {
		t.Errorf("%d messages counted accepted; want 3", n)
	}
	if n := b.Count(`SELECT coalesce(sum(sent), 0) FROM ordo.stats_minutes`); n != 1 {
		t.Errorf("%d sends counted; want 1", n)
	}
}
