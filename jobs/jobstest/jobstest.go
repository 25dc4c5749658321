// Package jobstest sets up a whole engine for a test: a fresh database, a
// tenant with a WhatsApp credential, a fake Cloud API, and a River runner
// draining conversations. Everything is real but the far end.
package jobstest

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/tenants"
)

// Options shape a Setup.
type Options struct {
	// Config overrides the runner's test defaults field by field.
	Config jobs.Config
	// HandlerURL is the tenant's handler; empty for none.
	HandlerURL string
	// NoStart leaves the runner stopped (call Bundle.Start), so hooks can be set first.
	NoStart bool
	// Logger receives the engine's and the workers' logs; nil logs errors
	// (everything with ORDO_TEST_LOG set) to stderr.
	Logger *slog.Logger
	// Through, if set, turns the fresh database's URL into the one the
	// engine and the workers connect with (sqltest.NewProxy: a database a
	// test can take away).
	Through func(url string) string
}

// Bundle is a running engine.
type Bundle struct {
	URL      string
	Pool     *pgxpool.Pool
	Vault    *tenants.Vault
	Tenants  *tenants.Store
	Engine   *engine.Engine
	Runner   *jobs.Runner
	WhatsApp *whatsapptest.Server
	Tenant   tenants.Tenant
	APIKey   string
	Secret   string // the tenant's handler secret
	Logger   *slog.Logger
	// MasterKey is the vault's key (for a worker process of the test's own).
	MasterKey tenants.MasterKey
	t         testing.TB
	cfg       jobs.Config
}

// PhoneNumberID and AccessToken are the test tenant's WhatsApp credential.
const (
	PhoneNumberID = "1000001"
	AccessToken   = "EAAG-test-token-never-logged"
)

// Setup builds and (unless NoStart) starts an engine for t.
func Setup(t testing.TB, o Options) *Bundle {
	t.Helper()
	ctx := context.Background()
	url := sqltest.URL(t)
	if o.Through != nil {
		url = o.Through(url)
	}
	pool, err := pgxpool.New(ctx, url+"&pool_max_conns=40")
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	vault, err := tenants.NewVault(pool, []tenants.MasterKey{key})
	if err != nil {
		t.Fatal(err)
	}
	store := tenants.NewStore(pool, vault)
	wa := whatsapptest.NewServer()
	t.Cleanup(wa.Close)

	created, err := store.Create(ctx, tenants.CreateParams{Slug: "acme", Name: "Acme", HandlerURL: o.HandlerURL})
	if err != nil {
		t.Fatalf("create tenant: %v", err)
	}
	cred, _ := json.Marshal(map[string]string{"phone_number_id": PhoneNumberID, "access_token": AccessToken, "app_secret": "app-secret-x", "verify_token": "verify-x"})
	if err := vault.Put(ctx, pool, created.Tenant.ID, "whatsapp", cred); err != nil {
		t.Fatalf("store credential: %v", err)
	}

	logger := o.Logger
	if logger == nil {
		level := slog.LevelError
		if os.Getenv("ORDO_TEST_LOG") != "" {
			level = slog.LevelDebug
		}
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	cfg := withTestDefaults(o.Config, wa.URL())
	runner, err := jobs.NewRunner(pool, cfg, store, vault, logger)
	if err != nil {
		t.Fatalf("runner: %v", err)
	}
	b := &Bundle{
		URL: url, Pool: pool, Vault: vault, Tenants: store, Engine: engine.New(pool, logger, engine.WithMetrics(o.Config.Metrics)), Runner: runner,
		WhatsApp: wa, Tenant: created.Tenant, APIKey: created.APIKey, Secret: created.HandlerSecret, Logger: logger, MasterKey: key, t: t, cfg: cfg,
	}
	if !o.NoStart {
		b.Start()
	}
	return b
}

// withTestDefaults shortens the runner's clocks so failures and takeovers
// happen in test time, and points the workers at the fake Cloud API unless
// the test names another (ordo's sandbox, say).
func withTestDefaults(c jobs.Config, waURL string) jobs.Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Workers == 0 {
		c.Workers = 20
	}
	def(&c.HandlerTimeout, 2*time.Second)
	def(&c.SendTimeout, 2*time.Second)
	def(&c.Lease, 4*time.Second)
	def(&c.RetryBase, 20*time.Millisecond)
	def(&c.RetryMax, 200*time.Millisecond)
	def(&c.DrainErrorDelay, 100*time.Millisecond)
	// The periodic jobs (reconcile, event dispatch) at their shortest.
	def(&c.OrphanInterval, jobs.PeriodMin)
	def(&c.FetchPollInterval, 50*time.Millisecond)
	def(&c.ReconcileWait, 300*time.Millisecond)
	def(&c.Events.PollInterval, jobs.PeriodMin)
	def(&c.Events.RetryBase, 50*time.Millisecond)
	if c.WhatsAppAPIURL == "" {
		c.WhatsAppAPIURL = waURL
	}
	return c
}

// Start starts the runner; it is stopped when the test ends.
func (b *Bundle) Start() {
	b.t.Helper()
	if err := b.Runner.Start(context.Background()); err != nil {
		b.t.Fatalf("start runner: %v", err)
	}
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Runner.Stop(ctx)
	})
}

// StartAnother starts another runner on the same database with the same
// settings (a second worker process, or the one that replaces a killed
// one); it is stopped when the test ends.
func (b *Bundle) StartAnother() *jobs.Runner {
	b.t.Helper()
	r, err := jobs.NewRunner(b.Pool, b.cfg, b.Tenants, b.Vault, b.Logger)
	if err != nil {
		b.t.Fatalf("runner: %v", err)
	}
	if err := r.Start(context.Background()); err != nil {
		b.t.Fatalf("start runner: %v", err)
	}
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Stop(ctx)
	})
	return r
}

// Outbound is a text message payload to conversation to.
func Outbound(to, text string) json.RawMessage {
	p, _ := json.Marshal(map[string]any{"to": to, "type": "text", "text": map[string]string{"body": text}})
	return p
}

// Ingest accepts an outbound text message or fails the test.
func (b *Bundle) Ingest(conv, messageID, text string) engine.Accepted {
	b.t.Helper()
	a, err := b.Engine.Ingest(context.Background(), engine.NewMessage{
		Tenant: b.Tenant.Slug, ConversationID: conv, MessageID: messageID, Payload: Outbound(conv, text),
	})
	if err != nil {
		b.t.Fatalf("ingest %s: %v", messageID, err)
	}
	return a
}

// WaitFor polls cond until it holds or the deadline passes.
func (b *Bundle) WaitFor(what string, timeout time.Duration, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Count runs a count query.
func (b *Bundle) Count(query string, args ...any) int {
	b.t.Helper()
	var n int
	if err := b.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		b.t.Fatalf("count %q: %v", query, err)
	}
	return n
}

// AddTenant creates another tenant sending from its own phone number on the
// same fake Cloud API, with settings p applied; it returns the tenant.
func (b *Bundle) AddTenant(slug, phoneNumberID string, p tenants.UpdateParams) tenants.Tenant {
	b.t.Helper()
	ctx := context.Background()
	created, err := b.Tenants.Create(ctx, tenants.CreateParams{Slug: slug, Name: slug})
	if err != nil {
		b.t.Fatalf("create tenant %s: %v", slug, err)
	}
	cred, _ := json.Marshal(map[string]string{"phone_number_id": phoneNumberID, "access_token": AccessToken + "-" + slug, "app_secret": "app-secret-" + slug, "verify_token": "verify-" + slug})
	if err := b.Vault.Put(ctx, b.Pool, created.Tenant.ID, "whatsapp", cred); err != nil {
		b.t.Fatalf("store credential of %s: %v", slug, err)
	}
	t, err := b.Tenants.Update(ctx, slug, p)
	if err != nil && p != (tenants.UpdateParams{}) {
		b.t.Fatalf("update tenant %s: %v", slug, err)
	}
	if p == (tenants.UpdateParams{}) {
		t = created.Tenant
	}
	return t
}

// IngestFor accepts an outbound text message of tenant slug or fails the test.
func (b *Bundle) IngestFor(slug, conv, messageID, text string) engine.Accepted {
	b.t.Helper()
	a, err := b.Engine.Ingest(context.Background(), engine.NewMessage{
		Tenant: slug, ConversationID: conv, MessageID: messageID, Payload: Outbound(conv, text),
	})
	if err != nil {
		b.t.Fatalf("ingest %s/%s: %v", slug, messageID, err)
	}
	return a
}

// StartAnotherRunner starts a second worker "process" on the same database:
// its own pool (its own sessions, as another process would have), the same
// test defaults and fake Cloud API, config c; it is stopped when the test
// ends.
func (b *Bundle) StartAnotherRunner(c jobs.Config) *jobs.Runner {
	b.t.Helper()
	pool, err := pgxpool.New(context.Background(), b.URL+"&pool_max_conns=40")
	if err != nil {
		b.t.Fatalf("pool: %v", err)
	}
	b.t.Cleanup(pool.Close)
	r, err := jobs.NewRunner(pool, withTestDefaults(c, b.WhatsApp.URL()), b.Tenants, b.Vault, b.Logger)
	if err != nil {
		b.t.Fatalf("runner: %v", err)
	}
	if err := r.Start(context.Background()); err != nil {
		b.t.Fatalf("start runner: %v", err)
	}
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Stop(ctx)
	})
	return r
}
