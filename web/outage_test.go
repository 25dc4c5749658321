package web_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/outage"
	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/web"
)

// Postgres goes away (a restart, a failover, a partition) under load, with
// clients that retry. Before, every runner's scheduler logged each failed
// read with no backoff — 32,926 lines in 10 s under ordo dev — and REST
// answered 500 without Retry-After, so clients hammered. Now the outage is
// a state: one line when it goes, REST 503 with Retry-After and nothing
// stored, /readyz 503, and work resumes when it is back.
func TestDatabaseAwayIsAStateNotAFlood(t *testing.T) {
	t.Parallel()
	var proxy *sqltest.Proxy
	watch := outage.NewWatch("postgres", outage.Config{}, nil)
	e := start(t, options{
		captureLogs: true,
		web:         web.Config{Database: watch},
		jobs: jobstest.Options{
			Config: jobs.Config{Database: watch},
			Through: func(url string) string {
				p, through := sqltest.NewProxy(t, url)
				proxy = p
				return through
			},
		},
	})
	mustStatus(t, "before the outage", e.post(t, e.APIKey, "/v1/messages", outbound("pg-1", "c1", "one")), http.StatusAccepted)
	e.WaitFor("the first send", 10*time.Second, func() bool { return len(e.WhatsApp.Sends()) == 1 })

	before := len(e.logs.String())
	proxy.Cut()
	for i := range 10 {
		a := e.post(t, e.APIKey, "/v1/messages", outbound("pg-away-"+string(rune('a'+i)), "c1", "lost?"))
		if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "5" || !strings.Contains(string(a.body), `"unavailable"`) {
			t.Fatalf("while Postgres is away: %s (Retry-After %q); want 503 unavailable with Retry-After 5", a, a.header.Get("Retry-After"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if a := e.call(t, request{method: http.MethodGet, path: "/readyz"}); a.status != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while Postgres is away: %s", a)
	}
	time.Sleep(2 * time.Second) // the workers' loops go on meanwhile
	var noise []string
	for _, l := range strings.Split(strings.TrimSpace(e.logs.String()[before:]), "\n") {
		if l == "" {
			continue
		}
		var rec struct{ Msg string }
		_ = json.Unmarshal([]byte(l), &rec)
		if rec.Msg != "http request" {
			noise = append(noise, rec.Msg)
		}
	}
	if len(noise) > 10 {
		t.Fatalf("%d log lines in 3 s of outage besides the access log; want a handful:\n%s", len(noise), strings.Join(noise, "\n"))
	}
	if !watch.Down() {
		t.Fatal("the watch does not know Postgres is away")
	}

	proxy.Restore()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := e.post(t, e.APIKey, "/v1/messages", outbound("pg-2", "c1", "two"))
		if a.status == http.StatusAccepted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after Postgres came back: %s", a)
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.WaitFor("the message accepted after the outage to be sent", 10*time.Second, func() bool { return len(e.WhatsApp.Sends()) == 2 })
	if n := e.Count(`SELECT count(*) FROM ordo.messages`); n != 2 {
		t.Fatalf("%d messages stored; want the two accepted (a 503 stores nothing)", n)
	}
	var sent []string
	for _, s := range e.WhatsApp.Sends() {
		sent = append(sent, s.Text)
	}
	if strings.Join(sent, "|") != "one|two" {
		t.Fatalf("sent %v; want one, two", sent)
	}
}
