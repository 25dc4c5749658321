package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	ordosql "github.com/ordo-dev/ordo/sql"
)

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
	proxy, env, apiKey, wa := awayDatabase(t)
	proxy.Restore()
	dbURL := strings.TrimPrefix(env[0], "DATABASE_URL=")
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	nextBuildMigrated(t, pool, ordosql.LatestVersion())

	addr := freePort(t)
	p := startOrdo(t, "serve", addr, env)
	base := "http://" + addr
	waitGet(t, p, base+"/readyz", time.Minute)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages",
		strings.NewReader(`{"message_id":"m-1","conversation_id":"16505551234","type":"text","text":{"body":"hello"}}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST on the next build's schema: %s, want 202", resp.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := wa.WaitForSends(ctx, 1); err != nil {
		t.Fatalf("the message was not sent on the next build's schema: %v%s", err, p.LogTail())
	}

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

	// A later build that no longer serves this one.
	if _, err := pool.Exec(t.Context(), `UPDATE ordo.schema_serves SET oldest = $1`, ordosql.LatestVersion()+1); err != nil {
		t.Fatal(err)
	}
	if s := status(base + "/readyz"); s != http.StatusServiceUnavailable {
		t.Fatalf("/readyz on a schema that no longer serves this build: %d, want 503", s)
	}
	out.Reset()
	cliEnv = &cli.Env{DatabaseURL: dbURL, MasterKeys: strings.TrimPrefix(env[1], "ORDO_MASTER_KEYS="), Addr: freePort(t),
		Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code := run(ctx, cliEnv, []string{"serve"}); code != 1 || !strings.Contains(out.String(), "replace this process with the newer build") {
		t.Fatalf("serve on a schema that no longer serves this build: exit %d, %q; want 1 and what to do", code, out.String())
	}
}
