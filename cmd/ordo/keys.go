package main

import (
	"context"
	"fmt"

	"github.com/ordo-dev/ordo/tenants"
)

const keysUsage = "ordo keys rotate | keys generate"

// runKeys is `ordo keys rotate|generate`.
func runKeys(ctx context.Context, env *environment, args []string) error {
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
func keysRotate(ctx context.Context, env *environment, args []string) error {
	if err := parseFlags(newFlagSet(env, "keys rotate"), args); err != nil {
		return err
	}
	pool, _, vault, err := openStores(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := vault.Rotate(ctx)
	if err != nil {
		return fmt.Errorf("%w (%d credentials re-wrapped before it stopped)", err, n)
	}
	return printJSON(env.stdout, struct {
		Rotated int    `json:"rotated"`
		KeyID   string `json:"key_id"`
	}{n, vault.KeyID()})
}

// keysGenerate prints a new master key as an ORDO_MASTER_KEYS entry; the
// how-to goes to stderr so stdout can be captured as is.
func keysGenerate(env *environment, args []string) error {
	if err := parseFlags(newFlagSet(env, "keys generate"), args); err != nil {
		return err
	}
	k, err := tenants.GenerateMasterKey()
	if err != nil {
		return err
	}
	fmt.Fprintln(env.stdout, k.Format())
	fmt.Fprintf(env.stderr, "put it first in ORDO_MASTER_KEYS (newest first, comma-separated), restart ordo, then run `ordo keys rotate`\n")
	return nil
}
