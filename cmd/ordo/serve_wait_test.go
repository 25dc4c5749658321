package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/cmd/internal/proc"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/tenants"
)

// awayDatabase is a migrated database with a tenant (its API key) behind a
// proxy that is cut: Postgres not there yet, as at a reboot.
func awayDatabase(t *testing.T) (proxy *sqltest.Proxy, env []string, apiKey string, wa *whatsapptest.Server) {
	t.Helper()
	dbURL := sqltest.URL(t)
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cliEnv := &cli.Env{DatabaseURL: dbURL, MasterKeys: key.Format(), Stdout: &out, Stderr: &out, Logger: slog.New(slog.DiscardHandler)}
	if code := run(context.Background(), cliEnv, []string{"tenant", "create", "--slug", "acme"}); code != 0 {
		t.Fatalf("tenant create: exit %d: %s", code, out.String())
	}
	var created struct {
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &created); err != nil {
		t.Fatalf("tenant create printed %q: %v", out.String(), err)
	}
	credFile := filepath.Join(t.TempDir(), "cred.json")
	cred := `{"phone_number_id":"1000001","access_token":"token","app_secret":"secret","verify_token":"verify"}`
	if err := os.WriteFile(credFile, []byte(cred), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), cliEnv, []string{"credential", "set", "--tenant", "acme", "--name", "whatsapp", "--from-file", credFile}); code != 0 {
		t.Fatalf("credential set: exit %d: %s", code, out.String())
	}
	proxy, through := sqltest.NewProxy(t, dbURL)
	proxy.Cut()
	wa = whatsapptest.NewServer()
	t.Cleanup(wa.Close)
	env = []string{"DATABASE_URL=" + through, "ORDO_MASTER_KEYS=" + key.Format(), "ORDO_WHATSAPP_API_URL=" + wa.URL(), "ORDO_LOG_LEVEL=info"}
	return proxy, env, created.APIKey, wa
}

// postHello POSTs an outbound "hello" with message_id id to the API at
// base, as the tenant of apiKey, and returns the answer (its body read).
func postHello(t *testing.T, base, apiKey, id string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages",
		strings.NewReader(`{"message_id":"`+id+`","conversation_id":"16505551234","type":"text","text":{"body":"hello"}}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// waitSends waits up to a minute for n sends at wa, failing with what
// and p's log tail.
func waitSends(t *testing.T, p *proc.Proc, wa *whatsapptest.Server, n int, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := wa.WaitForSends(ctx, n); err != nil {
		t.Fatalf("%s: not sent: %v%s", what, err, p.LogTail())
	}
}

// status GETs url and returns its status code (0: no answer).
func status(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// logLines returns p's log lines whose message contains msg.
func logLines(t *testing.T, p *proc.Proc, msg string) []string {
	t.Helper()
	b, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(string(b), "\n") {
		var rec struct{ Msg string }
		if json.Unmarshal([]byte(l), &rec) == nil && strings.Contains(rec.Msg, msg) {
			got = append(got, l)
		}
	}
	return got
}

// ordo serve started before its database waits for it instead of
// exiting: /healthz 200 and /readyz 503 meanwhile, the API 503 with
// Retry-After, one log line when it starts waiting however long it waits;
// when Postgres is there, one line more, and it starts as usual — ready,
// accepting, sending.
func TestServeWaitsForPostgres(t *testing.T) {
	t.Parallel()
	proxy, env, apiKey, wa := awayDatabase(t)
	addr := freePort(t)
	p := startOrdo(t, "serve", addr, env)
	base := "http://" + addr

	waitGet(t, p, base+"/healthz", time.Minute)
	if s := status(base + "/readyz"); s != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while Postgres is away: %d, want 503%s", s, p.LogTail())
	}
	post := func(id string) *http.Response { return postHello(t, base, apiKey, id) }
	if resp := post("m-away"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("POST while Postgres is away: %s (Retry-After %q), want 503 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}
	// Several looks go by (the backoff starts at a quarter second): still
	// one line.
	time.Sleep(3 * time.Second)
	if got := logLines(t, p, "unreachable"); len(got) != 1 {
		t.Fatalf("%d lines saying Postgres is away after 3 s of waiting, want 1:\n%s", len(got), strings.Join(got, "\n"))
	}
	if got := logLines(t, p, "workers started"); len(got) != 0 {
		t.Fatalf("workers started without a database:\n%s", strings.Join(got, "\n"))
	}

	proxy.Restore()
	waitGet(t, p, base+"/readyz", time.Minute)
	if got := logLines(t, p, "postgres is back"); len(got) != 1 {
		t.Fatalf("%d lines saying Postgres is back, want 1%s", len(got), p.LogTail())
	}
	deadline := time.Now().Add(time.Minute)
	for len(logLines(t, p, "workers started")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no workers a minute after Postgres came back%s", p.LogTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if resp := post("m-1"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST after Postgres came back: %s", resp.Status)
	}
	waitSends(t, p, wa, 1, "the message accepted after the wait")
}

// SIGTERM while ordo serve waits for its database ends it at once, cleanly.
func TestServeStopsWhileWaitingForPostgres(t *testing.T) {
	t.Parallel()
	_, env, _, _ := awayDatabase(t)
	addr := freePort(t)
	p := startOrdo(t, "serve", addr, env)
	waitGet(t, p, "http://"+addr+"/healthz", time.Minute)
	if _, exitErr, ok := p.Term(20 * time.Second); !ok || exitErr != nil {
		t.Fatalf("SIGTERM while waiting: exit %v (running %v), want a clean exit before the grace ran out%s", exitErr, ok, p.LogTail())
	}
}

// A database that answers and refuses (no such database, a wrong
// password) is not waited for: waiting would not mend it. ordo serve
// exits at once and says why.
func TestServeExitsWhenTheDatabaseRefuses(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(sqltest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/no_such_database"
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	env := &cli.Env{
		DatabaseURL: u.String(), MasterKeys: key.Format(), Addr: freePort(t),
		Stdout: &bytes.Buffer{}, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler),
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code := run(ctx, env, []string{"serve"}); code != 1 || ctx.Err() != nil {
		t.Fatalf("exit %d (timed out: %v), want 1 at once", code, ctx.Err())
	}
	if msg := stderr.String(); !strings.Contains(msg, "no_such_database") {
		t.Fatalf("stderr %q: want the database named", msg)
	}
}
