package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/cmd/internal/pgcluster"
	"github.com/ordo-dev/ordo/cmd/internal/server"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// devDir holds what ordo dev makes for itself: the Postgres cluster, the
// master key, the admin password, the demo tenant's key and the env file
// the operator commands read (cli.WriteDevEnv).
const devDir = cli.DevDir

// sandboxPhoneNumberID is the sending number of a tenant without a
// WhatsApp credential in ordo dev (jobs.Config.SandboxCredential).
const sandboxPhoneNumberID = "100000000000000"

// demoState is the demo tenant's key, kept in .ordo/ so a second `ordo dev`
// can print it again (a real tenant's key is shown once only).
type demoState struct {
	Tenant string `json:"tenant"`
	APIKey string `json:"api_key"`
	// HandlerSecret is read from the vault on each start, not kept here.
	HandlerSecret string `json:"-"`
}

// runDev is `ordo dev`: everything on one machine, for a first try.
func runDev(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo dev")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	dir, err := filepath.Abs(devDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	// The sandbox channel answers on this server unless a Cloud API URL is given.
	// Loopback unless told otherwise: the sandbox shows message bodies.
	addr := cmp.Or(env.Addr, "127.0.0.1:8080")
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("ORDO_ADDR %q: %w", addr, err)
	}
	base := "http://127.0.0.1:" + port
	// One ordo dev per directory: a second one would share, and on its
	// exit stop, the first one's Postgres. The lock is held until after
	// the cluster has stopped (defers run last-in first-out).
	lock, err := lockDevDir(dir, base)
	if err != nil {
		return err
	}
	defer lock.Release()

	databaseURL := env.DatabaseURL
	if databaseURL == "" {
		fmt.Fprintf(env.Stderr, "starting a private PostgreSQL cluster in %s/pg …\n", dir)
		cluster, err := pgcluster.Start(ctx, pgcluster.Config{Dir: filepath.Join(dir, "pg"), Logger: env.Logger})
		if err != nil {
			return err
		}
		defer func() {
			fmt.Fprintln(env.Stderr, "stopping the private PostgreSQL cluster (its data stays for the next `make dev`)")
			_ = cluster.Stop(context.WithoutCancel(ctx))
		}()
		if err := cluster.CreateDatabase(ctx, "ordo"); err != nil {
			return err
		}
		databaseURL = cluster.URL("ordo")
	}
	if err := ordosql.Up(databaseURL); err != nil {
		return err
	}

	keysText := env.MasterKeys
	if keysText == "" {
		if keysText, err = devSecret(filepath.Join(dir, "master.key"), func() (string, error) {
			k, err := tenants.GenerateMasterKey()
			return k.Format(), err
		}); err != nil {
			return err
		}
	}
	keys, err := tenants.ParseMasterKeys(strings.TrimSpace(keysText))
	if err != nil {
		return fmt.Errorf("master key: %w", err)
	}
	adminPassword := env.AdminPassword
	if adminPassword == "" {
		if adminPassword, err = devSecret(filepath.Join(dir, "admin-password"), randomHex); err != nil {
			return err
		}
	}

	waURL := env.WhatsAppAPIURL
	var sandboxCred *whatsapp.Credential
	if waURL == "" {
		waURL = base + "/sandbox/v23.0"
		// A tenant made with `ordo tenant create` has no WhatsApp
		// credential: here it sends to the sandbox with this one.
		sandboxCred = &whatsapp.Credential{PhoneNumberID: sandboxPhoneNumberID, AccessToken: "sandbox-token", AppSecret: "sandbox", VerifyToken: "sandbox"}
	}

	demo, err := ensureDemoTenant(ctx, databaseURL, keys, filepath.Join(dir, "demo.json"))
	if err != nil {
		return err
	}
	// `ordo tenant …` from this directory reaches this server's database
	// with its key, nothing set by hand.
	if err := cli.WriteDevEnv(dir, databaseURL, strings.TrimSpace(keysText)); err != nil {
		return err
	}
	outbound, err := cli.Outbound(env)
	if err != nil {
		return err
	}
	cfg := server.Config{
		Role: "all", DatabaseURL: databaseURL, Addr: addr, Keys: keys,
		Jobs:  jobs.Config{Workers: 20, WhatsAppAPIURL: waURL, SandboxCredential: sandboxCred, Outbound: outbound},
		Web:   web.Config{AdminPassword: adminPassword, AdminOperators: true, Sandbox: true},
		Build: buildLabels(),
		Ready: func(string) {
			fmt.Fprintf(env.Stdout, `
ordo dev is running.

  API          %[1]s/v1   (Authorization: Bearer %[2]s)
  handler      the demo tenant's handler secret (X-Ordo-Signature's HMAC key): %[6]s
  admin page   %[1]s/admin   (log in as admin, password %[3]s; ordo operator add --name N for named logins)
  health       %[1]s/readyz   (metrics: %[1]s/metrics, API contract: %[1]s/v1/openapi.json)
  sandbox      sends go to the built-in WhatsApp stand-in: %[1]s/sandbox/sends
  database     %[4]s

Try it:
  curl -s -X POST %[1]s/v1/messages -H 'Authorization: Bearer %[2]s' \
    -H 'Content-Type: application/json' \
    -d '{"message_id":"hello-1","conversation_id":"16505551234","type":"text","text":{"body":"Hello from ordo"}}'

Point the demo tenant at a handler (an n8n Webhook node, say); from this
directory the ordo commands need no variables (they read %[5]s/env):
  bin/ordo tenant update --slug demo --handler-url http://localhost:5678/webhook/ordo \
    --handler-mode sync --handler-timeout %[7]s
  bin/ordo tenant create --slug second
(A tenant without a WhatsApp credential, like that one, sends to the sandbox.)

Ctrl-C stops it; the data stays in %[5]s for the next start.
`, base, demo.APIKey, adminPassword, redactURL(databaseURL), dir, demo.HandlerSecret, tenants.HandlerTimeoutDefault)
		},
	}
	return server.Run(ctx, env.Logger, cfg)
}

// ensureDemoTenant creates the demo tenant (sandbox credential, no handler)
// on first start and returns its key.
func ensureDemoTenant(ctx context.Context, databaseURL string, keys []tenants.MasterKey, stateFile string) (demoState, error) {
	var st demoState
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return st, err
	}
	defer pool.Close()
	vault, err := tenants.NewVault(pool, keys)
	if err != nil {
		return st, err
	}
	store := tenants.NewStore(pool, vault)
	withSecret := func(st demoState) (demoState, error) {
		t, err := store.BySlug(ctx, st.Tenant)
		if err != nil {
			return st, err
		}
		secret, err := store.HandlerSecret(ctx, t.ID)
		st.HandlerSecret = string(secret)
		return st, err
	}
	if b, err := os.ReadFile(stateFile); err == nil && json.Unmarshal(b, &st) == nil {
		if _, err := store.Authenticate(ctx, st.APIKey); err == nil {
			return withSecret(st)
		}
	}
	created, err := store.Create(ctx, tenants.CreateParams{Slug: "demo", Name: "Demo (sandbox)"})
	if errors.Is(err, tenants.ErrExists) {
		// The key file was lost: give the demo tenant a new key.
		key, _, err := store.CreateAPIKey(ctx, "demo")
		if err != nil {
			return st, err
		}
		st = demoState{Tenant: "demo", APIKey: key}
	} else if err != nil {
		return st, fmt.Errorf("create demo tenant: %w", err)
	} else {
		st = demoState{Tenant: "demo", APIKey: created.APIKey}
		secret, _ := randomHex()
		verify, _ := randomHex()
		cred, _ := json.Marshal(map[string]string{"phone_number_id": "100000000000001", "access_token": "sandbox-token", "app_secret": secret, "verify_token": verify})
		if err := vault.Put(ctx, nil, created.Tenant.ID, "whatsapp", cred); err != nil {
			return st, err
		}
	}
	b, _ := json.Marshal(st)
	if err := os.WriteFile(stateFile, b, 0o600); err != nil {
		return st, err
	}
	return withSecret(st)
}

// devSecret reads a secret ordo dev keeps in a file, making it on first use.
func devSecret(path string, make func() (string, error)) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	v, err := make()
	if err != nil {
		return "", err
	}
	return v, os.WriteFile(path, []byte(v+"\n"), 0o600)
}

func randomHex() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// redactURL drops a password from a database URL before it is printed.
func redactURL(u string) string {
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil || cfg.ConnConfig.Password == "" {
		return u
	}
	return strings.Replace(u, cfg.ConnConfig.Password, "****", 1)
}
