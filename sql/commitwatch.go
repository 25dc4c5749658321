package sql

// A commit that Postgres lets return without its synchronous standby.
//
// With synchronous replication, COMMIT returns once a standby confirmed
// the commit's WAL — unless a query cancel is pending while it waits
// (SyncRepWaitForLSN, src/backend/replication/syncrep.c): then the wait
// is given up, the commit returns success, and all the client gets is a
// WARNING ("canceling wait for synchronous replication due to user
// request"). The transaction is committed on the primary only; a failover
// to the standby loses it. A write that answers its user after its commit
// must therefore (1) let no cancel reach its commit: PrepareCommitQuery,
// and a context no request can end (pgx answers a context that ends
// mid-query by closing the connection, and its close sends a
// CancelRequest first: pgconn's asyncClose), and (2) treat a WARNING
// received during its commit as "not durable" (WatchCommits,
// WatchCommit). See
// engine/README.md, "A write's commit".

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// PrepareCommitQuery runs as a writing transaction's last statements,
// right before its COMMIT (or Sync): it turns off the timeouts that cancel
// a statement from inside the server, so that none can fire during the
// commit's wait for the synchronous standby, and its second statement
// begins with a check for interrupts, which turns a cancel left pending by
// an earlier statement's timeout (a lock granted as lock_timeout fired)
// into an error — the transaction rolls back instead of committing
// without its standby. Lock waits of the commit itself (NOTIFY's lock,
// held by every notifying commit through its own synchronous wait) are
// then bounded by the caller's context, not by lock_timeout.
//
// Two statements in one string: run it with the simple protocol (pgx's
// Exec without arguments does).
var PrepareCommitQuery = strings.Join(PrepareCommitStatements, "; ")

// PrepareCommitStatements is PrepareCommitQuery as separate statements,
// for a pipeline (pgx.Batch), which cannot hold two in one query.
var PrepareCommitStatements = []string{
	`SELECT set_config('lock_timeout', '0', true), set_config('statement_timeout', '0', true)`,
	`SELECT 1`,
}

// ErrCommitUnconfirmed is what CommitWatch.Done returns for a commit that
// returned with a WARNING: Postgres gave up waiting for the synchronous
// standby (or warned of something else mid-commit); the transaction may be
// committed on the primary only.
var ErrCommitUnconfirmed = errors.New("commit returned with a warning: it may not have reached the synchronous standby")

// commitWatchKey is the key of a connection's armed *CommitWatch in
// pgconn.PgConn.CustomData.
const commitWatchKey = "ordo.commit_watch"

// WatchCommits makes the connections cfg opens report WARNINGs to an armed
// CommitWatch, keeping any notice handler cfg has. Every pool whose
// commits are answered to a user (the server's) is configured with it;
// WatchCommit on a connection from a pool without it sees nothing.
func WatchCommits(cfg *pgconn.Config) {
	next := cfg.OnNotice
	cfg.OnNotice = func(c *pgconn.PgConn, n *pgconn.Notice) {
		if w, ok := c.CustomData()[commitWatchKey].(*CommitWatch); ok && n.SeverityUnlocalized == "WARNING" && w.warning == nil {
			w.warning = n
		}
		if next != nil {
			next(c, n)
		}
	}
}

// CommitWatch records the WARNING a commit returns with. Arm it with
// WatchCommit right before the commit, on the connection that commits, and
// call Done once the commit returned: notices are handled by the goroutine
// reading the connection's answers, the one that commits.
type CommitWatch struct {
	conn    *pgconn.PgConn
	warning *pgconn.Notice
}

// WatchCommit arms a CommitWatch on c. Any WARNING counts: the one of an
// abandoned synchronous wait has no SQLSTATE of its own (01000) and its
// text is translated under lc_messages, and no other WARNING is expected
// of a commit; a false alarm costs a 503 and a retry that finds a
// duplicate, a missed one an acknowledged loss.
func WatchCommit(c *pgconn.PgConn) *CommitWatch {
	w := &CommitWatch{conn: c}
	c.CustomData()[commitWatchKey] = w
	return w
}

// Done disarms w and returns ErrCommitUnconfirmed, wrapped with the
// server's message, if a WARNING came while it was armed. Safe on nil.
func (w *CommitWatch) Done() error {
	if w == nil {
		return nil
	}
	delete(w.conn.CustomData(), commitWatchKey)
	if w.warning == nil {
		return nil
	}
	return &CommitUnconfirmedError{Notice: w.warning}
}

// CommitUnconfirmedError is ErrCommitUnconfirmed with the WARNING the
// server sent (for logs).
type CommitUnconfirmedError struct{ Notice *pgconn.Notice }

func (e *CommitUnconfirmedError) Error() string {
	return ErrCommitUnconfirmed.Error() + ": " + e.Notice.Message
}

// Is makes errors.Is(err, ErrCommitUnconfirmed) true.
func (e *CommitUnconfirmedError) Is(target error) bool { return target == ErrCommitUnconfirmed }
