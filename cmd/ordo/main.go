// Command ordo is the one binary: the server, its operator commands, the
// benchmark and the chaos run. It is the only place that reads the environment.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// command is one `ordo <name>` subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *environment, args []string) error
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
		{name: "bench", summary: "the benchmark (make bench)", run: runBench},
		{name: "chaos", summary: "the crash and fault run (make chaos)", run: runChaos},
		{name: "testenv", summary: "run a command against a throwaway Postgres (make test)", run: runTestEnv, hidden: true},
	}
}

// environment is what commands may read from the process: the only place
// os.Getenv is called.
type environment struct {
	databaseURL    string
	addr           string
	masterKeys     string
	adminPassword  string
	whatsappAPIURL string
	stdout, stderr io.Writer
	logger         *slog.Logger
}

func readEnvironment() *environment {
	return &environment{
		databaseURL:    os.Getenv("DATABASE_URL"),
		addr:           os.Getenv("ORDO_ADDR"), // empty: :8080 (serve), 127.0.0.1:8080 (dev)
		masterKeys:     os.Getenv("ORDO_MASTER_KEYS"),
		adminPassword:  os.Getenv("ORDO_ADMIN_PASSWORD"),
		whatsappAPIURL: os.Getenv("ORDO_WHATSAPP_API_URL"), // empty: the Cloud API (serve) or the sandbox (dev)
		stdout:         os.Stdout,
		stderr:         os.Stderr,
		logger:         slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()})),
	}
}

func logLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("ORDO_LOG_LEVEL"))); err != nil {
		return slog.LevelInfo
	}
	return l
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, readEnvironment(), os.Args[1:]))
}

func run(ctx context.Context, env *environment, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.stderr)
		return 2
	}
	for _, c := range commands() {
		if c.name == args[0] {
			if err := c.run(ctx, env, args[1:]); err != nil {
				fmt.Fprintf(env.stderr, "ordo %s: %v\n", c.name, err)
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(env.stderr, "ordo: unknown command %q\n\n", args[0])
	usage(env.stderr)
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
