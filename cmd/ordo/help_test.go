package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
)

// helpActions are the actions of the commands that have them; every one's
// --help is checked.
var helpActions = map[string][]string{
	"tenant":       {"create", "update", "pause", "resume", "list"},
	"apikey":       {"create", "revoke", "list"},
	"credential":   {"set", "delete"},
	"keys":         {"rotate", "generate"},
	"dead-letters": {"list", "replay", "skip"},
	"migrate":      {"up", "down", "version"},
	"n8n":          {"templates"},
}

// helpFlags are flags, with their type as --help prints it, that the help
// of these command lines must list.
var helpFlags = map[string][]string{
	"serve":               {"-handler-timeout duration", "-role string", "-workers int"},
	"dev":                 {"usage: ordo dev"},
	"purge":               {"-tenant string", "-before string", "-all", "-yes"},
	"healthcheck":         {"-addr string", "-timeout duration"},
	"tenant create":       {"-slug string", "-handler-url string"},
	"tenant update":       {"-handler-timeout duration", "-weight int", "-retention string"},
	"tenant pause":        {"-reason string"},
	"tenant resume":       {"-slug string"},
	"apikey create":       {"-tenant string"},
	"apikey revoke":       {"-prefix string", "-yes"},
	"apikey list":         {"-tenant string"},
	"credential set":      {"-name string", "-from-file string"},
	"credential delete":   {"-name string", "-yes"},
	"keys rotate":         {"-yes"},
	"dead-letters list":   {"-tenant string", "-state string", "-limit int"},
	"dead-letters replay": {"-id string"},
	"dead-letters skip":   {"-id string"},
	"migrate down":        {"-yes"},
	"n8n templates":       {"-tenant string", "-out string"},
}

// Every command and action answers --help with exit 0 and no database,
// listing its flags with their types (and defaults where not zero).
func TestEveryCommandHelp(t *testing.T) {
	t.Parallel()
	var lines [][]string
	for _, c := range commands() {
		if c.hidden {
			continue
		}
		lines = append(lines, []string{c.name})
		for _, a := range helpActions[c.name] {
			lines = append(lines, []string{c.name, a})
		}
	}
	for _, l := range lines {
		name := strings.Join(l, " ")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			env := &cli.Env{Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler)}
			code := run(context.Background(), env, append(append([]string{}, l...), "--help"))
			text := out.String()
			if code != 0 || !strings.Contains(text, "usage: ordo "+l[0]) {
				t.Fatalf("ordo %s --help: exit %d:\n%s", name, code, text)
			}
			for _, bad := range []string{"DATABASE_URL is not set", "connect to database", "unknown action", "help requested", "-handler-timeout ordo"} {
				if strings.Contains(text, bad) {
					t.Errorf("ordo %s --help says %q:\n%s", name, bad, text)
				}
			}
			for _, f := range helpFlags[name] {
				if !strings.Contains(text, f) {
					t.Errorf("ordo %s --help does not list %q:\n%s", name, f, text)
				}
			}
		})
	}
}
