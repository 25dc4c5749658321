package engine

// Operators of the admin console: a name, a role and an argon2id password
// hash. A viewer reads; an operator also replays, skips, pauses and
// resumes; an admin also onboards tenants and changes their settings,
// credentials and keys. The break-glass account "admin" is not a row: it is
// ORDO_ADMIN_PASSWORD, checked by the web layer.

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/crypto/argon2"
)

// Roles, weakest first.
const (
	RoleViewer   = "viewer"
	RoleOperator = "operator"
	RoleAdmin    = "admin"
)

// BreakGlassOperator is the name of the ORDO_ADMIN_PASSWORD account.
const BreakGlassOperator = "admin"

// OperatorPasswordMinLength is the shortest operator password accepted.
const OperatorPasswordMinLength = 12

var roleRank = map[string]int{RoleViewer: 1, RoleOperator: 2, RoleAdmin: 3}

// RoleAtLeast says whether role may do what want allows.
func RoleAtLeast(role, want string) bool {
	return roleRank[role] >= roleRank[want] && roleRank[want] > 0
}

var operatorName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// Operator is an operator as listed: never the hash.
type Operator struct {
	ID        int64     `json:"-"`
	Name      string    `json:"name"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"created_at"`
}

// The KDF's cost: argon2id as RFC 9106's second recommended option (64 MiB,
// 3 passes, 4 lanes) would take 64 MiB per login on a shared box; 19 MiB
// and 2 passes is OWASP's minimum for argon2id, ~30 ms here.
const (
	argonTime    = 2
	argonMemory  = 19 * 1024
	argonThreads = 1
	argonKeyLen  = 32
)

// HashPassword returns password's argon2id hash in PHC string form.
func HashPassword(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("salt: %w", err)
	}
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// checkPassword compares password with a PHC argon2id hash, with the
// hash's own parameters (so a raised cost keeps old hashes valid).
func checkPassword(hash, password string) bool {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m == 0 || t == 0 || p == 0 || m > 1<<20 {
		return false
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[4])
	want, err2 := base64.RawStdEncoding.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(want) == 0 {
		return false
	}
	got := argon2.IDKey([]byte(password), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

// dummyHash is checked against when no operator has the name, so a login
// takes as long for an unknown name as for a wrong password.
var dummyHash, _ = HashPassword("no such operator")

// GeneratePassword returns a random one-time password (24 characters).
func GeneratePassword() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// CheckOperator validates a new operator's name, role and password.
func CheckOperator(name, role, password string) error {
	switch {
	case name == BreakGlassOperator:
		return Errorf(CodeInvalid, "name: %q is the break-glass account (ORDO_ADMIN_PASSWORD); pick another", name)
	case !operatorName.MatchString(name):
		return Errorf(CodeInvalid, "name: must be 1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit")
	case roleRank[role] == 0:
		return Errorf(CodeInvalid, "role: must be viewer, operator or admin")
	case utf8.RuneCountInString(password) < OperatorPasswordMinLength:
		return Errorf(CodeInvalid, "password: must have at least %d characters", OperatorPasswordMinLength)
	case len(password) > 1024:
		return Errorf(CodeInvalid, "password: must be at most 1024 bytes")
	}
	return nil
}

// AddOperator creates an operator; audited by actor in the same transaction.
func (e *Engine) AddOperator(ctx context.Context, name, role, password, actor string) (Operator, error) {
	if err := CheckOperator(name, role, password); err != nil {
		return Operator{}, err
	}
	hash, err := HashPassword(password)
	if err != nil {
		return Operator{}, err
	}
	var o Operator
	err = e.Tx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO ordo.operators (name, role, password_hash) VALUES ($1, $2, $3) RETURNING id, name, role, created_at`,
			name, role, hash).Scan(&o.ID, &o.Name, &o.Role, &o.CreatedAt)
		if err != nil {
			return err
		}
		return Audit(ctx, tx, AuditEntry{Actor: actor, Action: "operator.add", Details: mustJSON(map[string]string{"name": name, "role": role})})
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation {
		return Operator{}, Errorf(CodeConflict, "operator %q exists", name)
	}
	if err != nil {
		return Operator{}, translate(err, "add operator")
	}
	return o, nil
}

// Operators lists the operators by name.
func (e *Engine) Operators(ctx context.Context) ([]Operator, error) {
	rows, _ := e.pool.Query(ctx, `SELECT id, name, role, created_at FROM ordo.operators ORDER BY name`)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Operator])
	if err != nil {
		return nil, translate(err, "list operators")
	}
	return out, nil
}

// RemoveOperator deletes an operator and, with it, their sessions.
func (e *Engine) RemoveOperator(ctx context.Context, name, actor string) error {
	err := e.Tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM ordo.operators WHERE name = $1`, name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return Errorf(CodeNotFound, "no operator %q", name)
		}
		return Audit(ctx, tx, AuditEntry{Actor: actor, Action: "operator.remove", Details: mustJSON(map[string]string{"name": name})})
	})
	if ErrorCode(err) == CodeNotFound {
		return err
	}
	if err != nil {
		return translate(err, "remove operator")
	}
	return nil
}

// ErrBadLogin is a wrong name or password (which one is not said).
var ErrBadLogin = Errorf(CodeUnauthorized, "wrong name or password")

// CheckOperatorLogin returns the operator whose name and password these are.
func (e *Engine) CheckOperatorLogin(ctx context.Context, name, password string) (Operator, error) {
	var (
		o    Operator
		hash string
	)
	err := e.pool.QueryRow(ctx, `SELECT id, name, role, created_at, password_hash FROM ordo.operators WHERE name = $1`, name).
		Scan(&o.ID, &o.Name, &o.Role, &o.CreatedAt, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		checkPassword(dummyHash, password)
		return Operator{}, ErrBadLogin
	}
	if err != nil {
		return Operator{}, translate(err, "check login")
	}
	if !checkPassword(hash, password) {
		return Operator{}, ErrBadLogin
	}
	return o, nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
