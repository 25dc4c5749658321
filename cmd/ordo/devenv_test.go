package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/tenants"
)

// The operator commands run against a running `make dev` with nothing set
// by hand: they read the env file ordo dev leaves in .ordo/. Handler auth
// is set through the vault and never printed; a handler URL with a
// password in it is refused with a pointer to it.
func TestOperatorCommandsUseTheDevEnvFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.WriteDevEnv(dir, sqltest.URL(t), key.Format()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "env")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("env file: %v, %v; want mode 0600", fi, err)
	}
	ordo := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		env := &cli.Env{DevDir: dir, Stdout: &stdout, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler)}
		code := run(context.Background(), env, args)
		return code, stdout.String(), stderr.String()
	}
	if code, out, errOut := ordo("tenant", "create", "--slug", "second"); code != 0 || !strings.Contains(out, `"api_key":"ordo_`) {
		t.Fatalf("tenant create: exit %d, %s %s", code, out, errOut)
	}
	code, _, errOut := ordo("tenant", "update", "--slug", "second", "--handler-url", "https://n8n:pa55word@n8n.example.com/webhook/x")
	if code != 1 || !strings.Contains(errOut, "--name handler_auth") || strings.Contains(errOut, "pa55word") {
		t.Fatalf("userinfo URL: exit %d, %q; want refused, pointing at handler_auth, no password", code, errOut)
	}
	if code, out, errOut := ordo("tenant", "update", "--slug", "second", "--handler-url", "https://n8n.example.com/webhook/x",
		"--handler-mode", "async", "--handler-timeout", "90s", "--reply-deadline", "20m"); code != 0 ||
		!strings.Contains(out, `"handler_mode":"async"`) || !strings.Contains(out, `"handler_timeout_ms":90000`) || !strings.Contains(out, `"reply_deadline_ms":1200000`) {
		t.Fatalf("tenant update: exit %d, %s %s", code, out, errOut)
	}
	cred := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(cred, []byte(`{"header":"X-N8N-Key","value":"hdr-pa55word"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := ordo("credential", "set", "--tenant", "second", "--name", "handler_auth", "--from-file", cred); code != 0 || strings.Contains(out+errOut, "pa55word") {
		t.Fatalf("credential set: exit %d, %s %s", code, out, errOut)
	}
	if err := os.WriteFile(cred, []byte(`{"header":"X-N8N-Key"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := ordo("credential", "set", "--tenant", "second", "--name", "handler_auth", "--from-file", cred); code != 1 || !strings.Contains(errOut, "handler_auth") {
		t.Fatalf("a handler_auth without its value: exit %d, %q; want refused", code, errOut)
	}
	if code, out, errOut := ordo("tenant", "list"); code != 0 || !strings.Contains(out, `"slug":"second"`) || strings.Contains(out+errOut, "pa55word") {
		t.Fatalf("tenant list: exit %d, %s %s", code, out, errOut)
	}
}

// Without DATABASE_URL or ORDO_MASTER_KEYS and no ordo dev around, the error
// says where the values come from instead of suggesting a new key the
// server would not have.
func TestMissingMasterKeysPointsAtTheServersKeys(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	env := &cli.Env{DevDir: t.TempDir(), DatabaseURL: "postgres://nobody@127.0.0.1:1/none", Stdout: &bytes.Buffer{}, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler)}
	if code := run(context.Background(), env, []string{"tenant", "create", "--slug", "x"}); code != 1 {
		t.Fatalf("exit %d", code)
	}
	if msg := stderr.String(); !strings.Contains(msg, "server's own keys") || !strings.Contains(msg, ".ordo/") {
		t.Fatalf("stderr %q", msg)
	}
}
