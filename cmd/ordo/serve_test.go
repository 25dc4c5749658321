package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/tenants"
)

// ordo serve refuses a short ORDO_ADMIN_PASSWORD at start, naming the
// variable and the minimum, before it touches the database.
func TestServeRefusesShortAdminPassword(t *testing.T) {
	t.Parallel()
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	env := &cli.Env{
		DatabaseURL: "postgres://nobody@127.0.0.1:1/none", MasterKeys: key.Format(), AdminPassword: "hunter2",
		Stdout: &bytes.Buffer{}, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler),
	}
	if code := run(context.Background(), env, []string{"serve"}); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if msg := stderr.String(); !strings.Contains(msg, "ORDO_ADMIN_PASSWORD") || !strings.Contains(msg, "at least 12") {
		t.Fatalf("stderr %q: want the variable and the minimum named", msg)
	}
}
