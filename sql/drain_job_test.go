package sql_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ordo-dev/ordo/sql/sqltest"
)

// drainArgs is jobs.DrainArgs as River would insert it itself (package sql
// cannot import jobs): kind ordo_drain on queue ordo, priority 1, 25
// attempts — what ordo.insert_drain_job writes by hand.
type drainArgs struct {
	Conversation int64 `json:"conversation"`
	Tenant       int64 `json:"tenant,omitempty"`
}

func (drainArgs) Kind() string { return "ordo_drain" }

func (drainArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: "ordo", Priority: 1, MaxAttempts: 25}
}

type drainArgsWorker struct {
	river.WorkerDefaults[drainArgs]
	worked chan *river.Job[drainArgs]
}

func (w *drainArgsWorker) Work(_ context.Context, job *river.Job[drainArgs]) error {
	w.worked <- job
	return nil
}

// riverJobRow is every column of ordo.river_job River reads to run a job,
// but its id and times.
type riverJobRow struct {
	State, Queue, Kind string
	Args, Metadata     map[string]any
	Priority, Attempts int
	MaxAttempts        int
	Tags               []string
	Errors             []map[string]any
	AttemptedBy        []string
	UniqueKey          []byte
	UniqueStates       *string
	ScheduledAt        time.Time
	AttemptedAtIsNull  bool
	FinalizedAtIsNull  bool
}

const riverJobQuery = `SELECT state::text, queue, kind, args, metadata, priority, attempt, max_attempts, tags,
	coalesce(to_jsonb(errors), '[]'), coalesce(attempted_by, '{}'), unique_key, unique_states::text, scheduled_at,
	attempted_at IS NULL, finalized_at IS NULL
FROM ordo.river_job WHERE id = $1`

func readRiverJob(t *testing.T, pool *pgxpool.Pool, id int64) riverJobRow {
	t.Helper()
	var r riverJobRow
	var errs []byte
	if err := pool.QueryRow(t.Context(), riverJobQuery, id).Scan(&r.State, &r.Queue, &r.Kind, &r.Args, &r.Metadata,
		&r.Priority, &r.Attempts, &r.MaxAttempts, &r.Tags, &errs, &r.AttemptedBy, &r.UniqueKey, &r.UniqueStates,
		&r.ScheduledAt, &r.AttemptedAtIsNull, &r.FinalizedAtIsNull); err != nil {
		t.Fatalf("read river job %d: %v", id, err)
	}
	if err := json.Unmarshal(errs, &r.Errors); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDrainJobFromSQLIsRiverLike inserts one conversation's drain job twice,
// through River's own Client.InsertTx and through ordo.insert_drain_job,
// and shows River treats both alike: every column River reads is the same,
// both wake River's producers with the same notification, and a River client with a worker for the kind works both.
func TestDrainJobFromSQLIsRiverLike(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := sqltest.New(t)

	var tenant, conv int64
	if err := pool.QueryRow(ctx, `WITH t AS (INSERT INTO ordo.tenants (slug) VALUES ('acme') RETURNING id)
		INSERT INTO ordo.conversations (tenant_id, conversation_id) SELECT id, 'c1' FROM t RETURNING tenant_id, id`).
		Scan(&tenant, &conv); err != nil {
		t.Fatal(err)
	}

	worker := &drainArgsWorker{worked: make(chan *river.Job[drainArgs], 2)}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:            "ordo",
		Queues:            map[string]river.QueueConfig{"ordo": {MaxWorkers: 2}},
		Workers:           workers,
		FetchCooldown:     20 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		TestOnly:          true,
	})
	if err != nil {
		t.Fatal(err)
	}

	// Each insert in its own transaction, so each one's wake-up of River's
	// producers is seen (Postgres folds equal notifications of one
	// transaction into one).
	listener, err := pgx.Connect(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.WithoutCancel(ctx))
	if _, err := listener.Exec(ctx, `LISTEN "ordo.river_insert"`); err != nil {
		t.Fatal(err)
	}
	notified := func(how string) string {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := listener.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no notification on ordo.river_insert after %s: %v", how, err)
		}
		return n.Payload
	}

	var viaRiver, viaSQL int64
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := client.InsertTx(ctx, tx, drainArgs{Conversation: conv, Tenant: tenant}, nil)
		if err != nil {
			return err
		}
		viaRiver = res.Job.ID
		return nil
	}); err != nil {
		t.Fatalf("InsertTx: %v", err)
	}
	riverPayload := notified("InsertTx")
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT nextval('ordo.river_job_id_seq')`).Scan(&viaSQL); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT ordo.insert_drain_job($1, $2)`, conv, viaSQL)
		return err
	}); err != nil {
		t.Fatalf("ordo.insert_drain_job: %v", err)
	}
	if sqlPayload := notified("insert_drain_job"); sqlPayload != riverPayload {
		t.Errorf("notification payload: InsertTx %q, insert_drain_job %q", riverPayload, sqlPayload)
	}

	a, b := readRiverJob(t, pool, viaRiver), readRiverJob(t, pool, viaSQL)
	// River stamps scheduled_at with the client's clock, the function with
	// the database's (its transaction's start): both are "due now".
	if d := a.ScheduledAt.Sub(b.ScheduledAt).Abs(); d > 5*time.Second {
		t.Errorf("scheduled_at: River %v, SQL %v", a.ScheduledAt, b.ScheduledAt)
	}
	a.ScheduledAt, b.ScheduledAt = time.Time{}, time.Time{}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("the rows River reads differ:\nInsertTx:         %s\ninsert_drain_job: %s", ja, jb)
	}

	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer client.Stop(context.WithoutCancel(ctx)) //nolint:errcheck
	worked := map[int64]drainArgs{}
	timeout := time.After(15 * time.Second)
	for len(worked) < 2 {
		select {
		case job := <-worker.worked:
			worked[job.ID] = job.Args
		case <-timeout:
			t.Fatalf("River worked %v, want jobs %d (InsertTx) and %d (insert_drain_job)", worked, viaRiver, viaSQL)
		}
	}
	want := drainArgs{Conversation: conv, Tenant: tenant}
	if worked[viaRiver] != want || worked[viaSQL] != want {
		t.Errorf("worked args: InsertTx %+v, insert_drain_job %+v; want %+v", worked[viaRiver], worked[viaSQL], want)
	}
}
