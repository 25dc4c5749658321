package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/engine"
	ordosql "github.com/ordo-dev/ordo/sql"
)

const migrateUsage = "ordo migrate up [--wait D] | down [--yes] | version"

// runMigrate is `ordo migrate up | down [--yes] | version`. An up that
// changed the schema is audited; a down is not (it drops the audit log).
func runMigrate(ctx context.Context, env *cli.Env, args []string) error {
	action, rest, err := subcommand(args, migrateUsage)
	if err != nil {
		return err
	}
	fs := cli.NewFlagSet(env, "ordo migrate "+action)
	var yes *bool
	wait := new(time.Duration)
	switch action {
	case "up":
		wait = fs.Duration("wait", 0, "keep trying this long for the database to answer (a container started beside Postgres); 0 tries once")
	case "version":
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
	for deadline := time.Now().Add(*wait); err != nil && time.Now().Before(deadline); {
		fmt.Fprintf(env.Stderr, "ordo migrate: the database does not answer yet, retrying (--wait %s)\n", *wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
		from, _, err = ordosql.Version(env.DatabaseURL)
	}
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
	oldest, err := ordosql.Serves(ctx, env.DatabaseURL)
	if err != nil {
		return err
	}
	// oldest_served: the oldest build (by its newest migration) that may
	// run on this schema, for a deploy or a rollback to check first.
	fmt.Fprintf(env.Stdout, "{\"version\":%d,\"dirty\":%t,\"latest\":%d,\"oldest_served\":%d,\"serves_this_build\":%t}\n",
		v, dirty, ordosql.LatestVersion(), oldest, ordosql.ServesBuild(v, dirty, oldest))
	return nil
}
