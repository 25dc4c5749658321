package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	ordosql "github.com/ordo-dev/ordo/sql"
)

// servingDatabase is awayDatabase with Postgres there, and a pool on it.
func servingDatabase(t *testing.T) (pool *pgxpool.Pool, env []string, apiKey string, wa *whatsapptest.Server) {
	t.Helper()
	proxy, env, apiKey, wa := awayDatabase(t)
	proxy.Restore()
	pool, err := pgxpool.New(context.Background(), strings.TrimPrefix(env[0], "DATABASE_URL="))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, env, apiKey, wa
}

// nextBuildMigrated makes the database look as `ordo migrate up` of the
// next build leaves it: its migration applied, a function of its (a body
// this build does not carry, same signature), and the oldest build it
// serves recorded.
func nextBuildMigrated(t *testing.T, pool *pgxpool.Pool, oldest uint) {
	t.Helper()
	fns, err := ordosql.Functions()
	if err != nil {
		t.Fatal(err)
	}
	var drainKey string
	for _, f := range fns {
		if f.Name == "drain_key" {
			drainKey = f.SQL
		}
	}
	next := strings.Replace(drainKey, "$$", "$$\n-- the next build's\n", 1)
	for _, q := range []string{
		`UPDATE public.` + ordosql.MigrationsTable + ` SET version = ` + strconv.Itoa(int(ordosql.LatestVersion()+1)),
		next,
		`UPDATE ordo.function_checksums SET sha256 = 'the next build' WHERE name = 'drain_key'`,
		`UPDATE ordo.schema_serves SET oldest = ` + strconv.Itoa(int(oldest)),
	} {
		if _, err := pool.Exec(t.Context(), q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
}

// A rolling deploy: `ordo migrate up` of the next build comes first, then
// its processes replace this build's one at a time. Meanwhile this build's
// processes go on — ready, accepting, sending, starting again after a
// crash — on the newer schema that still serves them. Before, /readyz
// required the schema to be exactly this build's: after the migration
// every process of the build before answered 503 (a load balancer took
// them all out at once) and one that restarted exited ("schema at version
// 53, want 52").
//
// When the schema no longer serves this build, it says so: /readyz 503, a
// start exits naming what to do. And this build's `ordo migrate up` on a
// newer schema refuses, rather than put its older functions back.
func TestARollingDeployKeepsTheBuildBeforeServing(t *testing.T) {
	t.Parallel()
	pool, env, apiKey, wa := servingDatabase(t)
	dbURL := strings.TrimPrefix(env[0], "DATABASE_URL=")
	nextBuildMigrated(t, pool, ordosql.LatestVersion())

	addr := freePort(t)
	p := startOrdo(t, "serve", addr, env)
	base := "http://" + addr
	waitGet(t, p, base+"/readyz", time.Minute)
	if resp := postHello(t, base, apiKey, "m-1"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST on the next build's schema: %s, want 202", resp.Status)
	}
	waitSends(t, p, wa, 1, "the message on the next build's schema")

	// This build's migrate on the newer schema: refused, nothing put back.
	var out bytes.Buffer
	cliEnv := &cli.Env{DatabaseURL: dbURL, Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler)}
	if code := run(context.Background(), cliEnv, []string{"migrate", "up"}); code == 0 || !strings.Contains(out.String(), "newer than this build's") {
		t.Fatalf("migrate up of the build before on a newer schema: exit %d, %q; want a refusal naming it", code, out.String())
	}
	var sum string
	if err := pool.QueryRow(t.Context(), `SELECT sha256 FROM ordo.function_checksums WHERE name = 'drain_key'`).Scan(&sum); err != nil || sum != "the next build" {
		t.Fatalf("drain_key after the refused migrate: %q (%v); want the next build's left in place", sum, err)
	}

	// What a rollback checks first: the schema serves this build.
	next, latest := ordosql.LatestVersion()+1, ordosql.LatestVersion()
	migrateVersion := func() string {
		out.Reset()
		if code := run(context.Background(), cliEnv, []string{"migrate", "version"}); code != 0 {
			t.Fatalf("migrate version: exit %d, %q", code, out.String())
		}
		return strings.TrimSpace(out.String())
	}
	if got, want := migrateVersion(), fmt.Sprintf(`{"version":%d,"dirty":false,"latest":%d,"oldest_served":%d,"serves_this_build":true}`, next, latest, latest); got != want {
		t.Fatalf("migrate version on the next build's schema: %s, want %s", got, want)
	}

	// A later build that no longer serves this one.
	if _, err := pool.Exec(t.Context(), `UPDATE ordo.schema_serves SET oldest = $1`, next); err != nil {
		t.Fatal(err)
	}
	if got, want := migrateVersion(), fmt.Sprintf(`{"version":%d,"dirty":false,"latest":%d,"oldest_served":%d,"serves_this_build":false}`, next, latest, next); got != want {
		t.Fatalf("migrate version on a schema that no longer serves this build: %s, want %s", got, want)
	}
	if s := status(base + "/readyz"); s != http.StatusServiceUnavailable {
		t.Fatalf("/readyz on a schema that no longer serves this build: %d, want 503", s)
	}
	out.Reset()
	cliEnv = &cli.Env{DatabaseURL: dbURL, MasterKeys: strings.TrimPrefix(env[1], "ORDO_MASTER_KEYS="), Addr: freePort(t),
		Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code := run(ctx, cliEnv, []string{"serve"}); code != 1 || !strings.Contains(out.String(), "replace this process with the newer build") {
		t.Fatalf("serve on a schema that no longer serves this build: exit %d, %q; want 1 and what to do", code, out.String())
	}
}

// A newer build's migration that breaks this one (here: a column of the
// tenant row this build reads, renamed) while this build's process runs:
// it answers 503 with Retry-After instead of 500, its runners back off,
// and it says so once — not a line per request and per claim (a run of
// `make chaos-upgrade` across migration 000051 logged 260 warnings a
// second and answered every request 500 for as long). When the schema is
// this build's again, it says so once and goes on.
func TestASchemaThatNoLongerMatchesIsWaitedOutQuietly(t *testing.T) {
	t.Parallel()
	pool, env, apiKey, wa := servingDatabase(t)
	addr := freePort(t)
	p := startOrdo(t, "serve", addr, env)
	base := "http://" + addr
	waitGet(t, p, base+"/readyz", time.Minute)
	post := func(id string) *http.Response { return postHello(t, base, apiKey, id) }
	exec := func(qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := pool.Exec(t.Context(), q); err != nil {
				t.Fatalf("%.60s: %v", q, err)
			}
		}
	}

	// The next build's migration, declaring the break.
	exec(`ALTER TABLE ordo.tenants RENAME COLUMN ambiguous TO ambiguous_policy`,
		`UPDATE public.`+ordosql.MigrationsTable+` SET version = `+strconv.Itoa(int(ordosql.LatestVersion()+1)),
		`UPDATE ordo.schema_serves SET oldest = `+strconv.Itoa(int(ordosql.LatestVersion()+1)))
	// Work for the runners, enqueued as another application would.
	exec(`SELECT ordo.enqueue_message('acme', '16505550000', 'sql-1', 'outbound', '{"type":"text","text":{"body":"from sql"}}')`)
	for i := range 20 {
		if resp := post("m-" + strconv.Itoa(i)); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("POST on a schema that no longer matches: %s (Retry-After %q); want 503 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
		}
	}
	if s := status(base + "/readyz"); s != http.StatusServiceUnavailable {
		t.Fatalf("/readyz: %d, want 503", s)
	}
	time.Sleep(3 * time.Second) // the runners claim, fail and back off meanwhile
	if got := logLines(t, p, "no longer matches this build"); len(got) != 1 {
		t.Fatalf("%d lines saying the schema no longer matches, want 1%s", len(got), p.LogTail())
	}
	if n := len(wa.Sends()); n != 0 {
		t.Fatalf("%d sends while the claims could not read the tenant; want none (the claims did not fail?)", n)
	}
	for _, noisy := range []string{"request failed", "claim a conversation", "drain failed", "not ready"} {
		if got := logLines(t, p, noisy); len(got) != 0 {
			t.Fatalf("%d lines %q while the schema did not match, want none:\n%s", len(got), noisy, strings.Join(got, "\n"))
		}
	}

	// Rolled back: this build's schema again.
	exec(`ALTER TABLE ordo.tenants RENAME COLUMN ambiguous_policy TO ambiguous`,
		`UPDATE public.`+ordosql.MigrationsTable+` SET version = `+strconv.Itoa(int(ordosql.LatestVersion())),
		`UPDATE ordo.schema_serves SET oldest = `+strconv.Itoa(ordosql.OldestServed))
	waitGet(t, p, base+"/readyz", time.Minute)
	if got := logLines(t, p, "matches this build again"); len(got) != 1 {
		t.Fatalf("%d lines saying the schema matches again, want 1%s", len(got), p.LogTail())
	}
	if resp := post("m-after"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST once the schema matches again: %s, want 202", resp.Status)
	}
	waitSends(t, p, wa, 2, "the waiting message and the new one")
}
