package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs/outage"
	ordosql "github.com/ordo-dev/ordo/sql"
)

// AttemptTimeout bounds one look for the database at start: a host that
// drops packets counts as away after this long, not after the kernel's
// connect timeout.
const AttemptTimeout = 5 * time.Second

// waitForDatabase returns once the database answers and is migrated. A
// database that is away — refused, unresolvable, silent, starting up, out
// of connections: a server started before its database, at a reboot or
// under compose — is waited for as a state of db, the process's watch of
// Postgres: its line when it goes and when it is back, the watch's capped,
// jittered backoff between looks. Anything else (a wrong password, no such
// database, a schema not migrated) is an error at once: waiting would not
// mend it. ctx ending (SIGTERM) ends the wait at once with ctx's error.
func waitForDatabase(ctx context.Context, pool *pgxpool.Pool, db *outage.Watch) error {
	for {
		err := look(ctx, pool)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		away := func(err error) bool { return startupAway(ctx, err) }
		if !db.Report(err, away) {
			if err != nil {
				return err
			}
			return nil
		}
		if db.Sleep(ctx, 0) != nil {
			return ctx.Err()
		}
	}
}

// look is one look for the database: it answers, and its schema is the
// one this build needs.
func look(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, AttemptTimeout)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("connect to the database: %w", err)
	}
	if err := ordosql.CheckMigrated(ctx, pool); err != nil {
		return err // it says what to do
	}
	return nil
}

// startupAway says whether a failed look means the database is away (wait
// for it) rather than wrong (exit): a server that answered with an error
// of its own is away only when that error says so (shutting down, starting
// up, too many connections); a look that ran out of time while the process
// was not stopping found nobody answering.
func startupAway(ctx context.Context, err error) bool {
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return ordosql.Unavailable(pgErr)
	}
	return ordosql.Unavailable(err)
}
