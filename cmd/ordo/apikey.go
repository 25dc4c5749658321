package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/engine"
)

const apiKeyUsage = "ordo apikey create --tenant S | revoke --prefix P | list --tenant S"

// runAPIKey is `ordo apikey create|revoke|list`.
func runAPIKey(ctx context.Context, env *cli.Env, args []string) error {
	action, rest, err := subcommand(args, apiKeyUsage)
	if err != nil {
		return err
	}
	switch action {
	case "create":
		return apiKeyCreate(ctx, env, rest)
	case "revoke":
		return apiKeyRevoke(ctx, env, rest)
	case "list":
		return apiKeyList(ctx, env, rest)
	default:
		return fmt.Errorf("unknown apikey action %q; usage: %s", action, apiKeyUsage)
	}
}

// apiKeyCreate prints a new key: the only time it is shown.
func apiKeyCreate(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo apikey create")
	slug := fs.String("tenant", "", "the tenant's slug (required)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("tenant", *slug); err != nil {
		return err
	}
	pool, store, err := openTenantStore(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	var key, prefix string
	err = audited(ctx, env, pool, func(tx pgx.Tx) (engine.AuditEntry, error) {
		var err error
		if key, prefix, err = store.CreateAPIKeyTx(ctx, tx, *slug); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "api_key.create", Tenant: *slug, Details: auditDetails(map[string]string{"prefix": prefix})}, nil
	})
	if err != nil {
		return err
	}
	return cli.PrintJSON(env.Stdout, struct {
		Tenant string `json:"tenant"`
		APIKey string `json:"api_key"`
		Prefix string `json:"prefix"`
	}{*slug, key, prefix})
}

func apiKeyRevoke(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo apikey revoke")
	prefix := fs.String("prefix", "", "the key's prefix, the 8 characters after ordo_ (required)")
	yes := fs.Bool("yes", false, "revoke without asking (needed when not run on a terminal)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("prefix", *prefix); err != nil {
		return err
	}
	if err := cli.Confirm(env, *yes, fmt.Sprintf("revokes the API key %s…: whoever uses it gets 401 from now on", *prefix)); err != nil {
		return err
	}
	pool, store, err := openTenantStore(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	err = audited(ctx, env, pool, func(tx pgx.Tx) (engine.AuditEntry, error) {
		slug, err := store.RevokeAPIKeyTx(ctx, tx, *prefix)
		if err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "api_key.revoke", Tenant: slug, Details: auditDetails(map[string]string{"prefix": *prefix})}, nil
	})
	if err != nil {
		return err
	}
	return cli.PrintJSON(env.Stdout, struct {
		Prefix  string `json:"prefix"`
		Revoked bool   `json:"revoked"`
	}{*prefix, true})
}

// apiKeyList prints one JSON line per key, revoked ones included.
func apiKeyList(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo apikey list")
	slug := fs.String("tenant", "", "the tenant's slug (required)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("tenant", *slug); err != nil {
		return err
	}
	pool, store, err := openTenantStore(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	keys, err := store.ListAPIKeys(ctx, *slug)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := cli.PrintJSON(env.Stdout, k); err != nil {
			return err
		}
	}
	return nil
}
