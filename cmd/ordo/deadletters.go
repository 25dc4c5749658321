package main

import (
	"context"
	"fmt"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/engine"
)

const deadLettersUsage = "ordo dead-letters list [--tenant S] [--conversation C] [--state open|resolved|all] [--limit N] | replay --id N | skip --id N"

// runDeadLetters is `ordo dead-letters list|replay|skip`, the operator's
// side of the dead-letter API (any tenant). Flags are parsed before the
// database is reached, so --help needs none.
func runDeadLetters(ctx context.Context, env *cli.Env, args []string) error {
	action, rest, err := subcommand(args, deadLettersUsage)
	if err != nil {
		return err
	}
	fs := cli.NewFlagSet(env, "ordo dead-letters "+action)
	switch action {
	case "list":
		tenant := fs.String("tenant", "", "only this tenant's (slug)")
		conv := fs.String("conversation", "", "only this conversation")
		state := fs.String("state", "open", "open, resolved or all")
		limit := fs.Int("limit", 100, "at most this many (1..500)")
		after := fs.Int64("after", 0, "only ids greater than this (paging)")
		if err := cli.ParseFlags(fs, rest); err != nil {
			return err
		}
		pool, store, err := openTenantStore(ctx, env)
		if err != nil {
			return err
		}
		defer pool.Close()
		f := engine.DeadLetterFilter{ConversationID: *conv, State: *state, Limit: *limit, After: *after}
		if *tenant != "" {
			t, err := store.BySlug(ctx, *tenant)
			if err != nil {
				return fmt.Errorf("tenant %q: %w", *tenant, err)
			}
			f.TenantID = t.ID
		}
		list, err := engine.New(pool, env.Logger).DeadLetters(ctx, f)
		if err != nil {
			return err
		}
		for _, d := range list {
			if err := cli.PrintJSON(env.Stdout, d); err != nil {
				return err
			}
		}
		return nil
	case "replay", "skip":
		id := fs.String("id", "", "the dead letter's id, as dead-letters list prints it (required)")
		if err := cli.ParseFlags(fs, rest); err != nil {
			return err
		}
		if err := requireFlag("id", *id); err != nil {
			return err
		}
		pool, _, err := openTenantStore(ctx, env)
		if err != nil {
			return err
		}
		defer pool.Close()
		eng := engine.New(pool, env.Logger)
		resolve := eng.Replay
		if action == "skip" {
			resolve = eng.Skip
		}
		d, err := resolve(ctx, 0, *id, actor(env))
		if err != nil {
			return fmt.Errorf("%s dead letter %s: %s", action, *id, engine.ErrorMessage(err))
		}
		return cli.PrintJSON(env.Stdout, d)
	}
	return fmt.Errorf("unknown action %q; usage: %s", action, deadLettersUsage)
}
