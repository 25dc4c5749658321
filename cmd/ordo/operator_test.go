package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/sql/sqltest"
)

// ordo operator add takes a piped password or prints a generated one;
// list shows names and roles, never a hash; remove wants --yes off a
// terminal; each change is audited as "cli".
func TestCommandLineOperators(t *testing.T) {
	t.Parallel()
	url := sqltest.URL(t)
	ctx := context.Background()
	ordo := func(wantCode int, stdin io.Reader, args ...string) (string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		env := &cli.Env{DatabaseURL: url, Stdin: stdin, Stdout: &stdout, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler)}
		if code := run(ctx, env, args); code != wantCode {
			t.Fatalf("ordo %s: exit %d, want %d; stderr %s", strings.Join(args, " "), code, wantCode, stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	const piped = "a piped password 1"
	out, _ := ordo(0, strings.NewReader(piped+"\n"), "operator", "add", "--name", "alice", "--role", "operator")
	if strings.Contains(out, piped) || !strings.Contains(out, `"role":"operator"`) {
		t.Errorf("add with a piped password printed %s", out)
	}
	out, msg := ordo(0, nil, "operator", "add", "--name", "bob")
	var bob struct{ Operator, Role, Password string }
	if err := json.Unmarshal([]byte(out), &bob); err != nil || bob.Role != engine.RoleViewer || len(bob.Password) < engine.OperatorPasswordMinLength ||
		!strings.Contains(msg, "shown once") {
		t.Errorf("add without a password printed %s / %s: want a viewer and a one-time password", out, msg)
	}
	_, msg = ordo(1, strings.NewReader("short\n"), "operator", "add", "--name", "carol")
	if !strings.Contains(msg, "at least 12") {
		t.Errorf("a short password: %s", msg)
	}
	_, msg = ordo(1, nil, "operator", "add", "--name", "admin")
	if !strings.Contains(msg, "break-glass") {
		t.Errorf("the name admin: %s", msg)
	}
	_, msg = ordo(1, nil, "operator", "add", "--name", "dave", "--role", "root")
	if !strings.Contains(msg, "role: must be viewer, operator or admin") {
		t.Errorf("an unknown role: %s", msg)
	}
	ordo(1, strings.NewReader(piped+"\n"), "operator", "add", "--name", "alice")
	list, _ := ordo(0, nil, "operator", "list")
	if !strings.Contains(list, "alice") || !strings.Contains(list, "bob") || strings.Contains(list, "argon2") || strings.Contains(list, "carol") {
		t.Errorf("list:\n%s", list)
	}
	_, msg = ordo(1, nil, "operator", "remove", "--name", "bob")
	if !strings.Contains(msg, "--yes") {
		t.Errorf("remove without --yes: %s", msg)
	}
	ordo(0, nil, "operator", "remove", "--name", "bob", "--yes")
	ordo(1, nil, "operator", "remove", "--name", "bob", "--yes")
	if list, _ := ordo(0, nil, "operator", "list"); strings.Contains(list, "bob") {
		t.Errorf("bob is still listed:\n%s", list)
	}

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	e := engine.New(pool, nil)
	if _, err := e.CheckOperatorLogin(ctx, "alice", piped); err != nil {
		t.Errorf("alice cannot log in with the piped password: %v", err)
	}
	if _, err := e.CheckOperatorLogin(ctx, "alice", piped+"x"); engine.ErrorCode(err) != engine.CodeUnauthorized {
		t.Errorf("alice logs in with a wrong password: %v", err)
	}
	var actions string
	_ = pool.QueryRow(ctx, `SELECT string_agg(actor || ' ' || action, ', ' ORDER BY id) FROM ordo.audit_log`).Scan(&actions)
	if actions != "cli operator.add, cli operator.add, cli operator.remove" {
		t.Errorf("audit: %s", actions)
	}
}
