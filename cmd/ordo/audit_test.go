package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/tenants"
)

// The command line's operator actions are audited as "cli", each in its
// own transaction: a refused command leaves no entry, and no entry holds a
// secret.
func TestCommandLineAudit(t *testing.T) {
	t.Parallel()
	url := sqltest.URL(t)
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ordo := func(wantCode int, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		env := &cli.Env{DatabaseURL: url, MasterKeys: key.Format(), Stdout: &stdout, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler)}
		if code := run(ctx, env, args); code != wantCode {
			t.Fatalf("ordo %s: exit %d, want %d; stderr %s", strings.Join(args, " "), code, wantCode, stderr.String())
		}
		return stdout.String()
	}
	var created struct {
		APIKey        string `json:"api_key"`
		HandlerSecret string `json:"handler_secret"`
	}
	if err := json.Unmarshal([]byte(ordo(0, "tenant", "create", "--slug", "delta", "--handler-url", "https://n8n.example/webhook/delta-secret")), &created); err != nil {
		t.Fatal(err)
	}
	ordo(0, "tenant", "update", "--slug", "delta", "--max-attempts", "4", "--handler-url", "https://n8n.example/webhook/other-secret")
	ordo(1, "tenant", "update", "--slug", "delta", "--max-attempts", "0")
	var k struct {
		APIKey string `json:"api_key"`
		Prefix string `json:"prefix"`
	}
	if err := json.Unmarshal([]byte(ordo(0, "apikey", "create", "--tenant", "delta")), &k); err != nil {
		t.Fatal(err)
	}
	ordo(0, "apikey", "revoke", "--prefix", k.Prefix, "--yes")
	ordo(1, "apikey", "revoke", "--prefix", k.Prefix, "--yes")
	cred := filepath.Join(t.TempDir(), "whatsapp.json")
	if err := os.WriteFile(cred, []byte(`{"phone_number_id":"1088","access_token":"EAAG-delta-token","app_secret":"delta-app","verify_token":"delta-verify"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ordo(0, "credential", "set", "--tenant", "delta", "--name", "whatsapp", "--from-file", cred)
	ordo(1, "tenant", "pause", "--slug", "delta", "--reason", strings.Repeat("x", tenants.PauseReasonMaxLength+1))
	ordo(1, "tenant", "pause", "--slug", "nobody")
	if out := ordo(0, "tenant", "pause", "--slug", "delta", "--reason", "invoice overdue"); !strings.Contains(out, `"paused":true`) {
		t.Fatalf("pause printed %s", out)
	}
	if out := ordo(0, "tenant", "pause", "--slug", "delta"); !strings.Contains(out, `"paused":false`) {
		t.Fatalf("a second pause printed %s: want paused false (it already was)", out)
	}
	if out := ordo(0, "tenant", "resume", "--slug", "delta"); !strings.Contains(out, `"resumed":true`) {
		t.Fatalf("resume printed %s", out)
	}

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, _ := pool.Query(ctx, `SELECT actor, action, coalesce(tenant, ''), details::text FROM ordo.audit_log ORDER BY id`)
	var got []string
	var all strings.Builder
	for rows.Next() {
		var actor, action, tenant, details string
		if err := rows.Scan(&actor, &action, &tenant, &details); err != nil {
			t.Fatal(err)
		}
		got = append(got, actor+" "+action+" "+tenant)
		all.WriteString(details)
	}
	want := "cli tenant.create delta,cli tenant.update delta,cli api_key.create delta,cli api_key.revoke delta,cli credential.set delta," +
		"cli tenant.pause delta,cli tenant.pause delta,cli tenant.resume delta"
	if strings.Join(got, ",") != want {
		t.Errorf("audit log:\n%s\nwant\n%s", strings.Join(got, ","), want)
	}
	if !strings.Contains(all.String(), `"max_attempts": 4`) || !strings.Contains(all.String(), `"handler_url": "set"`) {
		t.Errorf("the update's entry does not say what changed: %s", all.String())
	}
	if created.APIKey == "" || k.APIKey == "" {
		t.Fatalf("the keys were not printed")
	}
	for _, secret := range []string{created.APIKey, created.HandlerSecret, k.APIKey, "delta-secret", "other-secret", "EAAG-delta-token", "delta-app", "delta-verify"} {
		if strings.Contains(all.String(), secret) {
			t.Errorf("an audit entry holds a secret (%s…)", secret[:4])
		}
	}
}
