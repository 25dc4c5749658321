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

const credentialUsage = "ordo credential set --tenant S --name whatsapp|handler_auth --from-file F|-"

// maxCredentialFile bounds what is read; the vault refuses more than 64 KiB.
const maxCredentialFile = 1 << 20

// expectedFields are the fields each well-known credential is read for;
// a missing one is warned about, not refused, as it may be set on purpose.
var expectedFields = map[string][]string{
	"whatsapp": {"phone_number_id", "access_token", "app_secret", "verify_token"},
}

// runCredential is `ordo credential set`.
func runCredential(ctx context.Context, env *cli.Env, args []string) error {
	action, rest, err := subcommand(args, credentialUsage)
	if err != nil {
		return err
	}
	if action != "set" {
		return fmt.Errorf("unknown credential action %q; usage: %s", action, credentialUsage)
	}
	return credentialSet(ctx, env, rest)
}

// credentialSet stores a JSON object encrypted. The value is never echoed,
// in output or in errors.
func credentialSet(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo credential set")
	slug := fs.String("tenant", "", "the tenant's slug (required)")
	name := fs.String("name", "", "the credential's name, e.g. whatsapp (required)")
	from := fs.String("from-file", "", "a file holding the credential as a JSON object, or - for stdin (required)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	for _, f := range [][2]string{{"tenant", *slug}, {"name", *name}, {"from-file", *from}} {
		if err := requireFlag(f[0], f[1]); err != nil {
			return err
		}
	}
	value, err := readCredential(*from)
	if err != nil {
		return err
	}
	warnMissingFields(env, *name, value)

	pool, store, vault, err := openStores(ctx, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	var t tenants.Tenant
	err = audited(ctx, pool, func(tx pgx.Tx) (engine.AuditEntry, error) {
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

// readCredential reads the file, or stdin for "-". Stdin is read from the
// process directly: cmd/ is where the process is touched.
func readCredential(from string) (json.RawMessage, error) {
	var r io.Reader = os.Stdin
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

// warnMissingFields names, on stderr, the expected fields the value lacks.
// It prints field names only.
func warnMissingFields(env *cli.Env, name string, value json.RawMessage) {
	want, ok := expectedFields[name]
	if !ok {
		return
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(value, &fields) != nil {
		return // the vault refuses it with a clear message
	}
	var missing []string
	for _, f := range want {
		if _, ok := fields[f]; !ok {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		fmt.Fprintf(env.Stderr, "ordo credential: warning: %s credential has no %s\n", name, strings.Join(missing, ", "))
	}
}
