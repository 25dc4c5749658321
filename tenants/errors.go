// Package tenants owns the businesses on the platform: their settings, the API
// keys that reach their data, and the vault that keeps their credentials
// encrypted at rest. It is the store boundary for ordo.tenants, ordo.api_keys
// and ordo.credentials: database errors are translated here into the errors
// below, which the web layer maps to HTTP statuses.
package tenants

import (
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotFound means the tenant, API key or credential asked for does not exist.
var ErrNotFound = errors.New("not found")

// ErrUnauthorized means an API key is malformed, unknown or revoked. The three
// are deliberately not told apart.
var ErrUnauthorized = errors.New("unauthorized")

// ErrUnreadable means a stored credential exists but cannot be opened: it is
// sealed with a master key this process lacks, or it does not decrypt
// (altered, or copied from another tenant or name). Trying again changes
// nothing until an operator fixes the keys or sets the credential again.
var ErrUnreadable = errors.New("credential unreadable")

// ErrExists means a tenant with the same slug already exists.
var ErrExists = errors.New("already exists")

// InvalidError is a caller's input that fails validation; nothing was stored.
// Field names the offending input as the API and command line spell it.
type InvalidError struct {
	// Field is the input's name, e.g. "slug" or "handler_url".
	Field string
	// Problem says what is wrong with it, e.g. "must be an http or https URL".
	Problem string
}

// Error returns "field: problem", the message the API shows to callers.
func (e *InvalidError) Error() string { return e.Field + ": " + e.Problem }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// isUniqueViolation reports whether err is Postgres refusing a duplicate key
// for the named constraint.
func isUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation && pgErr.ConstraintName == constraint
}
