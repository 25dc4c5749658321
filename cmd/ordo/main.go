// Command ordo is the product: the server and its operator commands. The
// benchmark (cmd/ordo-bench) and the crash run (cmd/ordo-chaos) are binaries
// of their own, so this one links no Redis client, no fake Cloud API and no
// harness. Only main reads the environment (cli.ReadEnv).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
)

// command is one `ordo <name>` subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *cli.Env, args []string) error
	hidden  bool
	// devEnv: an operator command, which reads DATABASE_URL and
	// ORDO_MASTER_KEYS, when unset, from a running `ordo dev`'s env file.
	devEnv bool
}

func commands() []command {
	return []command{
		{name: "dev", summary: "run everything locally on a private Postgres under ./.ordo/", run: runDev},
		{name: "serve", summary: "run the production server (--role all|api|worker); needs DATABASE_URL", run: runServe},
		{name: "migrate", summary: "migrate up | down [--yes] | version (ordo's tables, River's, the SQL functions)", run: runMigrate, devEnv: true},
		{name: "tenant", summary: "tenant create|update|pause|resume|list", run: runTenant, devEnv: true},
		{name: "apikey", summary: "apikey create --tenant S | revoke --prefix P [--yes] | list --tenant S", run: runAPIKey, devEnv: true},
		{name: "credential", summary: "credential set --tenant S --name whatsapp|handler_auth --from-file F|- | delete --tenant S --name N [--yes]", run: runCredential, devEnv: true},
		{name: "keys", summary: "keys rotate [--yes] | keys generate", run: runKeys, devEnv: true},
		{name: "dead-letters", summary: "dead-letters list|replay|skip", run: runDeadLetters, devEnv: true},
		{name: "purge", summary: "purge --tenant S [--before T] [--all] [--yes]: erase a tenant's content", run: runPurge, devEnv: true},
		{name: "n8n", summary: "n8n templates --tenant S: ordo's n8n workflows with the tenant's URLs filled in", run: runN8N},
		{name: "healthcheck", summary: "exit 0 if the local server's /readyz answers 200 (for the container's healthcheck)", run: runHealthcheck},
		{name: "version", summary: "print the build (module version, commit, Go version) as JSON", run: runVersion},
		{name: "testenv", summary: "run a command against a throwaway Postgres (make test)", run: runTestEnv, hidden: true},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, cli.ReadEnv(), os.Args[1:]))
}

func run(ctx context.Context, env *cli.Env, args []string) int {
	if len(args) == 0 {
		usage(env.Stderr)
		return 2
	}
	if isHelp(args[0]) {
		usage(env.Stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		rest := args[1:]
		name := c.name
		if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
			name += " " + rest[0] // errors name the full subcommand
		}
		if slices.ContainsFunc(rest, isHelp) {
			return commandHelp(ctx, env, c, name, rest)
		}
		if c.devEnv {
			if _, err := env.UseDevEnv(); err != nil {
				fmt.Fprintf(env.Stderr, "ordo %s: %v\n", name, err)
				return 1
			}
		}
		err := c.run(ctx, env, rest)
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if err != nil {
			fmt.Fprintf(env.Stderr, "ordo %s: %v\n", name, err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(env.Stderr, "ordo: unknown command %q\n\n", args[0])
	usage(env.Stderr)
	return 2
}

func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}

// commandHelp answers `ordo <command> [sub] --help` without a database:
// the command's summary, then its flags when it has a flag set (the command
// is run with a database URL that cannot be reached, and stops at -h).
func commandHelp(ctx context.Context, env *cli.Env, c command, name string, args []string) int {
	fmt.Fprintf(env.Stdout, "usage: ordo %s\n  %s\n\n", name, c.summary)
	h := *env
	h.DatabaseURL = "postgres://help.invalid/ordo" // never reached: flag parsing stops first
	h.Stdout = io.Discard
	h.Stderr = env.Stdout
	if c.name != "serve" && c.name != "dev" && c.name != "testenv" {
		h.Stderr = &onlyFlags{w: env.Stdout}
	}
	_ = c.run(ctx, &h, args)
	fmt.Fprintln(env.Stdout)
	environment(env.Stdout)
	return 0
}

// onlyFlags passes on a flag set's usage and drops anything else a command
// writes when asked for help.
type onlyFlags struct{ w io.Writer }

func (o *onlyFlags) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("Usage of")) || bytes.HasPrefix(p, []byte("  -")) || bytes.HasPrefix(p, []byte("    \t")) {
		return o.w.Write(p)
	}
	return len(p), nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ordo <command> [flags]   (ordo <command> --help for its flags)\n\ncommands:")
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintln(w)
	environment(w)
}

// environment lists what ordo reads from the environment (cli.ReadEnv).
func environment(w io.Writer) {
	fmt.Fprint(w, `environment:
  DATABASE_URL           the PostgreSQL URL (serve, migrate and the operator commands)
  ORDO_ADDR              listen address (default :8080; ordo dev: 127.0.0.1:8080)
  ORDO_MASTER_KEYS       credential master keys, comma-separated id:base64-32-bytes, newest first
  ORDO_ADMIN_PASSWORD    the admin page's password (at least 12 characters)
  ORDO_TRUSTED_PROXIES   reverse proxies whose X-Forwarded-For/-Host are believed: addresses or CIDRs, comma-separated
  ORDO_OUTBOUND_DENY     addresses or CIDRs, comma-separated, that handler and events URLs may not reach
                         (besides the built-in refusals: link-local, unspecified, multicast, cloud metadata)
  ORDO_OUTBOUND_ALLOW    addresses or CIDRs, comma-separated, they may reach whatever else refuses them
  ORDO_WHATSAPP_API_URL  the WhatsApp Cloud API (default https://graph.facebook.com/v23.0)
  ORDO_LOG_LEVEL         debug, info, warn or error (default info)
`)
}
