package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/tenants"
)

const credentialUsage = "ordo credential set --tenant S --name whatsapp|handler_auth --from-file F|- | delete --tenant S --name whatsapp|handler_auth [--yes]"

// maxCredentialFile bounds what is read; the vault refuses more than 64 KiB.
const maxCredentialFile = 1 << 20

// credentialFields are the credentials an operator sets, by name, each with
// the fields it must have (a closed set: any other name is a typo, refused
// with this list). whatsapp's four are all used: sending needs the first
// two, Meta's webhook handshake and signatures the last two. handler_auth's
// shape is checked by the vault (tenants.ParseHandlerAuth).
var credentialFields = map[string][]string{
	"whatsapp":                    {"phone_number_id", "access_token", "app_secret", "verify_token"},
	tenants.HandlerAuthCredential: nil,
}

// credentialNames lists the valid names, sorted, for errors and help.
func credentialNames() string {
	names := make([]string, 0, len(credentialFields))
	for n := range credentialFields {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// checkCredentialName refuses a name outside the closed set.
func checkCredentialName(name string) error {
	if _, ok := credentialFields[name]; !ok {
		return fmt.Errorf("--name %q is not a credential ordo uses; valid names: %s", name, credentialNames())
	}
	return nil
}

// runCredential is `ordo credential set|delete`.
func runCredential(ctx context.Context, env *cli.Env, args []string) error {
	action, rest, err := subcommand(args, credentialUsage)
	if err != nil {
		return err
	}
	switch action {
	case "set":
		return credentialSet(ctx, env, rest)
	case "delete":
		return credentialDelete(ctx, env, rest)
	}
	return fmt.Errorf("unknown credential action %q; usage: %s", action, credentialUsage)
}

// credentialSet stores a JSON object encrypted. The value is never echoed,
// in output or in errors. A value that is refused leaves the stored one as
// it was.
func credentialSet(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo credential set")
	slug := fs.String("tenant", "", "the tenant's slug (required)")
	name := fs.String("name", "", "the credential: "+credentialNames()+" (required)")
	from := fs.String("from-file", "", "a file holding the credential as a JSON object, or - for stdin (required)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	for _, f := range [][2]string{{"tenant", *slug}, {"name", *name}, {"from-file", *from}} {
		if err := requireFlag(f[0], f[1]); err != nil {
			return err
		}
	}
	if err := checkCredentialName(*name); err != nil {
		return err
	}
	value, err := readCredential(env, *from)
	if err != nil {
		return err
	}
	if err := checkCredentialFields(*name, value); err != nil {
		return err
	}

	pool, store, vault, err := openStores(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	var t tenants.Tenant
	err = audited(ctx, env, pool, func(tx pgx.Tx) (engine.AuditEntry, error) {
		var err error
		if t, err = store.BySlugTx(ctx, tx, *slug); err != nil {
			return engine.AuditEntry{}, err
		}
		if err := vault.Put(ctx, tx, t.ID, *name, value); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "credential.set", Tenant: t.Slug, Details: auditDetails(map[string]string{"name": *name})}, nil
	})
	if err != nil {
		return err
	}
	return cli.PrintJSON(env.Stdout, struct {
		Tenant     string `json:"tenant"`
		Credential string `json:"credential"`
		KeyID      string `json:"key_id"`
	}{t.Slug, *name, vault.KeyID()})
}

// credentialDelete removes a tenant's credential: handler_auth (the
// handler is then called without auth) or whatsapp (the tenant's sending
// then pauses at its next send, under ordo serve).
func credentialDelete(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo credential delete")
	slug := fs.String("tenant", "", "the tenant's slug (required)")
	name := fs.String("name", "", "the credential: "+credentialNames()+" (required)")
	yes := fs.Bool("yes", false, "delete without asking (needed when not run on a terminal)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	for _, f := range [][2]string{{"tenant", *slug}, {"name", *name}} {
		if err := requireFlag(f[0], f[1]); err != nil {
			return err
		}
	}
	if err := checkCredentialName(*name); err != nil {
		return err
	}
	if err := cli.Confirm(env, *yes, fmt.Sprintf("deletes tenant %q's %s credential", *slug, *name)); err != nil {
		return err
	}
	pool, store, err := openTenantStore(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	err = audited(ctx, env, pool, func(tx pgx.Tx) (engine.AuditEntry, error) {
		t, err := store.BySlugTx(ctx, tx, *slug)
		if err != nil {
			return engine.AuditEntry{}, err
		}
		if err := tenants.DeleteCredential(ctx, tx, t.ID, *name); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "credential.delete", Tenant: t.Slug, Details: auditDetails(map[string]string{"name": *name})}, nil
	})
	if err != nil {
		return fmt.Errorf("tenant %q, credential %s: %w", *slug, *name, err)
	}
	return cli.PrintJSON(env.Stdout, struct {
		Tenant     string `json:"tenant"`
		Credential string `json:"credential"`
		Deleted    bool   `json:"deleted"`
	}{*slug, *name, true})
}

// readCredential reads the file, or stdin for "-".
func readCredential(env *cli.Env, from string) (json.RawMessage, error) {
	r := env.Stdin
	if r == nil {
		r = os.Stdin
	}
	if from != "-" {
		f, err := os.Open(from)
		if err != nil {
			return nil, fmt.Errorf("read credential: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxCredentialFile+1))
	if err != nil {
		return nil, fmt.Errorf("read credential: %w", err)
	}
	if len(b) > maxCredentialFile {
		return nil, fmt.Errorf("read credential: larger than %d bytes", maxCredentialFile)
	}
	return b, nil
}

// checkCredentialFields refuses a value that lacks a field its name needs
// (empty counts as missing). It names fields only, never a value.
func checkCredentialFields(name string, value json.RawMessage) error {
	want := credentialFields[name]
	if len(want) == 0 {
		return nil
	}
	var fields map[string]any
	if json.Unmarshal(value, &fields) != nil {
		return nil // the vault refuses it with a clear message
	}
	var missing []string
	for _, f := range want {
		if v, ok := fields[f].(string); !ok || strings.TrimSpace(v) == "" {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("a %s credential needs %s: %s missing or empty; nothing was stored (a credential already set is kept)",
			name, strings.Join(want, ", "), strings.Join(missing, ", "))
	}
	return nil
}
