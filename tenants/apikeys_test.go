package tenants_test

import (
	"crypto/sha256"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/ordo-dev/ordo/tenants"
)

var apiKeyShape = regexp.MustCompile(`^ordo_([0-9A-Za-z]{8})_[0-9A-Za-z]{32}$`)

func TestAuthenticateReachesOnlyItsTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	a := createTenant(t, b, "tenant-a")
	bb := createTenant(t, b, "tenant-b")
	a2, _, err := b.store.CreateAPIKey(ctx, "tenant-a")
	if err != nil {
		t.Fatalf("second key for A: %v", err)
	}

	for key, want := range map[string]string{a.APIKey: "tenant-a", a2: "tenant-a", bb.APIKey: "tenant-b"} {
		if !apiKeyShape.MatchString(key) {
			t.Errorf("key %q does not look like ordo_<prefix>_<secret>", key)
		}
		got, err := b.store.Authenticate(ctx, key)
		if err != nil {
			t.Fatalf("authenticate %s's key: %v", want, err)
		}
		if got.Slug != want {
			t.Errorf("a key of %s authenticated as %s", want, got.Slug)
		}
	}
}

func TestAPIKeyStoredOnlyAsHash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	c := createTenant(t, b, "acme")

	var prefix string
	var hash []byte
	if err := b.pool.QueryRow(ctx, `SELECT prefix, hash FROM ordo.api_keys`).Scan(&prefix, &hash); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(c.APIKey))
	if string(hash) != string(sum[:]) {
		t.Error("stored hash is not SHA-256 of the whole key")
	}
	if want := apiKeyShape.FindStringSubmatch(c.APIKey)[1]; prefix != want {
		t.Errorf("stored prefix %q, want %q", prefix, want)
	}
	var rowText string
	if err := b.pool.QueryRow(ctx, `SELECT a::text FROM ordo.api_keys a`).Scan(&rowText); err != nil {
		t.Fatal(err)
	}
	secret := c.APIKey[len("ordo_")+8+1:]
	if strings.Contains(rowText, secret) {
		t.Error("the key's secret part is stored in plain text")
	}
}

func TestRevokeAPIKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	c := createTenant(t, b, "acme")
	second, prefix, err := b.store.CreateAPIKey(ctx, "acme")
	if err != nil {
		t.Fatalf("create key: %v", err)
	}
	if !strings.HasPrefix(second, "ordo_"+prefix+"_") {
		t.Errorf("returned prefix %q is not the key's prefix (%s…)", prefix, second[:14])
	}

	if err := b.store.RevokeAPIKey(ctx, prefix); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if _, err := b.store.Authenticate(ctx, second); !errors.Is(err, tenants.ErrUnauthorized) {
		t.Errorf("revoked key: got %v, want ErrUnauthorized", err)
	}
	if got, err := b.store.Authenticate(ctx, c.APIKey); err != nil || got.Slug != "acme" {
		t.Errorf("the other key stopped working: %+v, %v", got, err)
	}
	if err := b.store.RevokeAPIKey(ctx, prefix); !errors.Is(err, tenants.ErrNotFound) {
		t.Errorf("second revoke: got %v, want ErrNotFound", err)
	}
	if err := b.store.RevokeAPIKey(ctx, "nokey123"); !errors.Is(err, tenants.ErrNotFound) {
		t.Errorf("revoke of an unknown prefix: got %v, want ErrNotFound", err)
	}

	keys, err := b.store.ListAPIKeys(ctx, "acme")
	if err != nil {
		t.Fatalf("list keys: %v", err)
	}
	if len(keys) != 2 {
		t.Fatalf("listed %d keys, want 2", len(keys))
	}
	if keys[0].RevokedAt != nil || keys[1].Prefix != prefix || keys[1].RevokedAt == nil {
		t.Errorf("listing = %+v, want the first key valid and %s revoked", keys, prefix)
	}
}

func TestListAPIKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	createTenant(t, b, "acme")
	if _, err := b.pool.Exec(ctx, `DELETE FROM ordo.api_keys`); err != nil {
		t.Fatal(err)
	}
	keys, err := b.store.ListAPIKeys(ctx, "acme")
	if err != nil || len(keys) != 0 {
		t.Errorf("tenant without keys: %+v, %v; want an empty list", keys, err)
	}
	if _, err := b.store.ListAPIKeys(ctx, "nobody"); !errors.Is(err, tenants.ErrNotFound) {
		t.Errorf("unknown tenant: got %v, want ErrNotFound", err)
	}
	if _, _, err := b.store.CreateAPIKey(ctx, "nobody"); !errors.Is(err, tenants.ErrNotFound) {
		t.Errorf("key for an unknown tenant: got %v, want ErrNotFound", err)
	}
}

func TestAuthenticateMalformed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := createTenant(t, b, "acme")
	key := c.APIKey
	flipped := []byte(key)
	if flipped[len(flipped)-1] == 'a' {
		flipped[len(flipped)-1] = 'b'
	} else {
		flipped[len(flipped)-1] = 'a'
	}

	for name, k := range map[string]string{
		"empty":                "",
		"scheme only":          "ordo_",
		"prefix only":          key[:13],
		"truncated":            key[:len(key)-1],
		"extended":             key + "x",
		"wrong scheme":         "xrdo" + key[4:],
		"bearer included":      "Bearer " + key,
		"trailing space":       key + " ",
		"one char changed":     string(flipped),
		"sql":                  "ordo_' OR 1=1 --_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"separator moved":      "ordo_" + key[5:12] + "_" + key[12:13] + key[14:],
		"non-ascii":            "ordo_ééééé_" + key[13:],
		"very long":            key + strings.Repeat("a", 10000),
		"well-formed, unknown": "ordo_00000000_" + strings.Repeat("0", 32),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := b.store.Authenticate(t.Context(), k)
			if !errors.Is(err, tenants.ErrUnauthorized) {
				t.Errorf("got %+v, %v; want ErrUnauthorized", got, err)
			}
		})
	}
}
