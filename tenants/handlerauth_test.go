package tenants_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ordo-dev/ordo/tenants"
)

func TestParseHandlerAuth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw     string
		want    tenants.HandlerAuth
		problem string // part of the error; "" for none
	}{
		{raw: `{"header":"x-n8n-key","value":"s"}`, want: tenants.HandlerAuth{Header: "X-N8n-Key", Value: "s"}},
		{raw: `{"header":"Authorization","value":"Bearer s"}`, want: tenants.HandlerAuth{Header: "Authorization", Value: "Bearer s"}},
		{raw: `{"basic_user":"u","basic_password":"p"}`, want: tenants.HandlerAuth{BasicUser: "u", BasicPassword: "p"}},
		{raw: `{"header":"X-Key"}`, problem: "needs both"},
		{raw: `{"header":"X-Key","value":""}`, problem: "needs both"},
		{raw: `{"header":"X Key","value":"s"}`, problem: "not an HTTP header name"},
		{raw: `{"header":"X-Ordo-Signature","value":"s"}`, problem: "set by ordo"},
		{raw: `{"header":"Idempotency-Key","value":"s"}`, problem: "set by ordo"},
		{raw: `{"header":"X-Key","value":"a\nb"}`, problem: "one line"},
		{raw: `{"basic_user":"u:x","basic_password":"p"}`, problem: "':'"},
		{raw: `{"basic_password":"p"}`, problem: "needs both"},
		{raw: `{"header":"X-Key","value":"s","basic_user":"u","basic_password":"p"}`, problem: "not both"},
		{raw: `{"token":"s3cret"}`, problem: "want {"},
		{raw: `{}`, problem: "want {"},
	} {
		got, err := tenants.ParseHandlerAuth([]byte(tc.raw))
		if tc.problem == "" {
			if err != nil || got != tc.want {
				t.Errorf("%s: %v, %v; want %v", tc.raw, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.problem) {
			t.Errorf("%s: error %v; want it to say %q", tc.raw, err, tc.problem)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error quotes the secret: %v", tc.raw, err)
		}
	}
}

// Printing, logging or encoding a HandlerAuth never shows its secret.
func TestHandlerAuthNeverPrintsItsSecret(t *testing.T) {
	t.Parallel()
	for _, a := range []tenants.HandlerAuth{{Header: "X-Key", Value: "s3cret"}, {BasicUser: "u", BasicPassword: "s3cret"}} {
		var logs strings.Builder
		slog.New(slog.NewTextHandler(&logs, nil)).Info("auth", "auth", a, "ptr", &a)
		j, _ := json.Marshal(map[string]any{"a": a})
		for _, out := range []string{fmt.Sprint(a), fmt.Sprintf("%v %+v %#v %s", a, a, a, &a), logs.String(), string(j)} {
			if strings.Contains(out, "s3cret") {
				t.Fatalf("secret printed: %s", out)
			}
		}
		req := httptest.NewRequest("POST", "http://h/", nil)
		a.Apply(req)
		if u, p, ok := req.BasicAuth(); a.BasicUser != "" && (!ok || u != "u" || p != "s3cret") {
			t.Fatalf("basic auth not applied: %q %q", u, p)
		}
		if a.Header != "" && req.Header.Get("X-Key") != "s3cret" {
			t.Fatal("header auth not applied")
		}
	}
}

// The vault refuses a handler_auth it could not use, and the store reads one
// back (none when not set).
func TestHandlerAuthStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c := createTenant(t, b, "acme")
	if a, err := b.store.HandlerAuth(ctx, c.Tenant.ID); err != nil || a != nil {
		t.Fatalf("no auth set: %v, %v", a, err)
	}
	assertInvalid(t, b.vault.Put(ctx, nil, c.Tenant.ID, tenants.HandlerAuthCredential, []byte(`{"header":"X-Key"}`)), tenants.HandlerAuthCredential)
	if err := b.vault.Put(ctx, nil, c.Tenant.ID, tenants.HandlerAuthCredential, []byte(`{"header":"X-Key","value":"v"}`)); err != nil {
		t.Fatal(err)
	}
	a, err := b.store.HandlerAuth(ctx, c.Tenant.ID)
	if err != nil || a == nil || *a != (tenants.HandlerAuth{Header: "X-Key", Value: "v"}) {
		t.Fatalf("read back: %v, %v", a, err)
	}
}

// A handler URL with credentials in it is refused, pointing at handler_auth.
func TestHandlerURLWithUserinfoRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.store.Create(ctx, tenants.CreateParams{Slug: "acme", HandlerURL: "http://n8n:s3cret@n8n.example.com/webhook/x"})
	assertInvalid(t, err, "handler_url")
	if !strings.Contains(err.Error(), "--name handler_auth") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %q: want a pointer to handler_auth, and no password", err)
	}
	createTenant(t, b, "acme")
	_, err = b.store.Update(ctx, "acme", tenants.UpdateParams{HandlerURL: ptr("https://user@n8n.example.com/webhook/x")})
	assertInvalid(t, err, "handler_url")
	_, err = b.store.Update(ctx, "acme", tenants.UpdateParams{EventsURL: ptr("https://u:p@n8n.example.com/webhook/e")})
	assertInvalid(t, err, "events_url")
}

// A URL with credentials stored before they were refused is shown without
// its secret.
func TestTenantRedacted(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://n8n:s3cret@n8n.example.com/webhook/x": "https://n8n:xxxxx@n8n.example.com/webhook/x",
		"https://s3cret@n8n.example.com/webhook/x":     "https://xxxxx@n8n.example.com/webhook/x",
		"https://n8n.example.com/webhook/x":            "https://n8n.example.com/webhook/x",
		"":                                             "",
	} {
		got := tenants.Tenant{HandlerURL: in, EventsURL: in}.Redacted()
		if got.HandlerURL != want || got.EventsURL != want {
			t.Errorf("%q: %q, %q; want %q", in, got.HandlerURL, got.EventsURL, want)
		}
	}
}
