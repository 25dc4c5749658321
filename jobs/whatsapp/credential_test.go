package whatsapp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func secretCredential() Credential {
	return Credential{
		PhoneNumberID: "106540352242922",
		AccessToken:   "EAAG-secret-access-token",
		AppSecret:     "app-secret-value",
		VerifyToken:   "verify-token-value",
	}
}

func assertNoSecrets(t *testing.T, what, out string) {
	t.Helper()
	for _, secret := range []string{"EAAG-secret-access-token", "app-secret-value", "verify-token-value"} {
		if strings.Contains(out, secret) {
			t.Errorf("%s leaks %q: %s", what, secret, out)
		}
	}
	if !strings.Contains(out, "106540352242922") {
		t.Errorf("%s should still show the phone number id: %s", what, out)
	}
}

func TestCredentialNeverPrintsSecrets(t *testing.T) {
	t.Parallel()
	cred := secretCredential()
	type wrapper struct {
		Name string
		Cred Credential
		Ptr  *Credential
	}
	w := wrapper{Name: "acme", Cred: cred, Ptr: &cred}

	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		assertNoSecrets(t, format, fmt.Sprintf(format, cred))
		assertNoSecrets(t, format+" pointer", fmt.Sprintf(format, &cred))
		if format != "%x" && format != "%d" {
			assertNoSecrets(t, format+" nested", fmt.Sprintf(format, w))
		}
	}
	assertNoSecrets(t, "String", cred.String())
	assertNoSecrets(t, "GoString", cred.GoString())
	assertNoSecrets(t, "Sprint", fmt.Sprint(cred, []Credential{cred}, map[string]Credential{"k": cred}))
	assertNoSecrets(t, "error wrap", fmt.Errorf("load %v: boom", cred).Error())

	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var buf bytes.Buffer
		slog.New(h(&buf)).Info("credential loaded", "credential", cred, "ptr", &cred)
		assertNoSecrets(t, "slog "+name, buf.String())
		if !strings.Contains(buf.String(), redacted) {
			t.Errorf("slog %s should say the token is set: %s", name, buf.String())
		}
	}
}

func TestCredentialShowsWhichSecretsAreMissing(t *testing.T) {
	t.Parallel()
	got := fmt.Sprintf("%v", Credential{PhoneNumberID: "1", AccessToken: "t"})
	want := "{phone_number_id:1 access_token:[redacted] app_secret: verify_token:}"
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestCredentialJSONRoundTripKeepsSecrets(t *testing.T) {
	t.Parallel()
	// The vault stores the JSON form: it must keep the secrets.
	cred := secretCredential()
	b, err := json.Marshal(cred)
	if err != nil {
		t.Fatal(err)
	}
	var back Credential
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != cred {
		t.Fatalf("round trip lost data: %s", b)
	}
	if !strings.Contains(string(b), `"access_token":"EAAG-secret-access-token"`) {
		t.Fatalf("unexpected JSON field names: %s", b)
	}
}

func TestCredentialValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cred    Credential
		wantErr []string
	}{
		{"complete", secretCredential(), nil},
		{"send only", Credential{PhoneNumberID: "1", AccessToken: "t"}, nil},
		{"empty", Credential{}, []string{"phone_number_id: required", "access_token: required"}},
		{"blank token", Credential{PhoneNumberID: "1", AccessToken: "  "}, []string{"access_token: required"}},
		{"path in id", Credential{PhoneNumberID: "1/../2", AccessToken: "t"}, []string{"phone_number_id: must not contain"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cred.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want error containing %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
