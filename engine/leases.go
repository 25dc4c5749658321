package engine

// Leases: a lock a tenant's flows take around work that must not run twice
// at once (the n8n Redis template's SET NX EX "Already executing"), in
// Postgres, with a fencing token. A lease is one row per (tenant, key) that
// is never deleted: acquiring a free or expired key bumps its token, so
// tokens only grow, across releases and expiries, and a holder that lost its
// lease (expired, released, taken over) holds a token that every later
// renew, release and check refuses.
//
// Each operation is one statement on one row, with no other lock held: a
// lease row is outside the engine's lock order (sql/LOCKING.md), and two
// acquirers of one key queue on its row for a statement's length.
// Expiry is judged by the database's clock (clock_timestamp()), never a
// worker's.

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// The bounds of a lease's ttl_ms. A lease shorter than LeaseTTLMin would
// expire before its holder could use it; one longer than LeaseTTLMax
// outlives any sensible flow and blocks its key for a day if the holder
// dies.
const (
	LeaseTTLMin = 100 * time.Millisecond
	LeaseTTLMax = 24 * time.Hour
)

// Lease is a held lease: its key, the holder's fencing token and until when
// it holds.
type Lease struct {
	Key       string    `json:"key"`
	Token     int64     `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// LeaseCheck is the answer to "does this token hold the lease now?".
type LeaseCheck struct {
	Key   string `json:"key"`
	Token int64  `json:"token"`
	// Valid: Token is the key's newest token and has not expired.
	Valid bool `json:"valid"`
	// ExpiresAt is when Token stops holding, when Valid.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

const (
	// acquireLeaseQuery takes key for ttl $3 (milliseconds) unless an
	// unexpired token holds it. ON CONFLICT … WHERE reads the row's newest
	// version under its row lock, so of two acquirers of a just-expired key
	// exactly one gets it.
	acquireLeaseQuery = `
INSERT INTO ordo.leases AS l (tenant_id, key, token, expires_at)
VALUES ($1, $2, 1, clock_timestamp() + $3::float8 * interval '1 millisecond')
ON CONFLICT (tenant_id, key) DO UPDATE
    SET token = l.token + 1, expires_at = clock_timestamp() + $3::float8 * interval '1 millisecond'
    WHERE l.expires_at <= clock_timestamp()
RETURNING l.token, l.expires_at`

	// renewLeaseQuery extends an unexpired lease held by token $3.
	renewLeaseQuery = `
UPDATE ordo.leases l SET expires_at = clock_timestamp() + $4::float8 * interval '1 millisecond'
WHERE l.tenant_id = $1 AND l.key = $2 AND l.token = $3 AND l.expires_at > clock_timestamp()
RETURNING l.token, l.expires_at`

	// releaseLeaseQuery ends the lease of token $3 now, if it is the key's
	// newest token (expired or not: a repeated release is answered the same).
	releaseLeaseQuery = `
UPDATE ordo.leases l SET expires_at = least(l.expires_at, clock_timestamp())
WHERE l.tenant_id = $1 AND l.key = $2 AND l.token = $3
RETURNING l.token, l.expires_at`

	// checkLeaseQuery reads the key's newest token and whether it holds.
	checkLeaseQuery = `
SELECT l.token, l.expires_at, l.expires_at > clock_timestamp()
FROM ordo.leases l WHERE l.tenant_id = $1 AND l.key = $2`
)

// errLeaseHeld answers an acquire of a key another token holds.
var errLeaseHeld = &Error{Code: CodeConflict, Message: "lease: held by another token until it expires or is released"}

// errLeaseLost answers a renew or release with a token that does not hold
// the lease (expired, released, or a newer token was issued).
var errLeaseLost = &Error{Code: CodeConflict, Message: "token: does not hold this lease (expired, released or taken over); acquire it again"}

// AcquireLease takes the tenant's lease on key for ttl and returns the new,
// greater token; CodeConflict while another token holds it.
func (e *Engine) AcquireLease(ctx context.Context, tenantID int64, key string, ttl time.Duration) (Lease, error) {
	l := Lease{Key: key}
	err := e.writeRow(ctx, func(r pgx.Row) error { return r.Scan(&l.Token, &l.ExpiresAt) }, acquireLeaseQuery, tenantID, key, float64(ttl.Milliseconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, errLeaseHeld
	}
	if err != nil {
		return Lease{}, translate(err, "acquire lease")
	}
	return l, nil
}

// RenewLease extends token's lease on key to ttl from now; CodeConflict
// when token no longer holds it.
func (e *Engine) RenewLease(ctx context.Context, tenantID int64, key string, token int64, ttl time.Duration) (Lease, error) {
	l := Lease{Key: key}
	err := e.writeRow(ctx, func(r pgx.Row) error { return r.Scan(&l.Token, &l.ExpiresAt) }, renewLeaseQuery, tenantID, key, token, float64(ttl.Milliseconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, errLeaseLost
	}
	if err != nil {
		return Lease{}, translate(err, "renew lease")
	}
	return l, nil
}

// ReleaseLease ends token's lease on key now, so the next acquire need not
// wait for its expiry; CodeConflict when a newer token was issued since.
func (e *Engine) ReleaseLease(ctx context.Context, tenantID int64, key string, token int64) (Lease, error) {
	l := Lease{Key: key}
	err := e.writeRow(ctx, func(r pgx.Row) error { return r.Scan(&l.Token, &l.ExpiresAt) }, releaseLeaseQuery, tenantID, key, token)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, errLeaseLost
	}
	if err != nil {
		return Lease{}, translate(err, "release lease")
	}
	return l, nil
}

// CheckLease reports whether token holds the lease on key now.
func (e *Engine) CheckLease(ctx context.Context, tenantID int64, key string, token int64) (LeaseCheck, error) {
	c := LeaseCheck{Key: key, Token: token}
	var (
		newest  int64
		expires time.Time
		holds   bool
	)
	err := e.pool.QueryRow(ctx, checkLeaseQuery, tenantID, key).Scan(&newest, &expires, &holds)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, nil
	}
	if err != nil {
		return LeaseCheck{}, translate(err, "check lease")
	}
	if newest == token && holds {
		c.Valid, c.ExpiresAt = true, &expires
	}
	return c, nil
}
