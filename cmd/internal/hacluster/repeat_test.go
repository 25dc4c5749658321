package hacluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/cmd/internal/pgcluster"
	"github.com/ordo-dev/ordo/engine"
	ordosql "github.com/ordo-dev/ordo/sql"
)

// TestRepeatOfACommitNoStandbyHas is what `make chaos-ha` found (issue 23,
// message "t0-c36-24": answered with two ids): a primary's postmaster is
// killed while a message's commit waits for the synchronous standby. The
// waiting backend gives up the wait without answering its client, but its
// row is committed on this node and visible there; the node's other
// backends live on for a moment, and one of them answered a copy of the
// message "duplicate" from that row — a read-only transaction, whose commit
// waits for no standby. The row never reached the standby that was
// promoted: the client held a 2xx for a message that no longer existed (a
// later copy inserted it again under another id; without one it would have
// been lost).
//
// Here a primary's commits wait for a synchronous standby that is not
// there; the original's backend is terminated in its wait, which ends it as
// a dead postmaster does (no answer, the row visible on this node only). A
// copy of the message must then not be answered before a standby confirms
// the original: its commit must wait too, and fail with the primary.
func TestRepeatOfACommitNoStandbyHas(t *testing.T) {
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Skip(err)
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Config{Dir: t.TempDir(), Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	url := c.URL("postgres")
	if err := ordosql.Up(url); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	for _, q := range []string{
		`INSERT INTO ordo.tenants (slug) VALUES ('acme')`,
		`ALTER SYSTEM SET synchronous_standby_names = 'absent_standby'`,
		`SELECT pg_reload_conf()`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	commitsWait(ctx, t, url, admin)

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	e := engine.New(pool, nil)
	m := engine.NewMessage{Tenant: "acme", ConversationID: "16505551234", MessageID: "t0-c36-24",
		Payload: []byte(`{"to":"16505551234","type":"text","text":{"body":"msg t0-c36-24"}}`)}

	type answer struct {
		a   engine.Accepted
		err error
	}
	ingest := func() <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			a, err := e.Ingest(ctx, m)
			ch <- answer{a, err}
		}()
		return ch
	}

	// The original: its commit waits for the standby, and its backend dies
	// in the wait.
	original := ingest()
	pid := waitSyncRep(ctx, t, admin, original)
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if r := <-original; r.err == nil {
		t.Fatalf("the original was answered %+v though its commit never reached a standby", r.a)
	}
	var here string
	if err := admin.QueryRow(ctx, `SELECT id::text FROM ordo.messages WHERE message_id = $1`, m.MessageID).Scan(&here); err != nil {
		t.Fatalf("the original's row on the primary: %v", err)
	}

	// A copy: answered only once a standby has the original. Its backend
	// waits for the standby; the primary dies then too.
	repeat := ingest()
	pid = waitSyncRep(ctx, t, admin, repeat)
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if r := <-repeat; r.err == nil || engine.ErrorCode(r.err) != engine.CodeUnavailable {
		t.Fatalf("the repeat whose primary died: %+v, %v; want 503 (unavailable: the client tries again)", r.a, r.err)
	}

	// Once the original is as durable as the cluster demands (here: no
	// standby required any more), a copy is its duplicate, with its id.
	for _, q := range []string{`ALTER SYSTEM RESET synchronous_standby_names`, `SELECT pg_reload_conf()`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if r := <-ingest(); r.err != nil || !r.a.Duplicate || r.a.ID != here {
		t.Fatalf("a copy once the original is durable: %+v, %v; want duplicate of id %s", r.a, r.err, here)
	}
}

// commitsWait returns once a commit waits for the synchronous standby: the
// reload reaches the sessions and the checkpointer (which tells commits
// that a standby is required) asynchronously. Each probe that waits is
// ended; one that commits at once is tried again.
func commitsWait(ctx context.Context, t *testing.T, url string, admin *pgx.Conn) {
	t.Helper()
	for {
		probe, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := probe.Exec(ctx, `SELECT pg_logical_emit_message(true, 'probe', '')`)
			done <- err
		}()
		for again := false; !again; {
			var pid int
			err := admin.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND datname = current_database() LIMIT 1`).Scan(&pid)
			switch {
			case err == nil:
				if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
					t.Fatal(err)
				}
				<-done
				probe.Close(context.Background())
				return
			case !errors.Is(err, pgx.ErrNoRows):
				t.Fatal(err)
			}
			select {
			case <-done:
				again = true // committed without waiting: not yet, probe again
			case <-ctx.Done():
				t.Fatal("commits never wait for the synchronous standby")
			case <-time.After(20 * time.Millisecond):
			}
		}
		probe.Close(ctx)
	}
}

// waitSyncRep returns the pid of the backend whose commit waits for a
// synchronous standby. It fails the test if the Ingest behind it answers
// first: that commit waited for no standby.
func waitSyncRep[T any](ctx context.Context, t *testing.T, admin *pgx.Conn, answered <-chan T) int {
	t.Helper()
	for {
		var pid int
		err := admin.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND datname = current_database() LIMIT 1`).Scan(&pid)
		switch {
		case err == nil:
			return pid
		case !errors.Is(err, pgx.ErrNoRows):
			t.Fatal(err)
		}
		select {
		case r := <-answered:
			t.Fatalf("answered %+v before any synchronous standby confirmed the message: a 2xx the failover can take back", r)
		case <-ctx.Done():
			t.Fatal("no commit waits for the synchronous standby")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
