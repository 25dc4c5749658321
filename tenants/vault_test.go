package tenants_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/ordo-dev/ordo/tenants"
)

func whatsappCredential(token string) json.RawMessage {
	return json.RawMessage(`{"phone_number_id":"1234567890","access_token":"` + token + `","app_secret":"s3cr3t","verify_token":"vt"}`)
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "EAAG" + hex.EncodeToString(b)
}

func TestVaultRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	c := createTenant(t, b, "acme")
	id := c.Tenant.ID

	v1 := whatsappCredential(randomToken(t))
	if err := b.vault.Put(ctx, nil, id, "whatsapp", v1); err != nil {
		t.Fatalf("put: %v", err)
	}
	got, err := b.vault.Get(ctx, id, "whatsapp")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if string(got) != string(v1) {
		t.Errorf("get = %s, want %s", got, v1)
	}

	// Put replaces.
	v2 := whatsappCredential(randomToken(t))
	if err := b.vault.Put(ctx, b.pool, id, "whatsapp", v2); err != nil {
		t.Fatalf("second put: %v", err)
	}
	if got, _ := b.vault.Get(ctx, id, "whatsapp"); string(got) != string(v2) {
		t.Errorf("after replacing: get = %s, want %s", got, v2)
	}

	// A Put inside a transaction that rolls back stores nothing.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.vault.Put(ctx, tx, id, "rolled-back", json.RawMessage(`{"a":1}`)); err != nil {
		t.Fatalf("put in tx: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.vault.Get(ctx, id, "rolled-back"); !errors.Is(err, tenants.ErrNotFound) {
		t.Errorf("rolled-back credential: got %v, want ErrNotFound", err)
	}

	if _, err := b.vault.Get(ctx, id, "missing"); !errors.Is(err, tenants.ErrNotFound) {
		t.Errorf("get of a missing credential: got %v, want ErrNotFound", err)
	}
	if err := b.vault.Put(ctx, nil, 1<<40, "whatsapp", v1); !errors.Is(err, tenants.ErrNotFound) {
		t.Errorf("put for an unknown tenant: got %v, want ErrNotFound", err)
	}
	for name, value := range map[string]string{"array": `[1]`, "string": `"x"`, "null": `null`, "broken": `{"access_token":"abc`, "empty": ``} {
		err := b.vault.Put(ctx, nil, id, "whatsapp", json.RawMessage(value))
		assertInvalid(t, err, "value")
		if value != "" && strings.Contains(err.Error(), "abc") {
			t.Errorf("%s: error %q quotes the value", name, err)
		}
	}
	for _, name := range []string{"", "WhatsApp", "what sapp", "a:b", strings.Repeat("a", 64)} {
		assertInvalid(t, b.vault.Put(ctx, nil, id, name, v1), "name")
	}
	if got, _ := b.vault.Get(ctx, id, "whatsapp"); string(got) != string(v2) {
		t.Errorf("refused puts changed the credential: %s", got)
	}
}

// Ciphertext is bound to its tenant and name: a row moved in SQL, by mistake
// or by an attacker with database access, does not decrypt.
func TestVaultRowMovedInSQLFailsToDecrypt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	a := createTenant(t, b, "tenant-a").Tenant.ID
	victim := createTenant(t, b, "tenant-b").Tenant.ID
	token := randomToken(t)
	if err := b.vault.Put(ctx, nil, a, "whatsapp", whatsappCredential(token)); err != nil {
		t.Fatal(err)
	}
	if err := b.vault.Put(ctx, nil, victim, "whatsapp", whatsappCredential(randomToken(t))); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name     string
		sql      string
		tenantID int64
		credName string
	}{
		{"inserted onto another tenant", `INSERT INTO ordo.credentials (tenant_id, name, key_id, wrapped_key, ciphertext)
			SELECT $2, 'copied', key_id, wrapped_key, ciphertext FROM ordo.credentials WHERE tenant_id = $1 AND name = 'whatsapp'`,
			victim, "copied"},
		{"updated over another tenant's row", `UPDATE ordo.credentials d SET key_id = s.key_id, wrapped_key = s.wrapped_key, ciphertext = s.ciphertext
			FROM ordo.credentials s WHERE s.tenant_id = $1 AND s.name = 'whatsapp' AND d.tenant_id = $2 AND d.name = 'whatsapp'`,
			victim, "whatsapp"},
		{"copied onto another name", `INSERT INTO ordo.credentials (tenant_id, name, key_id, wrapped_key, ciphertext)
			SELECT tenant_id, 'other', key_id, wrapped_key, ciphertext FROM ordo.credentials WHERE tenant_id = $1 AND name = 'whatsapp' AND $2::bigint > 0`,
			a, "other"},
		{"ciphertext swapped under another tenant's key", `UPDATE ordo.credentials d SET ciphertext = s.ciphertext
			FROM ordo.credentials s WHERE s.tenant_id = $1 AND s.name = 'whatsapp' AND d.tenant_id = $2 AND d.name = 'handler'`,
			victim, "handler"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := b.pool.Exec(ctx, tt.sql, a, victim); err != nil {
				t.Fatalf("move row: %v", err)
			}
			got, err := b.vault.Get(ctx, tt.tenantID, tt.credName)
			if err == nil {
				t.Fatalf("moved row decrypted: %s", got)
			}
			msg := err.Error()
			for _, want := range []string{"decryption failed", fmt.Sprint(tt.tenantID), tt.credName} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not mention %q", msg, want)
				}
			}
			if strings.Contains(msg, token) {
				t.Errorf("error %q leaks the token", msg)
			}
		})
	}
	// The original still reads.
	if got, err := b.vault.Get(ctx, a, "whatsapp"); err != nil || !strings.Contains(string(got), token) {
		t.Errorf("original row: %v", err)
	}
}

func TestVaultUnknownKeyID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	id := createTenant(t, b, "acme").Tenant.ID

	other, err := tenants.NewVault(b.pool, []tenants.MasterKey{testKey(t, "k9")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.Get(ctx, id, tenants.HandlerCredential)
	if err == nil || !strings.Contains(err.Error(), `master key "k1"`) {
		t.Errorf("reading a row sealed with k1 without k1: got %v, want an error naming k1", err)
	}
	// A vault with a different key under the same ID cannot open it either.
	impostor, err := tenants.NewVault(b.pool, []tenants.MasterKey{testKey(t, "k1")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := impostor.Get(ctx, id, tenants.HandlerCredential); err == nil || !strings.Contains(err.Error(), "decryption failed") {
		t.Errorf("wrong key bytes under the right ID: got %v, want decryption failed", err)
	}
	// Rotation stops on such a row instead of skipping it silently.
	if _, err := other.Rotate(ctx); err == nil || !strings.Contains(err.Error(), `master key "k1"`) {
		t.Errorf("rotate without the old key: got %v, want an error naming k1", err)
	}
}

func TestVaultRotate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const perTenant = 130 // with 2 tenants and their handler secrets: several batches
	type row struct {
		tenantID int64
		name     string
	}
	want := map[row]string{}
	var ids []int64
	for _, slug := range []string{"acme", "globex"} {
		id := createTenant(t, b, slug).Tenant.ID
		ids = append(ids, id)
		for i := range perTenant {
			name := fmt.Sprintf("cred-%03d", i)
			value := fmt.Sprintf(`{"token":%q}`, randomToken(t))
			if err := b.vault.Put(ctx, nil, id, name, json.RawMessage(value)); err != nil {
				t.Fatal(err)
			}
			want[row{id, name}] = value
		}
	}
	total := len(want) + len(ids) // plus the handler secrets

	k2 := testKey(t, "k2")
	rotating, err := tenants.NewVault(b.pool, []tenants.MasterKey{k2, b.key})
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := rotating.Rotate(ctx)
	if err != nil {
		t.Fatalf("rotate: %v", err)
	}
	if rotated != total {
		t.Errorf("rotated %d rows, want %d", rotated, total)
	}
	var onOld, onNew int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE key_id = 'k1'), count(*) FILTER (WHERE key_id = 'k2') FROM ordo.credentials`).Scan(&onOld, &onNew); err != nil {
		t.Fatal(err)
	}
	if onOld != 0 || onNew != total {
		t.Errorf("after rotation: %d rows under k1 and %d under k2, want 0 and %d", onOld, onNew, total)
	}

	// Once rotated, the old key can be dropped.
	newOnly, err := tenants.NewVault(b.pool, []tenants.MasterKey{k2})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []*tenants.Vault{rotating, newOnly} {
		for k, value := range want {
			got, err := v.Get(ctx, k.tenantID, k.name)
			if err != nil {
				t.Fatalf("%v: get %v after rotation: %v", v, k, err)
			}
			if string(got) != value {
				t.Fatalf("%v: %v = %s, want %s", v, k, got, value)
			}
		}
	}
	store := tenants.NewStore(b.pool, newOnly)
	for _, id := range ids {
		if _, err := store.HandlerSecret(ctx, id); err != nil {
			t.Errorf("handler secret after rotation: %v", err)
		}
	}

	again, err := rotating.Rotate(ctx)
	if err != nil || again != 0 {
		t.Errorf("second rotation: rotated %d, %v; want 0", again, err)
	}
}

// A server still on the old key list keeps writing while the operator
// rotates: no write may be lost or left unreadable.
func TestVaultRotateWhileWriting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	id := createTenant(t, b, "acme").Tenant.ID
	for i := range 300 {
		if err := b.vault.Put(ctx, nil, id, fmt.Sprintf("c%03d", i), json.RawMessage(`{"v":0}`)); err != nil {
			t.Fatal(err)
		}
	}
	rotating, err := tenants.NewVault(b.pool, []tenants.MasterKey{testKey(t, "k2"), b.key})
	if err != nil {
		t.Fatal(err)
	}

	const writes = 200
	hot := []string{"c000", "c150", "c299"}
	var wg, writers sync.WaitGroup
	errs := make(chan error, 2*len(hot)+1)
	writing, cancel := context.WithCancel(ctx)
	for _, name := range hot {
		// A reader on the server: every read in between must decrypt too.
		wg.Go(func() {
			for writing.Err() == nil {
				if _, err := rotating.Get(ctx, id, name); err != nil {
					errs <- fmt.Errorf("read during rotation: %w", err)
					return
				}
			}
		})
		writers.Add(1)
		wg.Go(func() {
			defer writers.Done()
			for i := 1; i <= writes; i++ {
				v := b.vault // the old server
				if i%2 == 0 {
					v = rotating // the new server
				}
				if err := v.Put(ctx, nil, id, name, json.RawMessage(fmt.Sprintf(`{"v":%d}`, i))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		if _, err := rotating.Rotate(ctx); err != nil {
			errs <- err
		}
	})
	writers.Wait()
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	for i := range 300 {
		name := fmt.Sprintf("c%03d", i)
		want := `{"v":0}`
		for _, h := range hot {
			if h == name {
				want = fmt.Sprintf(`{"v":%d}`, writes)
			}
		}
		got, err := rotating.Get(ctx, id, name)
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		if string(got) != want {
			t.Errorf("%s = %s, want the last write %s", name, got, want)
		}
	}
	var onOld int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM ordo.credentials WHERE key_id = 'k1' AND name <> ALL($1)`, hot).Scan(&onOld); err != nil {
		t.Fatal(err)
	}
	if onOld != 0 {
		t.Errorf("%d rows nobody wrote during rotation are still under k1", onOld)
	}
}

// A database dump, the thing most likely to leak, holds no secret in any
// encoding pg_dump might use.
func TestNoPlaintextInPgDump(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	c := createTenant(t, b, "acme")
	token := randomToken(t)
	value := whatsappCredential(token)
	if err := b.vault.Put(ctx, nil, c.Tenant.ID, "whatsapp", value); err != nil {
		t.Fatal(err)
	}

	out, err := exec.CommandContext(ctx, pgDump(t), "--dbname="+b.url).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("pg_dump: %v: %s", err, stderr)
	}
	dump := string(out)
	if !strings.Contains(dump, "COPY ordo.credentials") || !strings.Contains(dump, "acme") {
		t.Fatal("the dump does not hold the credentials table and tenant: the test would prove nothing")
	}
	for _, secret := range []string{token, c.HandlerSecret, c.APIKey[14:]} {
		for _, form := range encodings(secret) {
			if strings.Contains(dump, form) {
				t.Errorf("the dump contains a secret (as %q)", form)
			}
		}
	}
	if strings.Contains(dump, base64.StdEncoding.EncodeToString(b.key.Key)) || strings.Contains(dump, hex.EncodeToString(b.key.Key)) {
		t.Error("the dump contains the master key")
	}
}

// encodings returns s as it could appear in a dump: plain, hex (bytea's text
// form) and base64 at each of the three alignments it could start on.
func encodings(s string) []string {
	forms := []string{s, hex.EncodeToString([]byte(s))}
	for off := range 3 {
		enc := base64.RawStdEncoding.EncodeToString([]byte(s[off:]))
		forms = append(forms, enc[:len(enc)-4]) // the tail depends on what follows
	}
	return forms
}

func pgDump(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("pg_dump"); err == nil {
		return p
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump")
	if len(matches) == 0 {
		t.Fatal("pg_dump not found on PATH nor under /usr/lib/postgresql/*/bin")
	}
	sort.Strings(matches)
	return matches[len(matches)-1]
}

// Keys printed or logged, by mistake or on purpose, show their IDs only.
func TestKeysNeverPrintedOrLogged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	k2 := testKey(t, "k2")
	keys := []tenants.MasterKey{k2, b.key}
	vault, err := tenants.NewVault(b.pool, keys)
	if err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	c, err := tenants.NewStore(b.pool, vault).Create(ctx, tenants.CreateParams{Slug: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vault.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	_, getErr := vault.Get(ctx, c.Tenant.ID, "missing")
	log.Info("vault", "vault", vault, "key", k2, "key_ptr", &k2, "keys", keys, "err", getErr)
	printed := fmt.Sprintf("%v %+v %#v %s %x %v %+v %#v %s %v %+v %#v", k2, k2, k2, k2, vault, vault, vault, vault, vault, keys, keys, keys)
	printed += fmt.Sprintf("%v %+v %#v %d", *vault, *vault, *vault, vault)

	for what, text := range map[string]string{"log": buf.String(), "fmt": printed} {
		if !strings.Contains(text, "k2") {
			t.Errorf("%s output does not even name the key: %s", what, text)
		}
		for _, k := range keys {
			for _, form := range []string{
				string(k.Key), hex.EncodeToString(k.Key),
				base64.StdEncoding.EncodeToString(k.Key), base64.RawURLEncoding.EncodeToString(k.Key),
			} {
				if strings.Contains(text, form) {
					t.Errorf("%s output contains master key %s: %s", what, k.ID, text)
				}
			}
		}
	}
}

func TestParseMasterKeys(t *testing.T) {
	t.Parallel()
	k1 := bytes.Repeat([]byte{0x11}, 32)
	k2 := bytes.Repeat([]byte{0xfe}, 32)
	std1, std2 := base64.StdEncoding.EncodeToString(k1), base64.StdEncoding.EncodeToString(k2)
	raw2 := base64.RawURLEncoding.EncodeToString(k2)
	short := base64.StdEncoding.EncodeToString(k1[:16])

	for _, tt := range []struct {
		name    string
		in      string
		wantIDs string
		wantErr string
	}{
		{"one", "k1:" + std1, "k1", ""},
		{"newest first", "k2:" + std2 + ",k1:" + std1, "k2,k1", ""},
		{"spaces and trailing comma", " k2:" + std2 + " , k1:" + std1 + ",", "k2,k1", ""},
		{"url base64 without padding", "k20260105-a1b2c3:" + raw2, "k20260105-a1b2c3", ""},
		{"empty", "", "", "no master keys"},
		{"only commas", " , ", "", "no master keys"},
		{"no id", std1, "", "master key #1: want id:base64"},
		{"empty id", ":" + std1, "", "master key #1: id must be"},
		{"bad id", "k1:" + std1 + ",key one:" + std2, "", "master key #2: id must be"},
		{"bad base64", "k1:" + std1[:10] + "!!" + std1[12:], "", `master key "k1": key is not valid base64`},
		{"too short", "k1:" + short, "", `master key "k1": key is 16 bytes, want 32`},
		{"duplicate id", "k1:" + std1 + ",k1:" + std2, "", `master key "k1" appears more than once`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			keys, err := tenants.ParseMasterKeys(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
				}
				for _, secret := range []string{std1, std2, raw2, short, std1[:10], std1[12:]} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("error %q quotes key material", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			var ids []string
			for _, k := range keys {
				ids = append(ids, k.ID)
				if !bytes.Equal(k.Key, k1) && !bytes.Equal(k.Key, k2) {
					t.Errorf("key %s decoded to the wrong bytes", k.ID)
				}
			}
			if strings.Join(ids, ",") != tt.wantIDs {
				t.Errorf("ids = %v, want %s", ids, tt.wantIDs)
			}
		})
	}
}

func TestGenerateMasterKey(t *testing.T) {
	t.Parallel()
	k, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := tenants.ParseMasterKeys(k.Format())
	if err != nil {
		t.Fatalf("a generated key does not parse: %v", err)
	}
	if parsed[0].ID != k.ID || !bytes.Equal(parsed[0].Key, k.Key) {
		t.Error("a generated key does not round-trip through its Format")
	}
	if !strings.HasPrefix(k.ID, "k20") {
		t.Errorf("id %q does not start with k and the date", k.ID)
	}
	other, _ := tenants.GenerateMasterKey()
	if other.ID == k.ID || bytes.Equal(other.Key, k.Key) {
		t.Error("two generated keys are the same")
	}
	if _, err := tenants.NewVault(nil, nil); err == nil {
		t.Error("a vault without keys was created")
	}
	if _, err := tenants.NewVault(nil, []tenants.MasterKey{{ID: "k1", Key: []byte("short")}}); err == nil {
		t.Error("a vault with a 5-byte key was created")
	}
}
