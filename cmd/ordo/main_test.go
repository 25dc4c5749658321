package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
)

// Help at every level exits 0 and needs no database; migrate down needs
// --yes; errors name the full subcommand.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		code    int
		want    string // in stdout+stderr
		mustNot string
	}{
		{[]string{"--help"}, 0, "ORDO_MASTER_KEYS", "DATABASE_URL is not set"},
		{[]string{"help"}, 0, "healthcheck", ""},
		{[]string{"serve", "--help"}, 0, "-stop-timeout", "help requested"},
		{[]string{"migrate", "--help"}, 0, "down [--yes]", "DATABASE_URL is not set"},
		{[]string{"dead-letters", "list", "-h"}, 0, "usage: ordo dead-letters list", "DATABASE_URL is not set"},
		{[]string{"tenant", "create", "-h"}, 0, "-slug", "DATABASE_URL is not set"},
		{[]string{"version"}, 0, `"go":"go`, ""},
		{[]string{"healthcheck", "--help"}, 0, "-addr", "DATABASE_URL is not set"},
		{[]string{"migrate", "down"}, 1, "--yes", ""},
		{[]string{"dead-letters", "replay"}, 1, "ordo dead-letters replay:", ""},
		{[]string{"nonsense"}, 2, "unknown command", ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			env := &cli.Env{DatabaseURL: "", Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler)}
			if tc.args[0] == "migrate" && tc.args[1] == "down" {
				env.DatabaseURL = "postgres://never.invalid/ordo"
			}
			code := run(context.Background(), env, tc.args)
			if code != tc.code || !strings.Contains(out.String(), tc.want) || (tc.mustNot != "" && strings.Contains(out.String(), tc.mustNot)) {
				t.Fatalf("ordo %s: exit %d, want %d; output:\n%s\nwant it to say %q and not %q", strings.Join(tc.args, " "), code, tc.code, out.String(), tc.want, tc.mustNot)
			}
		})
	}
}
