package engine

// A write's commit, where a 2xx is decided. With synchronous replication a
// commit is durable only once the standby confirmed it, and Postgres lets
// a commit return success without that confirmation when a query cancel
// is pending during its wait (ordosql.PrepareCommitQuery says which
// cancels and how they are kept out). Every write answered to a user
// commits the same way — webhooks and async replies in writeTx, leases in
// writeRow, REST ingest in enqueueBatch or writeTx (batch.go): on a
// context its request cannot cancel, timeouts off before the commit, the
// commit watched for the WARNING of an abandoned wait, which is answered
// 503 (CodeUnavailable, Retry-After), never 2xx. engine/README.md, "A
// write's commit", has the why.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	ordosql "github.com/ordo-dev/ordo/sql"
)

// WriteTimeout bounds a user's write, its commit included, in place of
// the request's context, which cannot end it (writeTx): with its lock
// waits cut to none at commit (PrepareCommitQuery) and a synchronous
// standby that does not answer, the commit would otherwise wait for ever.
// Past it pgx cancels the statement and closes the connection, and the
// write is answered 503; a commit cancelled so may be on the primary
// alone, and a retry finds it a duplicate whose answer waits for the
// standby. The batch's bound is batchTimeout, the same.
const WriteTimeout = 30 * time.Second

// errUnconfirmed answers a write whose commit returned without its
// synchronous standby's confirmation: it may be committed on the primary
// only, and a failover would lose it. A retry finds it a duplicate, whose
// answer waits for the standby (ordo.enqueue_message).
var errUnconfirmed = &Error{Code: CodeUnavailable, Message: "the database could not confirm the write is replicated; retry later"}

// writeTx runs fn in one transaction on a connection of its own, lock
// waits bounded by LockTimeout, and commits it durably: nil means the
// commit returned with no sign of a skipped synchronous wait.
func (e *Engine) writeTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	// Not the request's context: pgx answers a context's end mid-query
	// with a CancelRequest, which would end the commit's wait for the
	// standby and make its rows visible on the primary alone. A client
	// that hangs up is not waited for (ingest) or gone: the write goes on
	// to its end or WriteTimeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), WriteTimeout)
	defer cancel()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var watch *ordosql.CommitWatch
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockTimeoutQuery, lockTimeoutSetting); err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, ordosql.PrepareCommitQuery); err != nil {
			return err
		}
		watch = ordosql.WatchCommit(conn.Conn().PgConn())
		return nil // BeginFunc commits
	})
	return e.checkCommit(ctx, watch, err)
}

// checkCommit disarms watch and turns a commit that returned with a
// WARNING into errUnconfirmed (logged: an operator wants to know that a
// cancel reached a commit). err is the commit's own result.
func (e *Engine) checkCommit(ctx context.Context, watch *ordosql.CommitWatch, err error) error {
	werr := watch.Done()
	if err != nil || werr == nil {
		return err
	}
	var ce *ordosql.CommitUnconfirmedError
	if errors.As(werr, &ce) {
		e.logger.WarnContext(ctx, "a commit returned without its synchronous standby's confirmation; answered 503",
			slog.String("warning", ce.Notice.Message))
	}
	return &Error{Code: errUnconfirmed.Code, Message: errUnconfirmed.Message, Err: werr}
}

// writeRow runs query, one statement that writes and returns one row, in
// an implicit transaction of its own, committed durably as writeTx's, in
// one round trip (a pipeline); scan reads its row. A scan that finds no
// row (pgx.ErrNoRows: the statement wrote nothing) is returned once the
// transaction ended.
func (e *Engine) writeRow(ctx context.Context, scan func(pgx.Row) error, query string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), WriteTimeout) // as writeTx's
	defer cancel()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	batch := &pgx.Batch{}
	batch.Queue(query, args...)
	queuePrepareCommit(batch)
	br := conn.SendBatch(ctx, batch)
	scanErr := scan(br.QueryRow())
	if scanErr != nil && !errors.Is(scanErr, pgx.ErrNoRows) {
		_ = br.Close()
		return scanErr
	}
	if err := e.commitBatch(ctx, conn, br); err != nil {
		return err
	}
	return scanErr
}

// queuePrepareCommit ends a pipeline's statements with those that keep
// every cancel away from its commit (ordosql.PrepareCommitStatements);
// commitBatch reads them.
func queuePrepareCommit(b *pgx.Batch) {
	for _, q := range ordosql.PrepareCommitStatements {
		b.Queue(q)
	}
}

// commitBatch reads the results of queuePrepareCommit's statements from
// br, a pipeline sent on conn whose own results were read, and then its
// Sync — only then is the implicit transaction committed — durably: a
// commit that came back with a WARNING is errUnconfirmed (checkCommit).
func (e *Engine) commitBatch(ctx context.Context, conn *pgxpool.Conn, br pgx.BatchResults) error {
	for range ordosql.PrepareCommitStatements {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return err
		}
	}
	watch := ordosql.WatchCommit(conn.Conn().PgConn())
	return e.checkCommit(ctx, watch, br.Close())
}
