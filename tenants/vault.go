package tenants

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// MasterKeySize is the length of a master key: AES-256.
const MasterKeySize = 32

// maxCredentialSize bounds a credential's JSON; real ones are a few hundred bytes.
const maxCredentialSize = 64 << 10

// MasterKey is one key-encryption key. It lives outside the database (in
// ORDO_MASTER_KEYS); the database only ever sees its ID. Its String, GoString,
// LogValue and MarshalJSON show the ID alone, so printing or logging one is
// safe (except with numeric verbs such as %d, which print Key's bytes).
type MasterKey struct {
	// ID names the key; every credential row records the ID of the key that
	// wraps its data key. 1 to 64 letters, digits, '.', '_' or '-'.
	ID string
	// Key is the 32-byte AES-256 key.
	Key []byte
}

// String shows the key's ID, never its bytes.
func (k MasterKey) String() string { return "MasterKey(" + k.ID + ")" }

// GoString keeps %#v from printing the key's bytes.
func (k MasterKey) GoString() string {
	return "tenants.MasterKey{ID: " + strconv.Quote(k.ID) + ", Key: <redacted>}"
}

// LogValue logs the key's ID, never its bytes.
func (k MasterKey) LogValue() slog.Value { return slog.GroupValue(slog.String("id", k.ID)) }

// MarshalJSON writes the key's ID only, so a key inside a logged or encoded
// struct or slice (where LogValue is not consulted) stays secret.
func (k MasterKey) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID string `json:"id"`
	}{k.ID})
}

// Format returns the key as one ORDO_MASTER_KEYS entry, "id:base64". It is
// the one method that reveals the key, for `ordo keys generate`.
func (k MasterKey) Format() string { return k.ID + ":" + base64.StdEncoding.EncodeToString(k.Key) }

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ParseMasterKeys parses ORDO_MASTER_KEYS: comma-separated "id:base64" entries
// of 32-byte keys, newest first. Errors name the entry by position or ID and
// never quote key material.
func ParseMasterKeys(s string) ([]MasterKey, error) {
	var keys []MasterKey
	seen := map[string]bool{}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		pos := i + 1
		id, encoded, ok := strings.Cut(entry, ":")
		if !ok {
			return nil, fmt.Errorf("master key #%d: want id:base64", pos)
		}
		if !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("master key #%d: id must be 1 to 64 letters, digits, '.', '_' or '-'", pos)
		}
		if seen[id] {
			return nil, fmt.Errorf("master key %q appears more than once", id)
		}
		seen[id] = true
		key, err := decodeBase64(encoded)
		if err != nil {
			return nil, fmt.Errorf("master key %q: key is not valid base64", id)
		}
		if len(key) != MasterKeySize {
			return nil, fmt.Errorf("master key %q: key is %d bytes, want %d (AES-256)", id, len(key), MasterKeySize)
		}
		keys = append(keys, MasterKey{ID: id, Key: key})
	}
	if len(keys) == 0 {
		return nil, errors.New("no master keys: want comma-separated id:base64 entries, newest first")
	}
	return keys, nil
}

// decodeBase64 accepts standard and URL alphabets, padded or not: keys get
// pasted from many tools.
func decodeBase64(s string) ([]byte, error) {
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		var b []byte
		if b, err = enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, err
}

// GenerateMasterKey returns a fresh random key whose ID carries today's date,
// e.g. k20260105-3fa91c, so a key list reads newest first at a glance.
func GenerateMasterKey() (MasterKey, error) {
	key := make([]byte, MasterKeySize)
	suffix := make([]byte, 3)
	if _, err := rand.Read(key); err != nil {
		return MasterKey{}, fmt.Errorf("generate master key: %w", err)
	}
	if _, err := rand.Read(suffix); err != nil {
		return MasterKey{}, fmt.Errorf("generate master key id: %w", err)
	}
	return MasterKey{ID: "k" + time.Now().UTC().Format("20060102") + "-" + hex.EncodeToString(suffix), Key: key}, nil
}

// Vault stores credentials (JSON objects such as a tenant's WhatsApp token)
// encrypted with envelope encryption. Each row gets its own random data key;
// the credential is sealed with AES-256-GCM under the data key, and the data
// key is sealed under a master key. Both seals bind the tenant and the
// credential name as associated data, so a row copied onto another tenant or
// name does not decrypt. Rotating master keys re-seals only the data keys.
// A Vault is safe for concurrent use; printing or logging it shows key IDs only.
type Vault struct {
	pool *pgxpool.Pool
	// ids are the master key IDs, newest first; ids[0] seals new rows.
	ids   []string
	aeads map[string]cipher.AEAD
}

// NewVault returns a vault on pool with keys, newest first. The newest key
// seals every write; all of them can open rows.
func NewVault(pool *pgxpool.Pool, keys []MasterKey) (*Vault, error) {
	if len(keys) == 0 {
		return nil, errors.New("new vault: no master keys")
	}
	v := &Vault{pool: pool, aeads: make(map[string]cipher.AEAD, len(keys))}
	for i, k := range keys {
		if !keyIDPattern.MatchString(k.ID) {
			return nil, fmt.Errorf("new vault: master key #%d: id must be 1 to 64 letters, digits, '.', '_' or '-'", i+1)
		}
		if _, dup := v.aeads[k.ID]; dup {
			return nil, fmt.Errorf("new vault: master key %q appears more than once", k.ID)
		}
		if len(k.Key) != MasterKeySize {
			return nil, fmt.Errorf("new vault: master key %q is %d bytes, want %d", k.ID, len(k.Key), MasterKeySize)
		}
		aead, err := newGCM(k.Key)
		if err != nil {
			return nil, fmt.Errorf("new vault: master key %q: %w", k.ID, err)
		}
		v.ids = append(v.ids, k.ID)
		v.aeads[k.ID] = aead
	}
	return v, nil
}

// KeyID returns the ID of the newest master key, the one new rows are sealed with.
func (v *Vault) KeyID() string { return v.ids[0] }

// String shows the vault's master key IDs only.
func (v *Vault) String() string { return "tenants.Vault{keys: [" + strings.Join(v.ids, " ") + "]}" }

// Format makes every fmt verb (%v, %+v, %#v, %x, …) print String, so no
// verb can reach the ciphers' key schedules.
func (v *Vault) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(v.String())) }

// LogValue logs the vault's master key IDs only.
func (v *Vault) LogValue() slog.Value {
	return slog.GroupValue(slog.String("key_ids", strings.Join(v.ids, ",")))
}

var credentialNamePattern = regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)

const upsertCredential = `
INSERT INTO ordo.credentials (tenant_id, name, key_id, wrapped_key, ciphertext)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant_id, name) DO UPDATE SET
    key_id = EXCLUDED.key_id,
    wrapped_key = EXCLUDED.wrapped_key,
    ciphertext = EXCLUDED.ciphertext,
    updated_at = now()`

// Put stores value, a JSON object, as the tenant's credential name, replacing
// any previous value. It runs on q, so it can join the caller's transaction;
// a nil q uses the vault's pool.
func (v *Vault) Put(ctx context.Context, q Querier, tenantID int64, name string, value json.RawMessage) error {
	if !credentialNamePattern.MatchString(name) {
		return invalid("name", "must be 1 to 63 characters of a-z, 0-9, _ and -")
	}
	value = bytes.TrimSpace(value)
	// Deliberately no json error text: it would quote the secret's characters.
	if len(value) == 0 || value[0] != '{' || !json.Valid(value) {
		return invalid("value", "must be a JSON object")
	}
	if len(value) > maxCredentialSize {
		return invalid("value", "must be at most %d KiB", maxCredentialSize>>10)
	}
	if name == HandlerAuthCredential {
		// Refused now rather than at the handler call, where it would
		// pause the tenant.
		if _, err := ParseHandlerAuth(value); err != nil {
			return err
		}
	}
	if q == nil {
		q = v.pool
	}
	keyID := v.ids[0]
	wrapped, ciphertext, err := seal(v.aeads[keyID], keyID, tenantID, name, value)
	if err != nil {
		return fmt.Errorf("seal credential %q of tenant %d: %w", name, tenantID, err)
	}
	if _, err := q.Exec(ctx, upsertCredential, tenantID, name, keyID, wrapped, ciphertext); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ForeignKeyViolation {
			return fmt.Errorf("store credential %q: tenant %d: %w", name, tenantID, ErrNotFound)
		}
		return fmt.Errorf("store credential %q of tenant %d: %w", name, tenantID, err)
	}
	return nil
}

const deleteCredential = `DELETE FROM ordo.credentials WHERE tenant_id = $1 AND name = $2`

// DeleteCredential removes the tenant's credential name on q (the caller's
// transaction); ErrNotFound when it has none. Needs no master key.
func DeleteCredential(ctx context.Context, q Querier, tenantID int64, name string) error {
	tag, err := q.Exec(ctx, deleteCredential, tenantID, name)
	if err != nil {
		return fmt.Errorf("delete credential %q of tenant %d: %w", name, tenantID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("no %s credential is set: %w", name, ErrNotFound)
	}
	return nil
}

const selectCredential = `
SELECT key_id, wrapped_key, ciphertext FROM ordo.credentials WHERE tenant_id = $1 AND name = $2`

// Get returns the tenant's credential name, or ErrNotFound. A row that does
// not decrypt (tampered with, or copied from another tenant or name) or that
// is sealed with a master key this vault lacks is an error naming the tenant,
// the credential and the key ID, never a secret.
func (v *Vault) Get(ctx context.Context, tenantID int64, name string) (json.RawMessage, error) {
	return v.GetOn(ctx, v.pool, tenantID, name)
}

// GetOn is Get reading through q: a drain reads its tenant's credential on
// the connection it holds, never waiting for one of the pool's (at load
// 20–35 drains waited for pool connections the busy pool did not free).
func (v *Vault) GetOn(ctx context.Context, q Querier, tenantID int64, name string) (json.RawMessage, error) {
	var (
		keyID               string
		wrapped, ciphertext []byte
	)
	err := q.QueryRow(ctx, selectCredential, tenantID, name).Scan(&keyID, &wrapped, &ciphertext)
	if err != nil {
		return nil, fmt.Errorf("read credential %q of tenant %d: %w", name, tenantID, notFound(err))
	}
	dataKey, err := v.unwrap(keyID, tenantID, name, wrapped)
	if err != nil {
		return nil, err
	}
	defer clear(dataKey)
	aead, err := newGCM(dataKey)
	if err != nil {
		return nil, fmt.Errorf("credential %q of tenant %d: %w", name, tenantID, err)
	}
	plaintext, err := open(aead, ciphertext, credentialAAD(tenantID, name))
	if err != nil {
		return nil, decryptionFailed(tenantID, name)
	}
	return plaintext, nil
}

const (
	// rotateBatchSize is how many rows one scan of Rotate lists.
	rotateBatchSize = 100
	// Keyset pagination over the primary key: a row Rotate cannot re-wrap is
	// passed over, never listed again, so the scan always ends.
	selectStaleCredentials = `
SELECT tenant_id, name FROM ordo.credentials
WHERE key_id <> $1 AND (tenant_id, name) > ($2::bigint, $3::text)
ORDER BY tenant_id, name
LIMIT $4`
	lockCredential = `
SELECT key_id, wrapped_key FROM ordo.credentials WHERE tenant_id = $1 AND name = $2 FOR UPDATE`
	rewrapCredential = `
UPDATE ordo.credentials SET key_id = $3, wrapped_key = $4 WHERE tenant_id = $1 AND name = $2`
)

// Rotate re-wraps every credential whose data key is sealed with an older
// master key under the newest one, and returns how many it re-wrapped. The
// ciphertext is untouched. Each row is re-wrapped in its own short
// transaction holding that row's lock, so Rotate runs while the server
// serves, and a Put racing with it either lands first (and Rotate, re-reading
// the locked row, leaves it be) or waits and wins. It stops at the first row
// it cannot open, e.g. one sealed with a key this vault lacks.
func (v *Vault) Rotate(ctx context.Context) (rotated int, err error) {
	newest := v.ids[0]
	var (
		lastTenant int64
		lastName   string
	)
	for {
		rows, err := v.pool.Query(ctx, selectStaleCredentials, newest, lastTenant, lastName, rotateBatchSize)
		if err != nil {
			return rotated, fmt.Errorf("rotate: list credentials: %w", err)
		}
		type rowKey struct {
			tenantID int64
			name     string
		}
		batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rowKey, error) {
			var k rowKey
			return k, r.Scan(&k.tenantID, &k.name)
		})
		if err != nil {
			return rotated, fmt.Errorf("rotate: list credentials: %w", err)
		}
		for _, k := range batch {
			done, err := v.rewrap(ctx, k.tenantID, k.name)
			if err != nil {
				return rotated, fmt.Errorf("rotate: %w", err)
			}
			if done {
				rotated++
			}
		}
		if len(batch) < rotateBatchSize {
			return rotated, nil
		}
		last := batch[len(batch)-1]
		lastTenant, lastName = last.tenantID, last.name
	}
}

// rewrap re-seals one row's data key under the newest master key. It reports
// false when there was nothing to do: the row is gone or a concurrent Put
// already sealed it with the newest key.
func (v *Vault) rewrap(ctx context.Context, tenantID int64, name string) (bool, error) {
	newest := v.ids[0]
	done := false
	err := pgx.BeginFunc(ctx, v.pool, func(tx pgx.Tx) error {
		var (
			keyID   string
			wrapped []byte
		)
		err := tx.QueryRow(ctx, lockCredential, tenantID, name).Scan(&keyID, &wrapped)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("lock credential %q of tenant %d: %w", name, tenantID, err)
		}
		if keyID == newest {
			return nil
		}
		dataKey, err := v.unwrap(keyID, tenantID, name, wrapped)
		if err != nil {
			return err
		}
		defer clear(dataKey)
		rewrapped, err := sealWith(v.aeads[newest], dataKey, wrapAAD(tenantID, name, newest))
		if err != nil {
			return fmt.Errorf("re-wrap credential %q of tenant %d: %w", name, tenantID, err)
		}
		if _, err := tx.Exec(ctx, rewrapCredential, tenantID, name, newest, rewrapped); err != nil {
			return fmt.Errorf("re-wrap credential %q of tenant %d: %w", name, tenantID, err)
		}
		done = true
		return nil
	})
	return done, err
}

// unwrap opens a row's data key with master key keyID.
func (v *Vault) unwrap(keyID string, tenantID int64, name string, wrapped []byte) ([]byte, error) {
	master, ok := v.aeads[keyID]
	if !ok {
		return nil, fmt.Errorf("credential %q of tenant %d is sealed with master key %q, which is not configured: %w", name, tenantID, keyID, ErrUnreadable)
	}
	dataKey, err := open(master, wrapped, wrapAAD(tenantID, name, keyID))
	if err != nil || len(dataKey) != MasterKeySize {
		return nil, decryptionFailed(tenantID, name)
	}
	return dataKey, nil
}

// seal encrypts plaintext under a fresh data key and wraps that key with
// master (whose ID is keyID). It returns the two column values.
func seal(master cipher.AEAD, keyID string, tenantID int64, name string, plaintext []byte) (wrapped, ciphertext []byte, err error) {
	dataKey := make([]byte, MasterKeySize)
	if _, err := rand.Read(dataKey); err != nil {
		return nil, nil, fmt.Errorf("generate data key: %w", err)
	}
	defer clear(dataKey)
	aead, err := newGCM(dataKey)
	if err != nil {
		return nil, nil, err
	}
	if ciphertext, err = sealWith(aead, plaintext, credentialAAD(tenantID, name)); err != nil {
		return nil, nil, err
	}
	if wrapped, err = sealWith(master, dataKey, wrapAAD(tenantID, name, keyID)); err != nil {
		return nil, nil, err
	}
	return wrapped, ciphertext, nil
}

// credentialAAD binds a sealed value to its row: "ordo:v1:<tenant id>:<name>".
func credentialAAD(tenantID int64, name string) []byte {
	return []byte("ordo:v1:" + strconv.FormatInt(tenantID, 10) + ":" + name)
}

// wrapAAD binds a wrapped data key to its row and to the master key that
// wrapped it. Names cannot contain ':', so the concatenation is unambiguous.
func wrapAAD(tenantID int64, name, keyID string) []byte {
	return append(credentialAAD(tenantID, name), ":"+keyID...)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("aes: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("gcm: %w", err)
	}
	return aead, nil
}

// sealWith returns nonce||ciphertext||tag under a random nonce.
func sealWith(aead cipher.AEAD, plaintext, aad []byte) ([]byte, error) {
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("generate nonce: %w", err)
	}
	return aead.Seal(nonce, nonce, plaintext, aad), nil
}

// open reverses sealWith.
func open(aead cipher.AEAD, sealed, aad []byte) ([]byte, error) {
	n := aead.NonceSize()
	if len(sealed) < n+aead.Overhead() {
		return nil, errors.New("sealed value too short")
	}
	return aead.Open(nil, sealed[:n], sealed[n:], aad)
}

func decryptionFailed(tenantID int64, name string) error {
	return fmt.Errorf("credential %q of tenant %d: decryption failed: the row was altered or does not belong to this tenant and name: %w", name, tenantID, ErrUnreadable)
}
