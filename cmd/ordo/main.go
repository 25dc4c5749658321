// Command ordo is the product: the server and its operator commands. The
// benchmark (cmd/ordo-bench) and the crash run (cmd/ordo-chaos) are binaries
// of their own, so this one links no Redis client, no fake Cloud API and no
// harness. Only main reads the environment (cli.ReadEnv).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
)

// command is one `ordo <name>` subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *cli.Env, args []string) error
	hidden  bool
}

func commands() []command {
	return []command{
		{name: "dev", summary: "run everything locally on a private Postgres under ./.ordo/", run: runDev},
		{name: "serve", summary: "run the production server (--role all|api|worker); needs DATABASE_URL", run: runServe},
		{name: "migrate", summary: "migrate up|down|version", run: runMigrate},
		{name: "tenant", summary: "tenant create|update|list", run: runTenant},
		{name: "apikey", summary: "apikey create --tenant S | revoke --prefix P | list --tenant S", run: runAPIKey},
		{name: "credential", summary: "credential set --tenant S --name whatsapp --from-file F|-", run: runCredential},
		{name: "keys", summary: "keys rotate | keys generate", run: runKeys},
		{name: "dead-letters", summary: "dead-letters list|replay|skip", run: runDeadLetters},
		{name: "purge", summary: "purge --tenant S [--before T] [--all]: erase a tenant's content", run: runPurge},
		{name: "testenv", summary: "run a command against a throwaway Postgres (make test)", run: runTestEnv, hidden: true},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, cli.ReadEnv(), os.Args[1:]))
}

func run(ctx context.Context, env *cli.Env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.Stderr)
		return 2
	}
	for _, c := range commands() {
		if c.name == args[0] {
			if err := c.run(ctx, env, args[1:]); err != nil {
				fmt.Fprintf(env.Stderr, "ordo %s: %v\n", c.name, err)
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(env.Stderr, "ordo: unknown command %q\n\n", args[0])
	usage(env.Stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ordo <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
		}
	}
}
