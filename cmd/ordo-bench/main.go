// Command ordo-bench is the benchmark (make bench): ordo beside River alone,
// River with a Redis lock and the bare SQL floor, on one durable Postgres.
// It is its own binary so that the product links none of it; package bench
// holds the harness.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ordo-dev/ordo/cmd/internal/bench"
	"github.com/ordo-dev/ordo/cmd/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := bench.Main(ctx, cli.ReadEnv(), os.Args[1:])
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "ordo-bench: %v\n", err)
		os.Exit(1)
	}
}
