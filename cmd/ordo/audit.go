package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/engine"
)

// audited runs an operator's command and its audit entry (actor
// "cli:user@host", cli.Env.Actor) in one transaction: the entry exists
// exactly when the change does.
func audited(ctx context.Context, env *cli.Env, pool *pgxpool.Pool, f func(tx pgx.Tx) (engine.AuditEntry, error)) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		a, err := f(tx)
		if err != nil {
			return err
		}
		a.Actor = actor(env)
		return engine.Audit(ctx, tx, a)
	})
}

// auditAfter records a command that ran in transactions of its own (a
// purge, a key rotation, a migration): the entry is written once it is
// done, and says what it did.
func auditAfter(ctx context.Context, env *cli.Env, pool *pgxpool.Pool, a engine.AuditEntry) error {
	a.Actor = actor(env)
	if err := engine.Audit(ctx, pool, a); err != nil {
		return fmt.Errorf("%w (the change itself is done)", err)
	}
	return nil
}

// actor names the operator: cli.Env.Actor, else "cli".
func actor(env *cli.Env) string { return cmp.Or(env.Actor, engine.ActorCLI) }

// auditDetails encodes an entry's details (never a secret).
func auditDetails(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
