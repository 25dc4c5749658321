package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/engine"
)

// runPurge is `ordo purge`, a tenant's right-to-erasure request.
func runPurge(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo purge")
	tenant := fs.String("tenant", "", "the tenant whose content is erased (required)")
	before := fs.String("before", "", "erase what was accepted before this time, RFC 3339 (default now)")
	all := fs.Bool("all", false, "also delete the dedupe records, open dead letters and work in flight of every "+
		"conversation with nothing accepted since --before, and those conversations: a repeat of an erased "+
		"message_id is then accepted as new. Without it the dedupe records stay, and unfinished messages and "+
		"open dead letters are kept and counted")
	yes := fs.Bool("yes", false, "erase without asking (needed when not run on a terminal)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := requireFlag("tenant", *tenant); err != nil {
		return err
	}
	cutoff := time.Now()
	if *before != "" {
		t, err := time.Parse(time.RFC3339, *before)
		if err != nil {
			return fmt.Errorf("--before: want an RFC 3339 time such as 2026-01-02T15:04:05Z: %w", err)
		}
		cutoff = t
	}
	what := fmt.Sprintf("erases tenant %q's message content accepted before %s", *tenant, cutoff.Format(time.RFC3339))
	if *all {
		what += ", and deletes those conversations with their dedupe records and open dead letters"
	}
	if err := cli.Confirm(env, *yes, what); err != nil {
		return err
	}
	pool, _, err := openTenantStore(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	out, err := engine.New(pool, env.Logger).Purge(ctx, *tenant, cutoff, *all)
	if engine.ErrorCode(err) == engine.CodeNotFound {
		return fmt.Errorf("purge tenant %q: %s", *tenant, engine.ErrorMessage(err))
	}
	// A purge that stopped half way has erased something: audited too.
	details := map[string]any{"result": out}
	if err != nil {
		details["error"] = engine.ErrorMessage(err)
	}
	if aerr := auditAfter(ctx, env, pool, engine.AuditEntry{Action: "tenant.purge", Tenant: *tenant, Details: auditDetails(details)}); aerr != nil && err == nil {
		err = aerr
	}
	if err != nil {
		return fmt.Errorf("purge tenant %q: %s", *tenant, engine.ErrorMessage(err))
	}
	if out.KeptUnfinished > 0 || out.KeptOpenDeadLetters > 0 {
		fmt.Fprintf(env.Stderr, "ordo purge: kept the content of %d unfinished messages and %d with an open dead letter; "+
			"finish, replay or skip them and purge again, or use --all\n", out.KeptUnfinished, out.KeptOpenDeadLetters)
	}
	return cli.PrintJSON(env.Stdout, out)
}
