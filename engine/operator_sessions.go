package engine

// Console sessions: a random token in the operator's cookie, its SHA-256 in
// ordo.operator_sessions (a copy of the table logs nobody in), so a session
// works on every ordo process and survives a restart. A session ends at
// logout, after SessionIdle without a request, after SessionMax in all, or
// when its operator is removed.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Session lifetimes.
const (
	// SessionIdleDefault ends a session no request used for this long.
	SessionIdleDefault = 30 * time.Minute
	// SessionMaxDefault ends any session this long after its login.
	SessionMaxDefault = 12 * time.Hour
	// sessionTouchEvery: last_seen_at is written at most this often (or a
	// quarter of the idle time, if shorter), so a page's refreshes do not
	// write on every request.
	sessionTouchEvery = time.Minute
)

// Session is a logged-in operator.
type Session struct {
	// Operator is the name ("admin" for the break-glass account).
	Operator string `json:"operator"`
	Role     string `json:"role"`
	// BreakGlass: logged in with ORDO_ADMIN_PASSWORD.
	BreakGlass bool      `json:"break_glass"`
	ExpiresAt  time.Time `json:"expires_at"`
}

func hashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// StartSession logs an operator in (operatorID 0: the break-glass admin) and
// returns the cookie's token.
func (e *Engine) StartSession(ctx context.Context, operatorID int64, max time.Duration) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	var id *int64
	if operatorID != 0 {
		id = &operatorID
	}
	// Expired sessions go on the way in: logins are rare, the delete cheap.
	_, err := e.pool.Exec(ctx, `
WITH gone AS (DELETE FROM ordo.operator_sessions WHERE expires_at < now() OR last_seen_at < now() - interval '1 day')
INSERT INTO ordo.operator_sessions (token_hash, operator_id, expires_at)
VALUES ($1, $2, now() + make_interval(secs => $3::double precision))`, hashToken(token), id, max.Seconds())
	if err != nil {
		return "", translate(err, "start session")
	}
	return token, nil
}

// ErrNoSession is a missing, unknown, idle or expired session.
var ErrNoSession = Errorf(CodeUnauthorized, "log in first (your session ended or never began)")

// SessionOf returns the token's session, refreshing its idle clock.
func (e *Engine) SessionOf(ctx context.Context, token string, idle time.Duration) (Session, error) {
	if token == "" || len(token) > 128 {
		return Session{}, ErrNoSession
	}
	var (
		s        Session
		lastSeen time.Time
		now      time.Time
		name     *string
		role     *string
	)
	err := e.pool.QueryRow(ctx, `
SELECT o.name, o.role, s.operator_id IS NULL, s.expires_at, s.last_seen_at, now()
FROM ordo.operator_sessions s LEFT JOIN ordo.operators o ON o.id = s.operator_id
WHERE s.token_hash = $1 AND s.expires_at > now() AND s.last_seen_at > now() - make_interval(secs => $2::double precision)`,
		hashToken(token), idle.Seconds()).Scan(&name, &role, &s.BreakGlass, &s.ExpiresAt, &lastSeen, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNoSession
	}
	if err != nil {
		return Session{}, translate(err, "read session")
	}
	s.Operator, s.Role = BreakGlassOperator, RoleAdmin
	if !s.BreakGlass {
		s.Operator, s.Role = *name, *role
	}
	if now.Sub(lastSeen) >= min(sessionTouchEvery, idle/4) {
		if _, err := e.pool.Exec(ctx, `UPDATE ordo.operator_sessions SET last_seen_at = now() WHERE token_hash = $1`, hashToken(token)); err != nil {
			return Session{}, translate(err, "touch session")
		}
	}
	return s, nil
}

// EndSession logs the token's session out.
func (e *Engine) EndSession(ctx context.Context, token string) error {
	if _, err := e.pool.Exec(ctx, `DELETE FROM ordo.operator_sessions WHERE token_hash = $1`, hashToken(token)); err != nil {
		return translate(err, "end session")
	}
	return nil
}
