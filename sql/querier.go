package sql

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs SQL: *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn and pgx.Tx all
// satisfy it, so a write can join a caller's transaction (an application's
// own, a webhook delivery's) or run on the pool. It is ordo's one such
// interface; engine and tenants name it as theirs.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
