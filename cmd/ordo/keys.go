package main

import (
	"context"
	"fmt"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/tenants"
)

const keysUsage = "ordo keys rotate | keys generate"

// runKeys is `ordo keys rotate|generate`.
func runKeys(ctx context.Context, env *cli.Env, args []string) error {
	action, rest, err := subcommand(args, keysUsage)
	if err != nil {
		return err
	}
	switch action {
	case "rotate":
		return keysRotate(ctx, env, rest)
	case "generate":
		return keysGenerate(env, rest)
	default:
		return fmt.Errorf("unknown keys action %q; usage: %s", action, keysUsage)
	}
}

// keysRotate re-wraps every credential under the newest key of
// ORDO_MASTER_KEYS. It is safe while servers run; once it reports, older
// keys can be dropped from ORDO_MASTER_KEYS.
func keysRotate(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo keys rotate")
	yes := fs.Bool("yes", false, "rotate without asking (needed when not run on a terminal)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := cli.Confirm(env, *yes, "re-encrypts every credential under the newest key of ORDO_MASTER_KEYS "+
		"(servers without that key can then no longer read them)"); err != nil {
		return err
	}
	pool, _, vault, err := openStores(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := vault.Rotate(ctx)
	details := map[string]any{"rotated": n, "key_id": vault.KeyID()}
	if err != nil {
		details["error"] = "stopped before the end"
	}
	if aerr := auditAfter(ctx, env, pool, engine.AuditEntry{Action: "keys.rotate", Details: auditDetails(details)}); aerr != nil && err == nil {
		return aerr
	}
	if err != nil {
		return fmt.Errorf("%w (%d credentials re-wrapped before it stopped)", err, n)
	}
	return cli.PrintJSON(env.Stdout, struct {
		Rotated int    `json:"rotated"`
		KeyID   string `json:"key_id"`
	}{n, vault.KeyID()})
}

// keysGenerate prints a new master key as an ORDO_MASTER_KEYS entry; the
// how-to goes to stderr so stdout can be captured as is.
func keysGenerate(env *cli.Env, args []string) error {
	if err := cli.ParseFlags(cli.NewFlagSet(env, "ordo keys generate"), args); err != nil {
		return err
	}
	k, err := tenants.GenerateMasterKey()
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, k.Format())
	fmt.Fprintf(env.Stderr, "put it first in ORDO_MASTER_KEYS (newest first, comma-separated), restart ordo, then run `ordo keys rotate`\n")
	return nil
}
