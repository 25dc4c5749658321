package hacluster

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/cmd/internal/pgcluster"
	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	ordosql "github.com/ordo-dev/ordo/sql"
)

// syncWaitBundle is a primary whose commits wait for a synchronous standby
// that never connects, and an engine on it configured as the server's.
type syncWaitBundle struct {
	url    string
	admin  *pgx.Conn
	e      *engine.Engine
	tenant engine.WebhookTenant
}

// setupSyncWait starts the cluster; settings are the engine's connections'
// run-time parameters (an operator's statement_timeout, say).
func setupSyncWait(ctx context.Context, t *testing.T, settings map[string]string) *syncWaitBundle {
	t.Helper()
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Skip(err)
	}
	c, err := pgcluster.Start(ctx, pgcluster.Config{Dir: t.TempDir(), Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	b := &syncWaitBundle{url: c.URL("postgres")}
	if err := ordosql.Up(b.url); err != nil {
		t.Fatal(err)
	}
	if b.admin, err = pgx.Connect(ctx, b.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.admin.Close(context.Background()) })
	if err := b.admin.QueryRow(ctx, `INSERT INTO ordo.tenants (slug) VALUES ('acme') RETURNING id`).Scan(&b.tenant.ID); err != nil {
		t.Fatal(err)
	}
	b.tenant.Slug, b.tenant.PhoneNumberID = "acme", "1555000"
	for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = 'absent_standby'`, `SELECT pg_reload_conf()`} {
		if _, err := b.admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	commitsWait(ctx, t, b.url, b.admin)

	cfg, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	ordosql.WatchCommits(&cfg.ConnConfig.Config) // as the server's pool (server.poolConfig)
	for k, v := range settings {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b.e = engine.New(pool, nil)
	return b
}

// stored reports whether the primary holds what write wrote for id:
// committed here, whatever the standby has.
func (b *syncWaitBundle) stored(ctx context.Context, t *testing.T, w syncWrite, id string) bool {
	t.Helper()
	var n int
	if err := b.admin.QueryRow(ctx, w.stored, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// syncWrite is one of the writes answered to a user after its commit.
type syncWrite struct {
	name   string
	write  func(context.Context, string) <-chan writeAnswer
	stored string // counts the rows the write of id stored ($1)
}

// writes are every write answered to a user after its commit.
func (b *syncWaitBundle) writes() []syncWrite {
	return []syncWrite{
		{"ingest", b.ingest, `SELECT count(*) FROM ordo.messages WHERE message_id = $1`},
		{"webhook", b.webhook, `SELECT count(*) FROM ordo.messages WHERE message_id = $1`},
		{"lease", b.lease, `SELECT count(*) FROM ordo.leases WHERE key = $1`},
	}
}

// terminate ends backend pid and returns once it is gone: until then it
// still shows as waiting for the standby, and the next write's wait would
// be mistaken for it.
func (b *syncWaitBundle) terminate(ctx context.Context, t *testing.T, pid int) {
	t.Helper()
	if _, err := b.admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	for {
		var alive bool
		if err := b.admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive); err != nil {
			t.Fatal(err)
		}
		if !alive {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("backend %d never exited", pid)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A user's write, run in the background: its answer on the channel.
type writeAnswer struct {
	what string
	err  error
}

func (b *syncWaitBundle) ingest(ctx context.Context, id string) <-chan writeAnswer {
	ch := make(chan writeAnswer, 1)
	go func() {
		a, err := b.e.Ingest(ctx, engine.NewMessage{Tenant: "acme", ConversationID: "c-" + id, MessageID: id,
			Payload: []byte(`{"to":"16505551234","type":"text","text":{"body":"hi"}}`)})
		ch <- writeAnswer{what: a.ID, err: err}
	}()
	return ch
}

func (b *syncWaitBundle) webhook(ctx context.Context, id string) <-chan writeAnswer {
	ch := make(chan writeAnswer, 1)
	go func() {
		res, err := b.e.StoreWebhook(ctx, b.tenant, whatsapp.Webhook{Messages: []whatsapp.Inbound{{
			PhoneNumberID: b.tenant.PhoneNumberID, ConversationID: "u-" + id, MessageID: id, Type: "text",
			Payload: []byte(`{"message":{"type":"text","text":{"body":"hi"}}}`),
		}}})
		ch <- writeAnswer{what: fmt.Sprintf("%d accepted", res.Accepted), err: err}
	}()
	return ch
}

func (b *syncWaitBundle) lease(ctx context.Context, id string) <-chan writeAnswer {
	ch := make(chan writeAnswer, 1)
	go func() {
		l, err := b.e.AcquireLease(ctx, b.tenant.ID, id, time.Minute)
		ch <- writeAnswer{what: fmt.Sprintf("token %d", l.Token), err: err}
	}()
	return ch
}

// TestCancelledSyncWaitIsNotAcknowledged: a query cancel that reaches a
// commit waiting for the synchronous standby makes Postgres give up the
// wait and return success with a WARNING; the row is committed on the
// primary only. Here the cancel is an operator's pg_cancel_backend; a
// lock_timeout firing as NOTIFY's commit lock is granted leaves the same
// cancel pending (engine/README.md, "A write's commit"). Every write
// answered to a user must answer it 503, not 2xx.
func TestCancelledSyncWaitIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := setupSyncWait(ctx, t, nil)
	for _, w := range b.writes() {
		id := "cancelled-" + w.name
		answer := w.write(ctx, id)
		pid := waitSyncRep(ctx, t, b.admin, answer)
		if _, err := b.admin.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
		r := <-answer
		if !b.stored(ctx, t, w, id) {
			t.Fatalf("%s: nothing is on the primary (%v): the cancel did not reach the commit, the test tests nothing", w.name, r.err)
		}
		if r.err == nil || engine.ErrorCode(r.err) != engine.CodeUnavailable {
			t.Fatalf("%s: answered %q, %v though no standby has the write; want unavailable (503)", w.name, r.what, r.err)
		}
	}
}

// TestStatementTimeoutNeverEndsASyncWait: an operator's statement_timeout
// (on the role, in DATABASE_URL) does not cancel a commit's wait for the
// synchronous standby: Postgres turns the statement's timer off before it
// commits (finish_xact_command), and the engine turns it off in the
// transaction before its commit (ordosql.PrepareCommitQuery), so a timer
// cannot fire as the last statement ends either. The write waits — it is
// not answered — and fails when the primary goes.
func TestStatementTimeoutNeverEndsASyncWait(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Long enough that no statement of a write reaches it on a busy
	// machine; the commits wait several times as long.
	const timeout = 2 * time.Second
	b := setupSyncWait(ctx, t, map[string]string{"statement_timeout": strconv.Itoa(int(timeout.Milliseconds()))})
	for _, w := range b.writes() {
		id := "timeout-" + w.name
		answer := w.write(ctx, id)
		pid := waitSyncRep(ctx, t, b.admin, answer)
		// Still waiting, unanswered, long past the timeout.
		select {
		case r := <-answer:
			t.Fatalf("%s: answered %q, %v while its commit waited for the standby", w.name, r.what, r.err)
		case <-time.After(3 * timeout):
		}
		var still bool
		if err := b.admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep')`, pid).Scan(&still); err != nil || !still {
			t.Fatalf("%s: backend %d no longer waits for the standby (%v)", w.name, pid, err)
		}
		b.terminate(ctx, t, pid)
		if r := <-answer; r.err == nil {
			t.Fatalf("%s: answered %q though its backend died waiting for the standby", w.name, r.what)
		}
	}
}

// TestClientGoneDuringSyncWait: a request that ends while its write's
// commit waits for the standby must not cancel that commit. pgx, on a
// context's end mid-query, closes the connection and sends a
// CancelRequest first (pgconn's asyncClose): the commit then returns on the
// primary without its standby and its rows become visible there — a drain
// could send a message a failover then forgets, and the client, told 503,
// sends it again. So a write runs on a context its request cannot cancel,
// bounded by engine.WriteTimeout (the batch: batchTimeout): the backend
// keeps waiting, its rows invisible, until the standby confirms.
func TestClientGoneDuringSyncWait(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := setupSyncWait(ctx, t, nil)
	for _, w := range b.writes() {
		id := "gone-" + w.name
		reqCtx, reqCancel := context.WithCancel(ctx)
		answer := w.write(reqCtx, id)
		pid := waitSyncRep(ctx, t, b.admin, answer)
		reqCancel()
		// A CancelRequest lands within milliseconds; give it ample time.
		for start := time.Now(); time.Since(start) < 2*time.Second; {
			var still bool
			if err := b.admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep')`, pid).Scan(&still); err != nil {
				t.Fatal(err)
			}
			if !still {
				t.Fatalf("%s: backend %d stopped waiting for the standby when its request ended: a cancel reached the commit", w.name, pid)
			}
			select {
			case r := <-answer:
				if r.err == nil || engine.ErrorCode(r.err) != engine.CodeUnavailable {
					t.Fatalf("%s: answered %q, %v after its request ended mid-commit; want unavailable (503)", w.name, r.what, r.err)
				}
				answer = nil // the caller left; the commit goes on waiting
			case <-time.After(50 * time.Millisecond):
			}
		}
		b.terminate(ctx, t, pid)
		if answer != nil {
			if r := <-answer; r.err == nil {
				t.Fatalf("%s: answered %q though its backend died waiting for the standby", w.name, r.what)
			}
		}
	}
}
