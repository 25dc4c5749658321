package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/tenants"
)

// ordo serve refuses a short ORDO_ADMIN_PASSWORD at start, naming the
// variable and the minimum, before it touches the database.
func TestServeRefusesShortAdminPassword(t *testing.T) {
	t.Parallel()
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	env := &cli.Env{
		DatabaseURL: "postgres://nobody@127.0.0.1:1/none", MasterKeys: key.Format(), AdminPassword: "hunter2",
		Stdout: &bytes.Buffer{}, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler),
	}
	if code := run(context.Background(), env, []string{"serve"}); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if msg := stderr.String(); !strings.Contains(msg, "ORDO_ADMIN_PASSWORD") || !strings.Contains(msg, "at least 12") {
		t.Fatalf("stderr %q: want the variable and the minimum named", msg)
	}
}

// ORDO_TRUSTED_PROXIES takes addresses and CIDR prefixes; a malformed entry
// stops ordo serve at start, named, before it touches the database (a
// proxy silently not trusted would throttle every client as one).
func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"127.0.0.1", []string{"127.0.0.1/32"}},
		{" 10.1.2.3/8 , fd00::1/8,::1", []string{"10.0.0.0/8", "fd00::/8", "::1/128"}},
		{"::ffff:192.0.2.1", []string{"192.0.2.1/32"}},
	} {
		ps, err := cli.TrustedProxies(&cli.Env{TrustedProxies: tc.in})
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		var got []string
		for _, p := range ps {
			got = append(got, p.String())
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Fatalf("%q: %v, want %v", tc.in, got, tc.want)
		}
	}

	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	env := &cli.Env{
		DatabaseURL: "postgres://nobody@127.0.0.1:1/none", MasterKeys: key.Format(), TrustedProxies: "10.0.0.0/8,proxy.internal",
		Stdout: &bytes.Buffer{}, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler),
	}
	if code := run(context.Background(), env, []string{"serve"}); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if msg := stderr.String(); !strings.Contains(msg, "ORDO_TRUSTED_PROXIES") || !strings.Contains(msg, "proxy.internal") {
		t.Fatalf("stderr %q: want the variable and the entry named", msg)
	}
}
