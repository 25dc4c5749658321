package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	ordosql "github.com/ordo-dev/ordo/sql"
)

// runMigrate is `ordo migrate up | down --yes | version`.
func runMigrate(ctx context.Context, env *cli.Env, args []string) error {
	if env.DatabaseURL == "" {
		return errors.New("DATABASE_URL is not set")
	}
	if len(args) == 2 && args[0] == "down" && args[1] == "--yes" {
		args = args[:1]
	} else if len(args) == 1 && args[0] == "down" {
		return errors.New("this drops every ordo table, River's included, and all their data: run `ordo migrate down --yes` to mean it")
	}
	if len(args) != 1 {
		return errors.New("usage: ordo migrate up | down --yes | version")
	}
	switch args[0] {
	case "up":
		if err := ordosql.Up(env.DatabaseURL); err != nil {
			return err
		}
	case "down":
		if err := ordosql.Down(env.DatabaseURL); err != nil {
			return err
		}
	case "version":
	default:
		return fmt.Errorf("unknown migrate action %q (want up, down or version)", args[0])
	}
	v, dirty, err := ordosql.Version(env.DatabaseURL)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "{\"version\":%d,\"dirty\":%t,\"latest\":%d}\n", v, dirty, ordosql.LatestVersion())
	return nil
}
