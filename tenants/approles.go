package tenants

// Applications' own database roles (issue 24): an application that
// enqueues through SQL connects as a role of its tenant's, which can call
// ordo.enqueue_my_message (the tenant is the role's, not an argument) and
// read ordo.my_messages, and nothing else; never as the role that owns
// ordo's schema, which reads every tenant's sealed credentials. See
// sql/functions/create_app_role.sql and migrations/000020_app_roles.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// AppRole is a tenant application's login role, with its password: shown
// once, when it is made, and stored nowhere by ordo (the server keeps its
// hash).
type AppRole struct {
	Tenant   string `json:"tenant"`
	Role     string `json:"role"`
	Password string `json:"password"`
}

const createAppRole = `SELECT ordo.create_app_role($1, $2, $3)`

// CreateAppRoleTx creates a login role for slug's applications on q, the
// caller's transaction (a rollback leaves no role). ordo's own database role
// needs CREATEROLE for it.
func (s *Store) CreateAppRoleTx(ctx context.Context, q Querier, slug string) (AppRole, error) {
	if err := validateSlug(slug); err != nil {
		return AppRole{}, err
	}
	suffix := make([]byte, 4)
	secret := make([]byte, 24)
	if _, err := rand.Read(suffix); err != nil {
		return AppRole{}, fmt.Errorf("create app role: %w", err)
	}
	if _, err := rand.Read(secret); err != nil {
		return AppRole{}, fmt.Errorf("create app role: %w", err)
	}
	// Role names are the cluster's, not the database's: the random suffix
	// keeps two tenants' (or two databases') apart; 63 bytes at most.
	base := strings.ReplaceAll(slug, "-", "_")
	if len(base) > 40 {
		base = base[:40]
	}
	r := AppRole{Tenant: slug, Role: "ordo_app_" + base + "_" + hex.EncodeToString(suffix), Password: base64.RawURLEncoding.EncodeToString(secret)}
	if _, err := q.Exec(ctx, createAppRole, slug, r.Role, r.Password); err != nil {
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.NoDataFound:
			return AppRole{}, fmt.Errorf("tenant %q: %w", slug, ErrNotFound)
		case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege:
			return AppRole{}, fmt.Errorf("create app role: ordo's database user may not create roles (it needs CREATEROLE): %w", err)
		}
		return AppRole{}, fmt.Errorf("create app role: %w", err)
	}
	return r, nil
}
