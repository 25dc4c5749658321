package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/engine"
	ordosql "github.com/ordo-dev/ordo/sql"
)

const migrateUsage = "ordo migrate up | down [--yes] | version"

// runMigrate is `ordo migrate up | down [--yes] | version`. An up that
// changed the schema is audited; a down is not (it drops the audit log).
func runMigrate(ctx context.Context, env *cli.Env, args []string) error {
	action, rest, err := subcommand(args, migrateUsage)
	if err != nil {
		return err
	}
	fs := cli.NewFlagSet(env, "ordo migrate "+action)
	var yes *bool
	switch action {
	case "up", "version":
	case "down":
		yes = fs.Bool("yes", false, "drop without asking (needed when not run on a terminal)")
	default:
		return fmt.Errorf("unknown migrate action %q; usage: %s", action, migrateUsage)
	}
	if err := cli.ParseFlags(fs, rest); err != nil {
		return err
	}
	if env.DatabaseURL == "" {
		return errors.New("DATABASE_URL is not set")
	}
	if action == "down" {
		if err := cli.Confirm(env, *yes, "drops every ordo table, River's included, and all their data"); err != nil {
			return err
		}
	}
	from, _, err := ordosql.Version(env.DatabaseURL)
	if err != nil {
		return err
	}
	switch action {
	case "up":
		if err := ordosql.Up(env.DatabaseURL); err != nil {
			return err
		}
	case "down":
		if err := ordosql.Down(env.DatabaseURL); err != nil {
			return err
		}
	}
	v, dirty, err := ordosql.Version(env.DatabaseURL)
	if err != nil {
		return err
	}
	if action == "up" && v != from {
		pool, err := openPool(ctx, env)
		if err != nil {
			return err
		}
		defer pool.Close()
		if err := auditAfter(ctx, env, pool, engine.AuditEntry{Action: "schema.migrate",
			Details: auditDetails(map[string]uint{"from": from, "to": v})}); err != nil {
			return err
		}
	}
	fmt.Fprintf(env.Stdout, "{\"version\":%d,\"dirty\":%t,\"latest\":%d}\n", v, dirty, ordosql.LatestVersion())
	return nil
}
