package sql

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err means the database cannot be reached or
// is not taking work now (a refused or dropped connection, a server
// shutting down or starting up, no connection slot left) rather than that
// the statement failed: a state every loop waits out, not a failure of
// what it was doing.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgerrcode.IsConnectionException(pgErr.Code) ||
			pgErr.Code == pgerrcode.AdminShutdown || pgErr.Code == pgerrcode.CrashShutdown ||
			pgErr.Code == pgerrcode.CannotConnectNow || pgErr.Code == pgerrcode.TooManyConnections
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the caller's time ran out, whatever the database's state
	}
	var netErr net.Error
	switch {
	case errors.As(err, &netErr):
		return true
	case errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	// pgconn reports a connection that went while in use by its status.
	return strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "unexpected EOF")
}

// SchemaChanged reports whether err means the database's schema is not the
// one this build's statements were written for: a column, table or
// function they name is gone, or a type changed — a migration of a newer
// build that no longer serves this one (OldestServed), or a break nobody
// declared — or CheckMigrated's ErrNotServed. Not a failure of what the
// statement did: the process waits to be replaced (a deploy under way),
// quietly.
func SchemaChanged(err error) bool {
	if errors.Is(err, ErrNotServed) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case pgerrcode.UndefinedColumn, pgerrcode.UndefinedTable, pgerrcode.UndefinedFunction, pgerrcode.DatatypeMismatch:
		return true
	}
	return false
}
