package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/tenants"
)

// `ordo tenant create|update` refuses handler and events URLs the outbound
// address policy refuses (link-local, metadata, odd IPv4 spellings, the
// operator's ORDO_OUTBOUND_DENY), exits non-zero and stores nothing; a
// loopback handler is accepted, and ORDO_OUTBOUND_ALLOW makes exceptions.
// (main: 169.254.169.254, metadata.google.internal and 2130706433 stored.)
func TestTenantURLsOutboundPolicy(t *testing.T) {
	t.Parallel()
	url := sqltest.URL(t)
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ordo := func(deny, allow string, args ...string) (int, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		env := &cli.Env{DatabaseURL: url, MasterKeys: key.Format(), OutboundDeny: deny, OutboundAllow: allow,
			Stdout: &stdout, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler)}
		code := run(ctx, env, args)
		return code, stdout.String() + stderr.String()
	}
	const loopback = "http://127.0.0.1:5678/webhook/omega"
	if code, out := ordo("", "", "tenant", "create", "--slug", "omega", "--handler-url", loopback); code != 0 {
		t.Fatalf("create with a loopback handler: exit %d: %s", code, out)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	state := func() string {
		var h, e string
		var audits, tenantsN int
		if err := pool.QueryRow(ctx, `SELECT coalesce(handler_url, ''), coalesce(events_url, ''),
		        (SELECT count(*) FROM ordo.audit_log), (SELECT count(*) FROM ordo.tenants)
		   FROM ordo.tenants WHERE slug = 'omega'`).Scan(&h, &e, &audits, &tenantsN); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("handler_url=%q events_url=%q audit entries=%d tenants=%d", h, e, audits, tenantsN)
	}
	before := state()
	for _, tc := range []struct{ deny, flag, url string }{
		{"", "--handler-url", "http://169.254.169.254/latest/meta-data/iam/security-credentials/"},
		{"", "--events-url", "http://169.254.169.254/latest/meta-data/"},
		{"", "--handler-url", "http://[fe80::1]/"},
		{"", "--events-url", "http://[fe80::1]/"},
		{"", "--handler-url", "http://metadata.google.internal/computeMetadata/v1/"},
		{"", "--handler-url", "http://2130706433:5432/"},
		{"", "--handler-url", "http://0x7f.1/"},
		{"", "--handler-url", "http://0.0.0.0:5432/"},
		{"10.0.0.0/8", "--handler-url", "http://10.1.2.3/hook"},
	} {
		code, out := ordo(tc.deny, "", "tenant", "update", "--slug", "omega", tc.flag, tc.url)
		if code == 0 {
			t.Errorf("tenant update %s %s: exit 0, want non-zero", tc.flag, tc.url)
		}
		if field := strings.ReplaceAll(strings.TrimPrefix(tc.flag, "--"), "-", "_"); !strings.Contains(out, field) {
			t.Errorf("tenant update %s %s said %q: want it to name %s", tc.flag, tc.url, out, field)
		}
		if after := state(); after != before {
			t.Fatalf("tenant update %s %s stored something: %q, was %q", tc.flag, tc.url, after, before)
		}
	}
	if code, out := ordo("", "", "tenant", "create", "--slug", "metadata-seeker", "--handler-url", "http://169.254.169.254/"); code == 0 {
		t.Fatalf("tenant create with a link-local handler: exit 0: %s", out)
	}
	if after := state(); after != before {
		t.Fatalf("a refused create stored something: %q, was %q", after, before)
	}
	if code, out := ordo("", "169.254.10.0/24", "tenant", "update", "--slug", "omega", "--handler-url", "http://169.254.10.7/hook"); code != 0 {
		t.Fatalf("an address the operator allows: exit %d: %s", code, out)
	}
	if code, out := ordo("nonsense", "", "tenant", "update", "--slug", "omega", "--handler-url", loopback); code == 0 || !strings.Contains(out, "ORDO_OUTBOUND_DENY") {
		t.Fatalf("a malformed ORDO_OUTBOUND_DENY: exit %d: %s", code, out)
	}
}
