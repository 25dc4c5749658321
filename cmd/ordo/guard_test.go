package main

import (
	"bytes"
	"context"
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

// Destructive commands ask on a terminal and need --yes anywhere else;
// refused, they change nothing. What they do is audited under the OS user
// and host. Credentials are a closed set of names, a WhatsApp credential
// missing a field is refused with the stored one kept, and a credential
// can be deleted.
func TestDestructiveCommandsGuardAndAudit(t *testing.T) {
	t.Parallel()
	url := sqltest.URL(t)
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ordoWith := func(terminal bool, stdin string, wantCode int, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		env := &cli.Env{DatabaseURL: url, MasterKeys: key.Format(), Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler),
			Stdin: strings.NewReader(stdin), Terminal: terminal, Actor: "cli:tester@box"}
		if code := run(ctx, env, args); code != wantCode {
			t.Fatalf("ordo %s: exit %d, want %d; output %s", strings.Join(args, " "), code, wantCode, out.String())
		}
		return out.String()
	}
	ordo := func(wantCode int, args ...string) string { t.Helper(); return ordoWith(false, "", wantCode, args...) }
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	count := func(q string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	ordo(0, "tenant", "create", "--slug", "demo")
	if _, err := pool.Exec(ctx, `SELECT * FROM ordo.enqueue_message('demo', 'c1', 'm1', 'outbound', '{"type":"text","text":{"body":"x"}}')`); err != nil {
		t.Fatal(err)
	}
	const messages = `SELECT count(*) FROM ordo.messages`
	if out := ordo(1, "purge", "--tenant", "demo", "--all"); !strings.Contains(out, "--yes") {
		t.Fatalf("purge without --yes and no terminal: %s; want it to ask for --yes", out)
	}
	if out := ordoWith(true, "no\n", 1, "purge", "--tenant", "demo", "--all"); !strings.Contains(out, "Type yes") {
		t.Fatalf("purge on a terminal: %s; want a question", out)
	}
	if n := count(messages); n != 1 {
		t.Fatalf("%d messages after refused purges, want 1", n)
	}
	ordo(0, "purge", "--tenant", "demo", "--all", "--yes")
	if n := count(messages); n != 0 {
		t.Fatalf("%d messages after purge --all --yes, want 0", n)
	}

	ordo(1, "keys", "rotate")
	ordoWith(true, "yes\n", 0, "keys", "rotate")
	ordo(1, "migrate", "down")

	// Credentials.
	if out := ordo(1, "credential", "set", "--tenant", "demo", "--name", "whatsap", "--from-file", "-"); !strings.Contains(out, "handler_auth, whatsapp") {
		t.Fatalf("a misspelt name: %s; want the valid names listed", out)
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := write("full.json", `{"phone_number_id":"1001","access_token":"tok-full","app_secret":"app-full","verify_token":"ver-full"}`)
	part := write("part.json", `{"phone_number_id":"1002","access_token":"tok-part"}`)
	ordo(0, "credential", "set", "--tenant", "demo", "--name", "whatsapp", "--from-file", full)
	if out := ordo(1, "credential", "set", "--tenant", "demo", "--name", "whatsapp", "--from-file", part); !strings.Contains(out, "app_secret, verify_token missing") || strings.Contains(out, "tok-part") {
		t.Fatalf("an incomplete whatsapp credential: %s; want refused naming the missing fields, no value", out)
	}
	vault, err := tenants.NewVault(pool, []tenants.MasterKey{key})
	if err != nil {
		t.Fatal(err)
	}
	store := tenants.NewStore(pool, vault)
	demo, err := store.BySlug(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := vault.Get(ctx, demo.ID, "whatsapp"); err != nil || !strings.Contains(string(got), "tok-full") {
		t.Fatalf("stored whatsapp credential after the refused one: %v; want the first kept", err)
	}
	auth := write("auth.json", `{"header":"X-N8N-Key","value":"hdr-secret"}`)
	ordo(0, "credential", "set", "--tenant", "demo", "--name", "handler_auth", "--from-file", auth)
	ordo(1, "credential", "delete", "--tenant", "demo", "--name", "handler_auth")
	ordo(0, "credential", "delete", "--tenant", "demo", "--name", "handler_auth", "--yes")
	if a, err := store.HandlerAuth(ctx, demo.ID); err != nil || a != nil {
		t.Fatalf("handler auth after delete: %v, %v; want none", a, err)
	}
	if out := ordo(1, "credential", "delete", "--tenant", "demo", "--name", "handler_auth", "--yes"); !strings.Contains(out, "no handler_auth credential") {
		t.Fatalf("deleting it again: %s", out)
	}

	rows, _ := pool.Query(ctx, `SELECT actor || ' ' || action FROM ordo.audit_log ORDER BY id`)
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	want := "cli:tester@box tenant.create,cli:tester@box tenant.purge,cli:tester@box keys.rotate," +
		"cli:tester@box credential.set,cli:tester@box credential.set,cli:tester@box credential.delete"
	if strings.Join(got, ",") != want {
		t.Fatalf("audit log:\n%s\nwant\n%s", strings.Join(got, ","), want)
	}
}
