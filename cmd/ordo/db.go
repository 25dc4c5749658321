package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/tenants"
)

// openPool connects to DATABASE_URL and checks the database answers, so a
// command fails on a bad URL before it does any work.
func openPool(ctx context.Context, env *cli.Env) (*pgxpool.Pool, error) {
	if env.DatabaseURL == "" {
		return nil, errors.New("DATABASE_URL is not set (against `make dev`, run the command from the directory holding .ordo/, whose env file gives it)")
	}
	cfg, err := pgxpool.ParseConfig(env.DatabaseURL)
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

// openStores opens the database and the credential vault and returns the
// tenant store on them. It needs DATABASE_URL and ORDO_MASTER_KEYS; the
// caller closes the pool.
func openStores(ctx context.Context, env *cli.Env) (*pgxpool.Pool, *tenants.Store, *tenants.Vault, error) {
	// Check the keys before connecting, so their error is not hidden behind
	// a connection one.
	keys, err := cli.MasterKeys(env)
	if err != nil {
		return nil, nil, nil, err
	}
	outbound, err := cli.Outbound(env)
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
	return pool, tenants.NewStore(pool, vault).WithOutbound(outbound), vault, nil
}

// openTenantStore opens the database and a tenant store without a vault, for
// the commands that never touch credentials and so need no ORDO_MASTER_KEYS.
func openTenantStore(ctx context.Context, env *cli.Env) (*pgxpool.Pool, *tenants.Store, error) {
	outbound, err := cli.Outbound(env)
	if err != nil {
		return nil, nil, err
	}
	pool, err := openPool(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	return pool, tenants.NewStore(pool, nil).WithOutbound(outbound), nil
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
