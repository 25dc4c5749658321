package tenants_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/tenants"
)

// bundle is what a test gets from setup: a fresh database and the stores on it.
type bundle struct {
	url   string
	pool  *pgxpool.Pool
	key   tenants.MasterKey
	vault *tenants.Vault
	store *tenants.Store
}

func setup(t *testing.T) bundle {
	t.Helper()
	url := sqltest.URL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	key := testKey(t, "k1")
	vault, err := tenants.NewVault(pool, []tenants.MasterKey{key})
	if err != nil {
		t.Fatalf("new vault: %v", err)
	}
	return bundle{url: url, pool: pool, key: key, vault: vault, store: tenants.NewStore(pool, vault)}
}

func testKey(t *testing.T, id string) tenants.MasterKey {
	t.Helper()
	k := make([]byte, tenants.MasterKeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return tenants.MasterKey{ID: id, Key: k}
}

func createTenant(t *testing.T, b bundle, slug string) tenants.Created {
	t.Helper()
	c, err := b.store.Create(t.Context(), tenants.CreateParams{Slug: slug})
	if err != nil {
		t.Fatalf("create tenant %q: %v", slug, err)
	}
	return c
}

func ptr[T any](v T) *T { return &v }

func assertInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var ie *tenants.InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("want InvalidError on %s, got %v", field, err)
	}
	if ie.Field != field {
		t.Fatalf("want InvalidError on %s, got %q", field, ie.Error())
	}
}

func TestCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	c, err := b.store.Create(ctx, tenants.CreateParams{Slug: "acme", Name: "Acme Ltd", HandlerURL: "https://n8n.example.com/webhook/ordo"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	want := tenants.Tenant{ID: c.Tenant.ID, Slug: "acme", Name: "Acme Ltd", HandlerURL: "https://n8n.example.com/webhook/ordo",
		OnDeadLetter: "halt", Ambiguous: "reconcile", MaxAttempts: 8, SendRate: 80, CreatedAt: c.Tenant.CreatedAt,
		Retention: tenants.Retention(tenants.RetentionDefault), Weight: tenants.WeightDefault, HandlerMode: tenants.HandlerModeDefault,
		HandlerTimeoutMS: int(tenants.HandlerTimeoutDefault.Milliseconds()), ReplyDeadlineMS: int(tenants.ReplyDeadlineDefault.Milliseconds()),
		HandlerOutageLimitMS: tenants.HandlerOutageLimitDefault.Milliseconds()}
	if c.Tenant != want {
		t.Errorf("created tenant = %+v, want %+v", c.Tenant, want)
	}
	if c.Tenant.CreatedAt.IsZero() {
		t.Error("created_at is zero")
	}

	got, err := b.store.Authenticate(ctx, c.APIKey)
	if err != nil {
		t.Fatalf("authenticate with the new key: %v", err)
	}
	if got.Slug != "acme" {
		t.Errorf("key authenticates tenant %q, want acme", got.Slug)
	}

	if len(c.HandlerSecret) != 64 || strings.Trim(c.HandlerSecret, "0123456789abcdef") != "" {
		t.Errorf("handler secret %q is not 64 hex digits", c.HandlerSecret)
	}
	secret, err := b.store.HandlerSecret(ctx, c.Tenant.ID)
	if err != nil {
		t.Fatalf("handler secret: %v", err)
	}
	if string(secret) != c.HandlerSecret {
		t.Errorf("stored handler secret differs from the one shown at creation")
	}

	other := createTenant(t, b, "other")
	if other.HandlerSecret == c.HandlerSecret || other.APIKey == c.APIKey {
		t.Error("two tenants got the same handler secret or API key")
	}
}

func TestCreateDuplicateSlug(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	createTenant(t, b, "acme")

	_, err := b.store.Create(ctx, tenants.CreateParams{Slug: "acme", Name: "Impostor"})
	if !errors.Is(err, tenants.ErrExists) {
		t.Fatalf("second create of acme: got %v, want ErrExists", err)
	}
	// The failed create left nothing behind: still one key and one credential.
	var keys, creds int
	if err := b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ordo.api_keys), (SELECT count(*) FROM ordo.credentials)`).Scan(&keys, &creds); err != nil {
		t.Fatal(err)
	}
	if keys != 1 || creds != 1 {
		t.Errorf("after a refused duplicate: %d api keys and %d credentials, want 1 and 1", keys, creds)
	}
	got, err := b.store.BySlug(ctx, "acme")
	if err != nil || got.Name != "" {
		t.Errorf("original tenant changed: %+v, %v", got, err)
	}
}

func TestCreateValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, tt := range []struct {
		slug    string
		wantErr bool
	}{
		{"acme", false},
		{"a", false},
		{"acme-2", false},
		{"0", false},
		{strings.Repeat("a", 63), false},
		{"", true},
		{strings.Repeat("a", 64), true},
		{"Acme", true},
		{"acme_2", true},
		{"acme corp", true},
		{"acme/../x", true},
		{"café", true},
		{"acme\n", true},
	} {
		t.Run(tt.slug, func(t *testing.T) {
			t.Parallel()
			_, err := b.store.Create(t.Context(), tenants.CreateParams{Slug: tt.slug})
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("slug %q refused: %v", tt.slug, err)
				}
				return
			}
			assertInvalid(t, err, "slug")
		})
	}

	for _, tt := range []struct {
		name  string
		p     tenants.CreateParams
		field string
	}{
		{"ftp handler", tenants.CreateParams{Slug: "h1", HandlerURL: "ftp://example.com/x"}, "handler_url"},
		{"relative handler", tenants.CreateParams{Slug: "h2", HandlerURL: "/webhook"}, "handler_url"},
		{"hostless handler", tenants.CreateParams{Slug: "h3", HandlerURL: "http://"}, "handler_url"},
		{"word handler", tenants.CreateParams{Slug: "h4", HandlerURL: "n8n"}, "handler_url"},
		{"long name", tenants.CreateParams{Slug: "h5", Name: strings.Repeat("x", 201)}, "name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := b.store.Create(t.Context(), tt.p)
			assertInvalid(t, err, tt.field)
			if _, err := b.store.BySlug(t.Context(), tt.p.Slug); !errors.Is(err, tenants.ErrNotFound) {
				t.Errorf("refused tenant %q was stored anyway (%v)", tt.p.Slug, err)
			}
		})
	}
}

func TestUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	c := createTenant(t, b, "acme")

	got, err := b.store.Update(ctx, "acme", tenants.UpdateParams{
		HandlerURL:       ptr("http://n8n:5678/webhook/acme"),
		Name:             ptr("Acme"),
		OnDeadLetter:     ptr("skip"),
		Ambiguous:        ptr("resend"),
		MaxAttempts:      ptr(3),
		Retention:        ptr(tenants.Retention(90 * 24 * time.Hour)),
		Weight:           ptr(3),
		MaxConcurrency:   ptr(5),
		HandlerMode:      ptr("async"),
		HandlerTimeoutMS: ptr(60000),
		ReplyDeadlineMS:  ptr(120000),
		EventsURL:        ptr("https://n8n.example.com/webhook/events"),
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	want := tenants.Tenant{ID: c.Tenant.ID, Slug: "acme", Name: "Acme", HandlerURL: "http://n8n:5678/webhook/acme",
		OnDeadLetter: "skip", Ambiguous: "resend", MaxAttempts: 3, SendRate: 80, CreatedAt: c.Tenant.CreatedAt,
		Retention: tenants.Retention(90 * 24 * time.Hour), Weight: 3, MaxConcurrency: 5, HandlerMode: "async",
		HandlerTimeoutMS: 60000, ReplyDeadlineMS: 120000, EventsURL: "https://n8n.example.com/webhook/events",
		HandlerOutageLimitMS: tenants.HandlerOutageLimitDefault.Milliseconds()}
	if got != want {
		t.Errorf("updated = %+v, want %+v", got, want)
	}

	// Fields left nil keep their values; an empty handler URL removes it.
	got, err = b.store.Update(ctx, "acme", tenants.UpdateParams{HandlerURL: ptr("")})
	if err != nil {
		t.Fatalf("clear handler: %v", err)
	}
	want.HandlerURL = ""
	if got != want {
		t.Errorf("after clearing the handler = %+v, want %+v", got, want)
	}
	if stored, _ := b.store.BySlug(ctx, "acme"); stored != want {
		t.Errorf("BySlug = %+v, want %+v", stored, want)
	}
	if stored, _ := b.store.ByID(ctx, c.Tenant.ID); stored != want {
		t.Errorf("ByID = %+v, want %+v", stored, want)
	}

	for _, tt := range []struct {
		p     tenants.UpdateParams
		field string
	}{
		{tenants.UpdateParams{OnDeadLetter: ptr("retry")}, "on_dead_letter"},
		{tenants.UpdateParams{Ambiguous: ptr("ignore")}, "ambiguous"},
		{tenants.UpdateParams{MaxAttempts: ptr(0)}, "max_attempts"},
		{tenants.UpdateParams{MaxAttempts: ptr(101)}, "max_attempts"},
		{tenants.UpdateParams{HandlerURL: ptr("mailto:ops@example.com")}, "handler_url"},
		{tenants.UpdateParams{Name: ptr(strings.Repeat("é", 201))}, "name"},
		{tenants.UpdateParams{Weight: ptr(0)}, "weight"},
		{tenants.UpdateParams{MaxConcurrency: ptr(-1)}, "max_concurrency"},
		{tenants.UpdateParams{HandlerMode: ptr("later")}, "handler_mode"},
		{tenants.UpdateParams{HandlerTimeoutMS: ptr(999)}, "handler_timeout"},
		{tenants.UpdateParams{ReplyDeadlineMS: ptr(86400001)}, "reply_deadline"},
		{tenants.UpdateParams{EventsURL: ptr("ftp://x")}, "events_url"},
	} {
		_, err := b.store.Update(ctx, "acme", tt.p)
		assertInvalid(t, err, tt.field)
	}
	if stored, _ := b.store.BySlug(ctx, "acme"); stored != want {
		t.Errorf("refused updates changed the tenant: %+v, want %+v", stored, want)
	}

	if _, err := b.store.Update(ctx, "nobody", tenants.UpdateParams{Name: ptr("x")}); !errors.Is(err, tenants.ErrNotFound) {
		t.Errorf("update of an unknown tenant: got %v, want ErrNotFound", err)
	}
}

func TestLookups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	createTenant(t, b, "zeta")
	createTenant(t, b, "alpha")

	list, err := b.store.List(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var slugs []string
	for _, tn := range list {
		slugs = append(slugs, tn.Slug)
	}
	if strings.Join(slugs, ",") != "alpha,zeta" {
		t.Errorf("list = %v, want [alpha zeta]", slugs)
	}

	if _, err := b.store.BySlug(ctx, "nobody"); !errors.Is(err, tenants.ErrNotFound) {
		t.Errorf("BySlug(nobody): got %v, want ErrNotFound", err)
	}
	if _, err := b.store.ByID(ctx, 1<<40); !errors.Is(err, tenants.ErrNotFound) {
		t.Errorf("ByID(unknown): got %v, want ErrNotFound", err)
	}
	if _, err := b.store.HandlerSecret(ctx, 1<<40); !errors.Is(err, tenants.ErrNotFound) {
		t.Errorf("HandlerSecret(unknown): got %v, want ErrNotFound", err)
	}
}
