package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/tenants"
)

// openPool connects to DATABASE_URL and checks the database answers, so a
// command fails on a bad URL before it does any work.
func openPool(ctx context.Context, env *environment) (*pgxpool.Pool, error) {
	if env.databaseURL == "" {
		return nil, errors.New("DATABASE_URL is not set")
	}
	cfg, err := pgxpool.ParseConfig(env.databaseURL)
	if err != nil {
		// pgx's message can quote the URL, password included.
		return nil, errors.New("parse DATABASE_URL: not a valid PostgreSQL URL")
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}

// masterKeys parses ORDO_MASTER_KEYS.
func masterKeys(env *environment) ([]tenants.MasterKey, error) {
	if env.masterKeys == "" {
		return nil, errors.New("ORDO_MASTER_KEYS is not set: create a key with `ordo keys generate` and set ORDO_MASTER_KEYS=<id:base64>")
	}
	keys, err := tenants.ParseMasterKeys(env.masterKeys)
	if err != nil {
		return nil, fmt.Errorf("ORDO_MASTER_KEYS: %w", err)
	}
	return keys, nil
}

// openStores opens the database and the credential vault and returns the
// tenant store on them. It needs DATABASE_URL and ORDO_MASTER_KEYS; the
// caller closes the pool.
func openStores(ctx context.Context, env *environment) (*pgxpool.Pool, *tenants.Store, *tenants.Vault, error) {
	// Check the keys before connecting, so their error is not hidden behind
	// a connection one.
	keys, err := masterKeys(env)
	if err != nil {
		return nil, nil, nil, err
	}
	pool, err := openPool(ctx, env)
	if err != nil {
		return nil, nil, nil, err
	}
	vault, err := tenants.NewVault(pool, keys)
	if err != nil {
		pool.Close()
		return nil, nil, nil, fmt.Errorf("ORDO_MASTER_KEYS: %w", err)
	}
	return pool, tenants.NewStore(pool, vault), vault, nil
}

// openTenantStore opens the database and a tenant store without a vault, for
// the commands that never touch credentials and so need no ORDO_MASTER_KEYS.
func openTenantStore(ctx context.Context, env *environment) (*pgxpool.Pool, *tenants.Store, error) {
	pool, err := openPool(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	return pool, tenants.NewStore(pool, nil), nil
}

// newFlagSet returns a subcommand's flag set, writing its usage to stderr.
func newFlagSet(env *environment, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("ordo "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	return fs
}

// parseFlags parses args and refuses stray positional arguments, which are
// usually a forgotten "--".
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// requireFlag fails with the flag's name when a required flag is empty.
func requireFlag(name, value string) error {
	if value == "" {
		return fmt.Errorf("--%s is required", name)
	}
	return nil
}

// subcommand splits "create --slug x" into the action and its flags.
func subcommand(args []string, usage string) (string, []string, error) {
	if len(args) == 0 || args[0] == "" || args[0][0] == '-' {
		return "", nil, errors.New("usage: " + usage)
	}
	return args[0], args[1:], nil
}

// printJSON writes v as one JSON line, the output format of every operator command.
func printJSON(w io.Writer, v any) error {
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
