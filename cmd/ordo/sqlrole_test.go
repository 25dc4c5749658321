package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/tenants"
)

// `ordo tenant sql-role --slug acme` makes a login role for acme's
// applications: with it, enqueueing for another tenant is refused, reading
// ordo.credentials (or any table) is refused, and enqueueing for acme works
// inside the application's own transaction — rolled back, nothing is
// stored; committed, the message is delivered — and ordo.my_messages shows
// acme's messages only. (main: an application had to connect as the role
// owning ordo's schema, and named any tenant it liked.)
func TestTenantSQLRole(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{})
	b.AddTenant("beta", "2000002", tenants.UpdateParams{})
	b.IngestFor("beta", "16505550009", "beta-1", "beta's own")
	ctx := context.Background()

	var stdout, stderr bytes.Buffer
	env := &cli.Env{DatabaseURL: b.URL, Stdout: &stdout, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler)}
	if code := run(ctx, env, []string{"tenant", "sql-role", "--slug", "acme"}); code != 0 {
		t.Fatalf("ordo tenant sql-role: exit %d: %s", code, stderr.String())
	}
	var role tenants.AppRole
	if err := json.Unmarshal(stdout.Bytes(), &role); err != nil || role.Role == "" || len(role.Password) < 24 || role.Tenant != "acme" {
		t.Fatalf("ordo tenant sql-role printed %q (%v): want the tenant, a role and its password", stdout.String(), err)
	}
	if code := run(ctx, &cli.Env{DatabaseURL: b.URL, Stdout: &stdout, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler)},
		[]string{"tenant", "sql-role", "--slug", "nobody"}); code == 0 {
		t.Fatalf("sql-role for an unknown tenant: exit 0")
	}
	if n := b.Count(`SELECT count(*) FROM ordo.audit_log WHERE action = 'tenant.sql_role' AND tenant = 'acme' AND details::text NOT LIKE '%' || $1 || '%'`, role.Password); n != 1 {
		t.Fatalf("%d audit entries for the role (without its password), want 1", n)
	}

	u, err := url.Parse(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role.Role, role.Password)
	app, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("connect as the application's role: %v", err)
	}
	defer app.Close(ctx)

	payload := string(jobstest.Outbound("16505551234", "from the app"))
	for _, q := range []string{
		`SELECT * FROM ordo.enqueue_message('beta', '16505550009', 'forged-1', 'outbound', '{"type":"text","text":{"body":"x"}}')`,
		`SELECT * FROM ordo.enqueue_message('acme', '16505551234', 'forged-2', 'outbound', '{"type":"text","text":{"body":"x"}}')`,
		`SELECT * FROM ordo.credentials`,
		`SELECT * FROM ordo.tenants`,
		`SELECT * FROM ordo.messages`,
		`SELECT * FROM ordo.audit_log`,
		`SELECT ordo.create_app_role('beta', 'mine', 'x')`,
	} {
		if _, err := app.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("as the application: %s: %v, want permission denied", q, err)
		}
	}

	// Rolled back with the application's own work: nothing stored.
	err = pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT * FROM ordo.enqueue_my_message('16505551234', 'app-rolled-back', 'outbound', $1)`, payload); err != nil {
			return err
		}
		return errRollBack
	})
	if !errors.Is(err, errRollBack) {
		t.Fatalf("enqueue in the application's transaction: %v", err)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'app-rolled-back'`); n != 0 {
		t.Fatalf("a rolled-back enqueue stored %d messages", n)
	}
	// Committed: accepted for acme, and delivered.
	var seq int64
	var dup bool
	err = pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT seq, duplicate FROM ordo.enqueue_my_message('16505551234', 'app-1', 'outbound', $1)`, payload).Scan(&seq, &dup)
	})
	if err != nil || dup || seq != 1 {
		t.Fatalf("enqueue committed: seq %d duplicate %t, %v; want seq 1, new", seq, dup, err)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.messages m JOIN ordo.tenants t ON t.id = m.tenant_id WHERE m.message_id = 'app-1' AND t.slug = 'acme'`); n != 1 {
		t.Fatalf("the committed enqueue stored %d messages for acme, want 1", n)
	}
	b.WaitFor("the app's message to be sent", 15*time.Second, func() bool {
		for _, s := range b.WhatsApp.Sends() {
			if s.Text == "from the app" {
				return true
			}
		}
		return false
	})
	rows, _ := app.Query(ctx, `SELECT message_id FROM ordo.my_messages ORDER BY message_id`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || strings.Join(ids, ",") != "app-1" {
		t.Fatalf("ordo.my_messages as acme's application: %v, %v; want app-1 only", ids, err)
	}
}

var errRollBack = errors.New("roll back")
