package tenants

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// An API key reads ordo_<prefix>_<secret>: the prefix names the key in
// listings and revocation, the secret makes it unguessable. Only the SHA-256
// of the whole key is stored; the key itself is shown once.
const (
	apiKeyScheme       = "ordo_"
	apiKeyPrefixLen    = 8
	apiKeySecretLen    = 32 // base62: about 190 bits
	apiKeySecretMaxLen = 64
	base62             = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// APIKey is what is known about an issued key once it has been shown.
type APIKey struct {
	// Prefix is the key's public part, the 8 characters after "ordo_".
	Prefix string `json:"prefix"`
	// CreatedAt is when the key was issued.
	CreatedAt time.Time `json:"created_at"`
	// RevokedAt is when the key was revoked; nil while it is valid.
	RevokedAt *time.Time `json:"revoked_at"`
}

const insertAPIKey = `
INSERT INTO ordo.api_keys (tenant_id, prefix, hash) VALUES ($1, $2, $3)`

// createAPIKey issues a key for the tenant, in q's transaction if it has one.
func createAPIKey(ctx context.Context, q Querier, tenantID int64) (key, prefix string, err error) {
	// Prefixes are random, so a collision is astronomically rare; a retry
	// turns it into a non-event rather than an error.
	for attempt := 0; ; attempt++ {
		if prefix, err = randomBase62(apiKeyPrefixLen); err != nil {
			return "", "", fmt.Errorf("generate api key: %w", err)
		}
		secret, err := randomBase62(apiKeySecretLen)
		if err != nil {
			return "", "", fmt.Errorf("generate api key: %w", err)
		}
		key = apiKeyScheme + prefix + "_" + secret
		hash := sha256.Sum256([]byte(key))
		_, err = q.Exec(ctx, insertAPIKey, tenantID, prefix, hash[:])
		if err == nil {
			return key, prefix, nil
		}
		if attempt < 3 && isUniqueViolation(err, "api_keys_prefix_key") {
			continue
		}
		return "", "", fmt.Errorf("insert api key: %w", err)
	}
}

const selectTenantIDBySlug = `SELECT id FROM ordo.tenants WHERE slug = $1`

// CreateAPIKey issues another API key for the tenant with tenantSlug. The key
// is returned once and cannot be read back; prefix identifies it later.
func (s *Store) CreateAPIKey(ctx context.Context, tenantSlug string) (key, prefix string, err error) {
	return s.CreateAPIKeyTx(ctx, s.pool, tenantSlug)
}

// CreateAPIKeyTx is CreateAPIKey on q, the caller's transaction.
func (s *Store) CreateAPIKeyTx(ctx context.Context, q Querier, tenantSlug string) (key, prefix string, err error) {
	var tenantID int64
	if err := q.QueryRow(ctx, selectTenantIDBySlug, tenantSlug).Scan(&tenantID); err != nil {
		return "", "", fmt.Errorf("create api key: tenant %q: %w", tenantSlug, notFound(err))
	}
	key, prefix, err = createAPIKey(ctx, q, tenantID)
	if err != nil {
		return "", "", fmt.Errorf("create api key for tenant %q: %w", tenantSlug, err)
	}
	return key, prefix, nil
}

const revokeAPIKey = `
UPDATE ordo.api_keys k SET revoked_at = now()
FROM ordo.tenants t
WHERE t.id = k.tenant_id AND k.prefix = $1 AND k.revoked_at IS NULL
RETURNING t.slug`

// RevokeAPIKey makes the key with prefix stop working at once. It returns
// ErrNotFound if no valid key has that prefix (unknown or already revoked).
func (s *Store) RevokeAPIKey(ctx context.Context, prefix string) error {
	_, err := s.RevokeAPIKeyTx(ctx, s.pool, prefix)
	return err
}

// RevokeAPIKeyTx is RevokeAPIKey on q; it returns the key's tenant.
func (s *Store) RevokeAPIKeyTx(ctx context.Context, q Querier, prefix string) (tenantSlug string, err error) {
	if err := q.QueryRow(ctx, revokeAPIKey, prefix).Scan(&tenantSlug); err != nil {
		return "", fmt.Errorf("revoke api key %q: %w", prefix, notFound(err))
	}
	return tenantSlug, nil
}

const revokeTenantAPIKey = `
UPDATE ordo.api_keys k SET revoked_at = now()
FROM ordo.tenants t
WHERE t.id = k.tenant_id AND t.slug = $1 AND k.prefix = $2 AND k.revoked_at IS NULL`

// RevokeTenantAPIKeyTx revokes the key with prefix of the tenant with slug
// on q: ErrNotFound unless that tenant has a valid key with that prefix.
func (s *Store) RevokeTenantAPIKeyTx(ctx context.Context, q Querier, tenantSlug, prefix string) error {
	tag, err := q.Exec(ctx, revokeTenantAPIKey, tenantSlug, prefix)
	if err != nil {
		return fmt.Errorf("revoke api key %q: %w", prefix, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("revoke api key %q of tenant %q: %w", prefix, tenantSlug, ErrNotFound)
	}
	return nil
}

// listAPIKeys yields one row with a NULL prefix for a tenant without keys and
// no row for an unknown tenant, so one query tells the two apart.
const listAPIKeys = `
SELECT k.prefix, k.created_at, k.revoked_at
FROM ordo.tenants t LEFT JOIN ordo.api_keys k ON k.tenant_id = t.id
WHERE t.slug = $1
ORDER BY k.created_at, k.id`

// ListAPIKeys returns the tenant's keys, revoked ones included, oldest first.
func (s *Store) ListAPIKeys(ctx context.Context, tenantSlug string) ([]APIKey, error) {
	return s.ListAPIKeysTx(ctx, s.pool, tenantSlug)
}

// ListAPIKeysTx is ListAPIKeys on q.
func (s *Store) ListAPIKeysTx(ctx context.Context, q Querier, tenantSlug string) ([]APIKey, error) {
	rows, err := q.Query(ctx, listAPIKeys, tenantSlug)
	if err != nil {
		return nil, fmt.Errorf("list api keys of tenant %q: %w", tenantSlug, err)
	}
	tenantFound := false
	keys := []APIKey{}
	for rows.Next() {
		tenantFound = true
		var (
			prefix    *string
			createdAt *time.Time
			k         APIKey
		)
		if err := rows.Scan(&prefix, &createdAt, &k.RevokedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list api keys of tenant %q: %w", tenantSlug, err)
		}
		if prefix == nil {
			continue
		}
		k.Prefix, k.CreatedAt = *prefix, *createdAt
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys of tenant %q: %w", tenantSlug, err)
	}
	if !tenantFound {
		return nil, fmt.Errorf("list api keys: tenant %q: %w", tenantSlug, ErrNotFound)
	}
	return keys, nil
}

// authenticate looks a key up by the hash of the whole key; the hash index
// makes it one lookup and no secret byte steers a branch.
const authenticate = `
SELECT ` + tenantColumns + `
FROM ordo.tenants
WHERE id = (SELECT k.tenant_id FROM ordo.api_keys k WHERE k.hash = $1 AND k.revoked_at IS NULL)`

// Authenticate returns the tenant that owns key. A malformed, unknown or
// revoked key gives ErrUnauthorized, the three indistinguishable to callers.
func (s *Store) Authenticate(ctx context.Context, key string) (Tenant, error) {
	if !wellFormedAPIKey(key) {
		return Tenant{}, ErrUnauthorized
	}
	hash := sha256.Sum256([]byte(key))
	t, err := scanTenant(s.pool.QueryRow(ctx, authenticate, hash[:]))
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, ErrUnauthorized
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("authenticate api key: %w", err)
	}
	return t, nil
}

// wellFormedAPIKey checks the key's shape only: it saves a query on garbage
// and keeps arbitrary input away from the database.
func wellFormedAPIKey(key string) bool {
	n := len(key)
	head := len(apiKeyScheme) + apiKeyPrefixLen + 1
	if n < head+apiKeySecretLen || n > head+apiKeySecretMaxLen {
		return false
	}
	if key[:len(apiKeyScheme)] != apiKeyScheme || key[head-1] != '_' {
		return false
	}
	for i := len(apiKeyScheme); i < n; i++ {
		if i == head-1 {
			continue
		}
		c := key[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// randomBase62 returns n characters drawn uniformly from base62, by rejection
// sampling so no character is more likely than another.
func randomBase62(n int) (string, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/2)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			if b < 248 { // 248 = 4*62: keeps b%62 uniform
				out = append(out, base62[b%62])
				if len(out) == n {
					break
				}
			}
		}
	}
	return string(out), nil
}
