package main

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/engine"
)

// audited runs an operator's command and its audit entry (actor "cli") in
// one transaction: the entry exists exactly when the change does.
func audited(ctx context.Context, pool *pgxpool.Pool, f func(tx pgx.Tx) (engine.AuditEntry, error)) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		a, err := f(tx)
		if err != nil {
			return err
		}
		a.Actor = engine.ActorCLI
		return engine.Audit(ctx, tx, a)
	})
}

// auditDetails encodes an entry's details (never a secret).
func auditDetails(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
