package web_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/web"
)

const adminPassword = "correct horse battery staple"

// basic is an Authorization header value for the admin page.
func basic(user, password string) http.Header {
	h := http.Header{}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+password)))
	return h
}

// withHeader adds k: v to h (a copy).
func withHeader(h http.Header, k, v string) http.Header {
	if h = h.Clone(); h == nil {
		h = http.Header{}
	}
	h.Set(k, v)
	return h
}

// deadLetter posts an outbound message that the fake Cloud API refuses for
// good (131026) and returns its dead letter's id once it is there.
func (e *env) deadLetter(t *testing.T, messageID, conv string) string {
	t.Helper()
	mustStatus(t, "post "+messageID, e.post(t, e.APIKey, "/v1/messages", outbound(messageID, conv, "fail "+messageID)), http.StatusAccepted)
	e.waitStatus(t, e.APIKey, messageID, "dead")
	var id string
	if err := e.Pool.QueryRow(context.Background(),
		`SELECT d.id::text FROM ordo.dead_letters d JOIN ordo.messages m ON m.id = d.message_pk WHERE m.message_id = $1`, messageID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func failPrefixed(req whatsapptest.Send, n int) whatsapptest.Response {
	if strings.HasPrefix(req.Text, "fail") {
		return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131026}
	}
	return whatsapptest.Default(req, n)
}

// Without a password there is no admin page at all: 404, saying how to
// turn it on (the page for a browser, the error's message for the API).
func TestAdminDisabledWithoutPassword(t *testing.T) {
	t.Parallel()
	e := start(t, options{})
	for _, r := range []request{
		{method: http.MethodGet, path: "/admin/api/overview", header: basic("admin", "")},
		{method: http.MethodPost, path: "/admin/api/dead-letters/1/replay", header: withHeader(basic("admin", ""), "X-Ordo-Admin", "1")},
	} {
		a := e.call(t, r)
		mustError(t, r.method+" "+r.path, a, http.StatusNotFound, "not_found")
		if !strings.Contains(string(a.body), "ORDO_ADMIN_PASSWORD") {
			t.Errorf("%s %s: %s; want it to say how to turn the admin page on", r.method, r.path, a.body)
		}
	}
	for _, r := range []request{
		{method: http.MethodGet, path: "/admin"},
		{method: http.MethodGet, path: "/admin/", header: basic("admin", "")},
	} {
		a := e.call(t, r)
		if a.status != http.StatusNotFound || !strings.Contains(string(a.body), "ORDO_ADMIN_PASSWORD") || strings.Contains(string(a.body), "<script") {
			t.Errorf("GET %s with no admin password: %s; want 404 and a page naming ORDO_ADMIN_PASSWORD", r.path, a)
		}
	}
}

// Every admin path asks for the password first; writes also need the page's
// anti-CSRF header and a same-host origin; answers carry no secret.
func TestAdminAuthCSRFAndSecrets(t *testing.T) {
	t.Parallel()
	e := start(t, options{web: web.Config{AdminPassword: adminPassword}, jobs: jobstest.Options{HandlerURL: "https://n8n.example/webhook/0b9c-secret-path"}})
	e.WhatsApp.SetResponder(failPrefixed)
	dl := e.deadLetter(t, "adm-1", "c1")

	for name, h := range map[string]http.Header{
		"no credentials": nil,
		"wrong password": basic("admin", "wrong"),
		"empty password": basic("admin", ""),
		"password + 1":   basic("admin", adminPassword+"x"),
		"tenant API key": {"Authorization": {"Bearer " + e.APIKey}},
	} {
		for _, path := range []string{"/admin", "/admin/api/overview", "/admin/no-such-page"} {
			a := e.call(t, request{method: http.MethodGet, path: path, header: h})
			mustError(t, name+" "+path, a, http.StatusUnauthorized, "unauthorized")
			if got := a.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Basic ") {
				t.Errorf("%s %s: WWW-Authenticate %q, want a Basic challenge", name, path, got)
			}
		}
		a := e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/" + dl + "/replay", header: withHeader(h, "X-Ordo-Admin", "1")})
		mustError(t, name+" replay", a, http.StatusUnauthorized, "unauthorized")
	}

	auth := basic("any-user-name", adminPassword)
	page := e.call(t, request{method: http.MethodGet, path: "/admin", header: auth})
	mustStatus(t, "admin page", page, http.StatusOK)
	if ct := page.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("admin page Content-Type %q", ct)
	}
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("admin page CSP %q: want own scripts only and no framing", csp)
	}
	for _, asset := range []string{"/admin/admin.js", "/admin/admin.css", "/admin/favicon.svg"} {
		mustStatus(t, asset, e.call(t, request{method: http.MethodGet, path: asset, header: auth}), http.StatusOK)
	}
	mustError(t, "unknown admin path", e.call(t, request{method: http.MethodGet, path: "/admin/no-such-page", header: auth}), 404, "not_found")
	mustError(t, "GET on a write", e.call(t, request{method: http.MethodGet, path: "/admin/api/dead-letters/" + dl + "/replay", header: auth}), 405, "method_not_allowed")

	// Forged writes: a form post from another site cannot set the header; a
	// script there that does carries its own Origin.
	for name, h := range map[string]http.Header{
		"without the header":  auth,
		"with a wrong header": withHeader(auth, "X-Ordo-Admin", "yes"),
		"from another origin": withHeader(withHeader(auth, "X-Ordo-Admin", "1"), "Origin", "https://evil.example"),
		"from a null origin":  withHeader(withHeader(auth, "X-Ordo-Admin", "1"), "Origin", "null"),
	} {
		for _, action := range []string{"replay", "skip"} {
			a := e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/" + dl + "/" + action, header: h, contentType: "application/x-www-form-urlencoded", body: "x=1"})
			mustError(t, action+" "+name, a, http.StatusForbidden, "forbidden")
		}
	}
	if n := e.Count(`SELECT count(*) FROM ordo.dead_letters WHERE resolved_at IS NULL`); n != 1 {
		t.Fatalf("a forged write resolved the dead letter (%d open)", n)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.audit_log`); n != 0 {
		t.Fatalf("refused writes left %d audit entries", n)
	}

	// The page's own write works, across tenants, once.
	write := withHeader(withHeader(auth, "X-Ordo-Admin", "1"), "Origin", e.URL)
	a := e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/" + dl + "/skip", header: write})
	mustStatus(t, "skip", a, http.StatusOK)
	if d := decode[engine.DeadLetter](t, a); d.Resolution != "skipped" || d.Tenant != "acme" || (len(d.Payload) != 0 && string(d.Payload) != "null") {
		t.Errorf("skip answered %s; want skipped, without the payload", a)
	}
	if n := e.Count(`SELECT count(*) FROM ordo.audit_log WHERE actor = 'admin:any-user-name' AND action = 'dead_letter.skip'
		AND dead_letter_id = $1::bigint AND tenant = 'acme' AND conversation_id = 'c1' AND message_id = 'adm-1'`, dl); n != 1 {
		t.Errorf("the skip left %d audit entries naming the operator, the tenant, the conversation and the message; want 1", n)
	}
	mustError(t, "second skip", e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/" + dl + "/skip", header: write}), 409, "conflict")
	mustError(t, "unknown dead letter", e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/999999/replay", header: write}), 404, "not_found")
	mustError(t, "malformed id", e.call(t, request{method: http.MethodPost, path: "/admin/api/dead-letters/1%27/replay", header: write}), 404, "not_found")
	if m := decode[engine.Message](t, e.get(t, e.APIKey, "/v1/messages/adm-1")); m.Status != "skipped" {
		t.Errorf("adm-1 after the admin's skip: %s", m.Status)
	}

	// The overview shows tenants' settings, not their secrets.
	mustStatus(t, "post", e.post(t, e.APIKey, "/v1/messages", outbound("adm-2", "c2", "body-visible-to-operator")), http.StatusAccepted)
	e.waitStatus(t, e.APIKey, "adm-2", "done")
	a = e.call(t, request{method: http.MethodGet, path: "/admin/api/overview", header: auth})
	mustStatus(t, "overview", a, http.StatusOK)
	o := decode[engine.AdminOverview](t, a)
	if len(o.Tenants) != 1 || o.Tenants[0].Slug != "acme" || !o.Tenants[0].HandlerURLSet || strings.Join(o.Tenants[0].Credentials, ",") != "handler,whatsapp" ||
		o.Tenants[0].SendRate != 80 || o.Tenants[0].SendingPausedAt != nil {
		t.Errorf("overview tenants: %+v", o.Tenants)
	}
	if len(o.Messages) != 2 || o.Messages[0].MessageID != "adm-2" || o.Messages[0].Status != "done" || o.Messages[0].SendsDone != 1 {
		t.Errorf("overview messages: %+v", o.Messages)
	}
	if len(o.DeadLetters) != 1 || o.DeadLetters[0].Resolution != "skipped" || o.DeadLetters[0].MessageStatus != "skipped" {
		t.Errorf("overview dead letters: %+v", o.DeadLetters)
	}
	if _, err := e.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = 'account locked (131031)'`); err != nil {
		t.Fatal(err)
	}
	paused := decode[engine.AdminOverview](t, e.call(t, request{method: http.MethodGet, path: "/admin/api/overview", header: auth}))
	if paused.Tenants[0].SendingPausedAt == nil || paused.Tenants[0].SendingPausedReason != "account locked (131031)" {
		t.Errorf("a paused tenant shows as %+v", paused.Tenants[0])
	}
	if o.Sandbox || o.SandboxSends != nil {
		t.Errorf("overview shows the sandbox while it is off")
	}
	for name, s := range map[string]string{
		"access token": jobstest.AccessToken, "app secret": "app-secret-x", "verify token": "verify-x",
		"API key": e.APIKey, "handler secret": e.Secret, "handler URL": "0b9c-secret-path",
	} {
		if strings.Contains(string(a.body), s) {
			t.Errorf("the overview shows the %s", name)
		}
	}
}

// Conversations needing attention: halted first, then by backlog.
func TestAdminAttentionOrder(t *testing.T) {
	t.Parallel()
	e := start(t, options{web: web.Config{AdminPassword: adminPassword}})
	e.WhatsApp.SetResponder(failPrefixed)
	e.deadLetter(t, "halt-1", "halted-conv")
	// Backlogs without workers draining them: stop the runner first.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Runner.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for conv, n := range map[string]int{"small": 2, "big": 5} {
		for i := range n {
			e.Ingest(conv, conv+"-"+string(rune('a'+i)), "x")
		}
	}
	o := decode[engine.AdminOverview](t, e.call(t, request{method: http.MethodGet, path: "/admin/api/overview", header: basic("", adminPassword)}))
	var got []string
	for _, c := range o.Attention {
		got = append(got, c.ConversationID)
	}
	if strings.Join(got, ",") != "halted-conv,big,small" || o.Attention[1].Backlog != 5 || o.Attention[0].HaltedAt == nil {
		t.Errorf("attention: %+v, want halted-conv, then big (5), then small (2)", o.Attention)
	}
}

// chromiumPath is where Debian's chromium package puts the browser.
const chromiumPath = "/usr/bin/chromium"

// needChromium skips a browser test when Chromium is missing, except in CI
// (CI=set), where a missing browser is a failure. `make test` installs it
// first on a Debian machine (.ci/deps), so a skip means that could not.
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		msg := fmt.Sprintf("this test drives a real browser and needs %s: install it with `apt-get update && apt-get install -y chromium` (make test does when it can): %v", chromiumPath, err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// The admin page in a real browser: the operator sees the dead letter and
// what the sandbox sent, clicks Replay, and the message goes out and shows
// resolved. Data that looks like HTML stays text, and no secret is on the page.
func TestAdminPageInChromium(t *testing.T) {
	t.Parallel()
	needChromium(t)

	// The workers send through the server's own sandbox channel; in front of
	// it, this wrapper refuses one recipient for good while failing is set.
	const deadConv, sentConv, htmlConv = "15550000001", "15550000002", "15550000003"
	var failing atomic.Bool
	failing.Store(true)
	refuse := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/sandbox/") && r.Method == http.MethodPost {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				var m struct{ To string }
				if json.Unmarshal(body, &m) == nil && m.To == deadConv && failing.Load() {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusBadRequest)
					_, _ = io.WriteString(w, `{"error":{"code":131026,"message":"Message undeliverable","type":"OAuthException"}}`)
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
	e := start(t, options{web: web.Config{AdminPassword: adminPassword}, sandboxChannel: true, wrap: refuse})
	key := e.APIKey
	mustStatus(t, "post", e.post(t, key, "/v1/messages", outbound("m-dead", deadConv, "This one bounces at first")), http.StatusAccepted)
	mustStatus(t, "post", e.post(t, key, "/v1/messages", outbound("m-sent", sentConv, "Hello from the sandbox")), http.StatusAccepted)
	const htmlID, htmlText = `<img src=x onerror="document.title='pwned'">`, `<b>bold?</b><script>document.title='pwned'</script>`
	mustStatus(t, "post", e.post(t, key, "/v1/messages", outbound(htmlID, htmlConv, htmlText)), http.StatusAccepted)
	e.waitStatus(t, key, "m-dead", "dead")
	e.waitStatus(t, key, "m-sent", "done")
	e.waitStatus(t, key, htmlID, "done")
	var dl string
	if err := e.Pool.QueryRow(context.Background(), `SELECT id::text FROM ordo.dead_letters`).Scan(&dl); err != nil {
		t.Fatal(err)
	}

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1100),
	)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	// Uncaught exceptions, console errors and CSP violations fail the test.
	var consoleMu sync.Mutex
	var problems []string
	messages := chromedp.Console(browser)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError || m.Source == "security" {
				consoleMu.Lock()
				problems = append(problems, m.String())
				consoleMu.Unlock()
			}
		}
	}()
	run := func(what string, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, timeout)
		defer cancel()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	// text reads an element's visible text in one step in the page, so a
	// refresh between finding the node and reading it cannot get in the way.
	text := func(selector string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 10*time.Second)
		defer cancel()
		q, _ := json.Marshal(selector)
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(`+string(q)+`)?.innerText ?? ""`))
		if err != nil {
			t.Fatalf("browser: text of %s: %v", selector, err)
		}
		return s
	}
	// The first Run starts the browser: no timeout on it (see chromedp.Run).
	if _, err := chromedp.Call(browser, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": basic("operator", adminPassword).Get("Authorization")},
	}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	deadRow := `#dead-letters tr[data-id="` + dl + `"]`
	run("open /admin", 30*time.Second,
		chromedp.Navigate(e.URL+"/admin"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-loaded="true"]`)),
		chromedp.WaitVisible(chromedp.CSS(deadRow+` button.replay`)),
		chromedp.WaitVisible(chromedp.CSS(`#sandbox`)),
	)
	row := text(deadRow)
	for _, want := range []string{"m-dead", deadConv, "131026", "open"} {
		if !strings.Contains(row, want) {
			t.Errorf("dead-letter row %q does not show %q", row, want)
		}
	}
	if sends := text("#sandbox tbody"); !strings.Contains(sends, "Hello from the sandbox") || !strings.Contains(sends, sentConv) {
		t.Errorf("sandbox sends %q do not show m-sent", sends)
	}
	if msgs := text("#messages tbody"); !strings.Contains(msgs, "m-sent") || !strings.Contains(msgs, "m-dead") {
		t.Errorf("recent messages %q do not show m-sent and m-dead", msgs)
	}
	if att := text("#attention tbody"); !strings.Contains(att, deadConv) || !strings.Contains(att, "halted") {
		t.Errorf("attention %q does not show the halted conversation", att)
	}
	if tenants := text("#tenants tbody"); !strings.Contains(tenants, "acme") || !strings.Contains(tenants, "whatsapp") {
		t.Errorf("tenants %q do not show acme and its credential", tenants)
	}

	shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(os.TempDir(), "admin-before-replay.png"), shot, 0o644); err != nil {
		t.Logf("write screenshot: %v", err)
	}

	// Replay: the message goes out through the sandbox and the row turns resolved.
	failing.Store(false)
	run("click Replay", 30*time.Second,
		chromedp.Click(chromedp.CSS(deadRow+` button.replay`)),
		chromedp.WaitNotPresent(chromedp.CSS(deadRow+` button.replay`)),
	)
	e.waitStatus(t, key, "m-dead", "done")
	if n := e.Count(`SELECT count(*) FROM ordo.sandbox_sends WHERE body -> 'text' ->> 'body' = 'This one bounces at first'`); n != 1 {
		t.Errorf("the replayed message reached the sandbox %d times, want once", n)
	}
	if d := decode[engine.DeadLetter](t, e.get(t, key, "/v1/dead-letters/"+dl)); d.Resolution != "replayed" {
		t.Errorf("dead letter after the click: %+v", d)
	}
	waitCtx, cancelWait := context.WithTimeout(browser, 30*time.Second)
	defer cancelWait()
	if _, err := chromedp.Run(waitCtx, chromedp.Poll[bool](
		`(document.querySelector('`+deadRow+`')?.innerText || '').includes('message done')`,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(25*time.Second))); err != nil {
		t.Fatalf("browser: the dead-letter row never showed its message done: %v", err)
	}
	if row := text(deadRow); !strings.Contains(row, "replayed") {
		t.Errorf("dead-letter row after Replay: %q, want it shown replayed", row)
	}
	if sends := text("#sandbox tbody"); !strings.Contains(sends, "This one bounces at first") {
		t.Errorf("sandbox sends after Replay %q do not show the replayed message", sends)
	}

	// What looked like HTML is shown as text and ran nothing.
	ctx, cancel := context.WithTimeout(browser, 10*time.Second)
	defer cancel()
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil || title != "ordo admin" {
		t.Errorf("page title %q (%v): injected markup ran", title, err)
	}
	html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text("#messages tbody"), htmlID) || !strings.Contains(text("#sandbox tbody"), htmlText) {
		t.Errorf("HTML-looking data is not shown verbatim as text")
	}
	if strings.Contains(html, "<img") || strings.Contains(html, "<b>bold") {
		t.Errorf("HTML-looking data became markup")
	}
	for name, s := range map[string]string{
		"access token": jobstest.AccessToken, "app secret": "app-secret-x", "verify token": "verify-x",
		"API key": key, "handler secret": e.Secret, "admin password": adminPassword,
	} {
		if strings.Contains(html, s) {
			t.Errorf("the page shows the %s", name)
		}
	}

	shot, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(os.TempDir(), "admin.png"), shot, 0o644); err != nil {
		t.Logf("write screenshot: %v", err)
	}
	consoleMu.Lock()
	defer consoleMu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the browser reported:\n%s", strings.Join(problems, "\n"))
	}
}
