package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// chromiumPath is where Debian's chromium package puts the browser.
const chromiumPath = "/usr/bin/chromium"

// The console in a real browser at 1,280 px, as issue 28's acceptance
// says: operator olivia logs in, finds a message by an id prefix, opens
// its page, replays its dead letter (the handler fixed meanwhile: it goes
// out, and the dead letter shows resolved), bulk-replays the rest of her
// tenant's with the result left on the page, and logs out; viewer victor
// logs in, his Replay is refused (403) and the page says so; the audit
// lists both by name. Every page is screenshot (ORDO_ADMIN_SCREENSHOTS=dir
// writes them there) and none is wider than the window. Data that looks
// like HTML stays text, and no secret is on any page.
func TestAdminConsoleInChromium(t *testing.T) {
	t.Parallel()
	needChromium(t)
	var failing atomic.Bool
	failing.Store(true)
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			MessageID string `json:"message_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		w.Header().Set("Content-Type", "application/json")
		if failing.Load() {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"error":"workflow broken"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"replies": []any{map[string]any{"type": "text", "text": map[string]string{"body": "re: " + in.MessageID}}}})
	}))
	defer handler.Close()

	e := start(t, options{web: web.Config{AdminPassword: adminPassword}, sandboxChannel: true, jobs: jobstest.Options{HandlerURL: handler.URL}})
	ctx := context.Background()
	url := handler.URL
	e.AddTenant("beta", "1066", tenants.UpdateParams{HandlerURL: &url})
	betaKey, _, err := e.Tenants.CreateAPIKey(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	for name, role := range map[string]string{"olivia": engine.RoleOperator, "victor": engine.RoleViewer} {
		if _, err := e.Engine.AddOperator(ctx, name, role, name+"-password-1", engine.ActorCLI); err != nil {
			t.Fatal(err)
		}
	}
	inbound := func(key, id, conv string) {
		body := map[string]any{"message_id": id, "conversation_id": conv, "direction": "inbound",
			"payload": map[string]any{"from": conv, "text": map[string]string{"body": "where is my refund?"}}}
		mustStatus(t, "post "+id, e.post(t, key, "/v1/messages", body), http.StatusAccepted)
	}
	const target, htmlID = "wamid.refund-7781-a", `wamid.<img src=x onerror="document.title='pwned'">`
	ids := []string{target, "wamid.order-1001", "wamid.order-1002", "wamid.order-1003", htmlID}
	for i, id := range ids {
		inbound(e.APIKey, id, fmt.Sprintf("1555000%04d", i))
	}
	inbound(betaKey, "wamid.beta-5001", "15551110001")
	e.WaitFor("every message dead-lettered", 60*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.dead_letters WHERE resolved_at IS NULL`) == len(ids)+1
	})

	b := newBrowser(t)
	b.eval(`true`)
	b.run("open the console", 60*time.Second, chromedp.Navigate(e.URL+"/admin"), chromedp.WaitVisible(chromedp.CSS(`#login-form`)))
	b.shot("console-login.png")
	b.eval(`window.confirm = () => true; window.prompt = (m, d) => d; true`)
	login := func(name string) {
		password := name + "-password-1"
		if name == engine.BreakGlassOperator {
			password = adminPassword
		}
		b.run("log in "+name, 30*time.Second,
			chromedp.SetValue(chromedp.CSS(`#login-form input[name=name]`), name),
			chromedp.SetValue(chromedp.CSS(`#login-form input[name=password]`), password),
			chromedp.Click(chromedp.CSS(`#login-form button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`#app`)),
		)
		b.poll(`document.body.dataset.view !== "login" && document.body.dataset.loaded === "true"`)
	}
	logout := func() {
		b.run("log out", 30*time.Second, chromedp.Click(chromedp.CSS(`#logout`)), chromedp.WaitVisible(chromedp.CSS(`#login-form`)))
	}

	// Olivia finds the message by the start of its id, with "/".
	login("olivia")
	b.poll(fmt.Sprintf(`(document.querySelector('#tile-overall [data-tile="open dead letters"] b')?.innerText) === '%d'`, len(ids)+1))
	b.shot("console-overview.png")
	b.eval(`document.body.dispatchEvent(new KeyboardEvent('keydown', {key: '/', bubbles: true})); true`)
	if b.eval(`document.activeElement === document.querySelector('#quick-search input')`) != "true" {
		t.Errorf("/ does not focus the search")
	}
	b.run("search by prefix", 30*time.Second,
		chromedp.SetValue(chromedp.CSS(`#quick-search input`), "wamid.refund-77"),
	)
	b.eval(`document.querySelector('#quick-search').requestSubmit(); true`)
	b.run("search results", 30*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`.messages-table tr[data-id="`+target+`"]`)),
	)
	if n := b.count(`.messages-table tbody tr[data-id]`); n != 1 {
		t.Errorf("the prefix wamid.refund-77 found %d messages, want 1", n)
	}
	if got := b.eval(`location.hash`); !strings.Contains(got, "q=wamid.refund-77") {
		t.Errorf("the search's URL %s does not hold the query", got)
	}
	b.run("prefix that matches several", 30*time.Second, chromedp.Navigate(e.URL+"/admin#/messages?q=wamid.order-"),
		chromedp.WaitVisible(chromedp.CSS(`.messages-table tr[data-id="wamid.order-1003"]`)))
	if n := b.count(`.messages-table tbody tr[data-id]`); n != 3 {
		t.Errorf("the prefix wamid.order- found %d messages, want 3", n)
	}
	b.shot("console-messages.png")
	b.run("back to the target", 30*time.Second, chromedp.Navigate(e.URL+"/admin#/messages?q=wamid.refund-77"),
		chromedp.WaitVisible(chromedp.CSS(`.messages-table tr[data-id="`+target+`"] a.msg-link`)),
		chromedp.Click(chromedp.CSS(`.messages-table tr[data-id="`+target+`"] a.msg-link`)),
		chromedp.WaitVisible(chromedp.CSS(`#message .dead-open button.replay`)),
	)
	page := strings.ToLower(b.text("#message")) // headings are shown in capitals
	for _, want := range []string{target, "handler call", "failed", "422", "where is my refund?", "the handler's request", "dead letter #"} {
		if !strings.Contains(page, want) {
			t.Errorf("the message page does not show %q", want)
		}
	}

	// The handler is fixed; Olivia replays: the message goes out, the dead
	// letter shows resolved.
	failing.Store(false)
	b.run("replay", 30*time.Second, chromedp.Click(chromedp.CSS(`#message .dead-open button.replay`)),
		chromedp.WaitVisible(chromedp.CSS(`#message .dead-resolved`)))
	e.WaitFor("the replayed message done", 60*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = $1 AND status = 'done'`, target) == 1
	})
	// Route again (as a reload would) until the page shows it done.
	b.poll(`document.querySelector('#message[data-status="done"]') !== null || (window.dispatchEvent(new HashChangeEvent('hashchange')), false)`)
	if got := b.text(`#message .dead-resolved`); !strings.Contains(got, "replayed") {
		t.Errorf("the replayed dead letter shows %q", got)
	}
	if n := b.count(`#message .dead-open`); n != 0 {
		t.Errorf("%d dead letters still look open after the replay", n)
	}
	if got := b.text(`#steps`); !strings.Contains(got, "Send 1") || !strings.Contains(got, "Earlier failures") {
		t.Errorf("the steps after the replay: %q, want the send and the handler's failure as an earlier attempt", got)
	}
	b.shot("console-message.png")
	b.run("its conversation", 30*time.Second, chromedp.Click(chromedp.CSS(`#message dl.facts a.mono`)),
		chromedp.WaitVisible(chromedp.CSS(`#conversation tr[data-id="`+target+`"]`)))
	b.shot("console-conversation.png")

	// Bulk: the rest of acme's dead letters, the result stays on the page.
	b.run("acme's dead letters", 30*time.Second, chromedp.Navigate(e.URL+"/admin#/dead-letters?tenant=acme"),
		chromedp.WaitVisible(chromedp.CSS(`#dl-console #dl-replay-all`)))
	b.poll(fmt.Sprintf(`document.querySelector('#dl-preview')?.dataset.total === '%d'`, len(ids)-1))
	b.run("replay all", 60*time.Second, chromedp.Click(chromedp.CSS(`#dl-replay-all`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#dl-console[data-last-bulk="replay:%d"] #dl-result`, len(ids)-1))))
	if got := b.text("#dl-result"); !strings.Contains(got, fmt.Sprintf("%d replayed", len(ids)-1)) {
		t.Errorf("the bulk result shows %q", got)
	}
	b.run("resolved ones", 30*time.Second, chromedp.Navigate(e.URL+"/admin#/dead-letters?tenant=acme&state=all"),
		chromedp.WaitVisible(chromedp.CSS(`#dl-console tr.resolved`)))
	if !strings.Contains(b.text("#dl-result"), "replayed") {
		t.Errorf("the bulk result did not stay on the page")
	}
	b.shot("console-dead-letters.png")
	logout()

	// Victor, a viewer, pastes a link to beta's dead message: his Replay is
	// refused, and the page says so.
	login("victor")
	b.run("beta's message", 30*time.Second, chromedp.Navigate(e.URL+"/admin#/message/beta/wamid.beta-5001"),
		chromedp.WaitVisible(chromedp.CSS(`#message .dead-open button.replay`)),
		chromedp.Click(chromedp.CSS(`#message .dead-open button.replay`)),
		chromedp.WaitVisible(chromedp.CSS(`#error`)),
	)
	if got := b.text("#error"); !strings.Contains(got, "403") || !strings.Contains(got, "viewer") {
		t.Errorf("the viewer's refused replay shows %q, want the 403 and why", got)
	}
	if b.eval(`document.body.dataset.lastRefusal`) != `"403"` {
		t.Errorf("the refusal was not a 403")
	}
	if n := e.Count(`SELECT count(*) FROM ordo.dead_letters WHERE resolved_at IS NULL`); n != 1 {
		t.Errorf("open dead letters after the viewer's replay: %d, want beta's 1", n)
	}
	b.shot("console-refused.png")
	b.run("tenants", 30*time.Second, chromedp.Navigate(e.URL+"/admin#/tenants"), chromedp.WaitVisible(chromedp.CSS(`#tenants tr[data-id="beta"]`)))
	b.shot("console-tenants.png")
	b.run("acme", 30*time.Second, chromedp.Navigate(e.URL+"/admin#/tenant/acme"), chromedp.WaitVisible(chromedp.CSS(`#tenant-detail[data-slug="acme"] #settings-form`)))
	b.shot("console-tenant.png")
	b.run("audit", 30*time.Second, chromedp.Navigate(e.URL+"/admin#/audit"), chromedp.WaitVisible(chromedp.CSS(`#audit tr[data-action="dead_letters.bulk_replay"]`)))
	for name, action := range map[string]string{"olivia": "dead_letter.replay", "victor": "operator.login"} {
		if n := b.count(`#audit tr[data-actor="admin:` + name + `"][data-action="` + action + `"]`); n == 0 {
			t.Errorf("the audit does not list %s's %s", name, action)
		}
	}
	audit := b.text("#audit")
	if !strings.Contains(audit, "olivia") || !strings.Contains(audit, "victor") {
		t.Errorf("the audit does not name both operators")
	}
	b.shot("console-audit.png")
	b.run("olivia's actions", 30*time.Second, chromedp.Navigate(e.URL+"/admin#/audit?actor=admin:olivia"))
	// Only olivia's rows, once the filtered page replaced the unfiltered one.
	b.poll(`document.querySelector('#audit-form input[name=actor]')?.value === 'admin:olivia' &&
		[...document.querySelectorAll('#audit tr[data-actor]')].length > 0 &&
		[...document.querySelectorAll('#audit tr[data-actor]')].every(r => r.dataset.actor === 'admin:olivia')`)
	b.run("overview as a viewer", 30*time.Second, chromedp.Navigate(e.URL+"/admin#/overview"), chromedp.WaitVisible(chromedp.CSS(`#overview`)))
	logout()

	// The break-glass admin onboards a tenant (its key shown once), sets
	// its WhatsApp credential and its handler's Header Auth from the page.
	login(engine.BreakGlassOperator)
	b.run("onboard gamma", 30*time.Second, chromedp.Navigate(e.URL+"/admin#/tenants"),
		chromedp.WaitVisible(chromedp.CSS(`#tenant-form`)),
		chromedp.SetValue(chromedp.CSS(`#tenant-form input[name=slug]`), "gamma"),
		chromedp.SetValue(chromedp.CSS(`#tenant-form input[name=name]`), "Gamma Ltd"),
		chromedp.SetValue(chromedp.CSS(`#tenant-form input[name=handler_url]`), handler.URL),
	)
	b.eval(`document.querySelector('#tenant-form').requestSubmit(); true`)
	b.run("gamma's page", 30*time.Second, chromedp.WaitVisible(chromedp.CSS(`#tenant-detail[data-slug="gamma"] #secret-once`)))
	gammaKey := b.text(`#secret-once .once-key`)
	if !strings.HasPrefix(gammaKey, "ordo_") || len(b.text(`#secret-once .once-secret`)) != 64 {
		t.Fatalf("the new tenant's key %q and secret are not shown", gammaKey)
	}
	const accessToken, headerSecret = "EAAG-gamma-access-token", "gamma-n8n-header-secret"
	b.run("gamma's credential", 30*time.Second,
		chromedp.SetValue(chromedp.CSS(`#cred-form input[name=phone_number_id]`), "1077"),
		chromedp.SetValue(chromedp.CSS(`#cred-form input[name=access_token]`), accessToken),
		chromedp.SetValue(chromedp.CSS(`#cred-form input[name=app_secret]`), "gamma-app-secret"),
		chromedp.SetValue(chromedp.CSS(`#cred-form input[name=verify_token]`), "gamma-verify-token"),
	)
	b.eval(`document.querySelector('#cred-form').requestSubmit(); true`)
	b.poll(`document.querySelector('#cred-state')?.innerText === 'set'`)
	b.run("gamma's handler auth", 30*time.Second,
		chromedp.SetValue(chromedp.CSS(`#auth-form input[name=first]`), "X-N8N-Auth"),
		chromedp.SetValue(chromedp.CSS(`#auth-form input[name=second]`), headerSecret),
	)
	b.eval(`document.querySelector('#auth-form').requestSubmit(); true`)
	b.poll(`(document.querySelector('#auth-state')?.innerText || '').toLowerCase().includes('header x-n8n-auth')`)
	b.run("dismiss the key", 10*time.Second, chromedp.Click(chromedp.CSS(`#secret-once button`)))
	b.poll(`document.querySelector('#secret-once') === null`)
	b.shot("console-tenant-admin.png")
	if html := b.html(); strings.Contains(html, gammaKey) || strings.Contains(html, accessToken) || strings.Contains(html, headerSecret) {
		t.Errorf("a secret stays on gamma's page")
	}
	logout()

	if got := b.eval(`document.title`); strings.Contains(got, "pwned") {
		t.Errorf("a message id ran as HTML")
	}
	html := b.html()
	for name, s := range map[string]string{"beta's key": betaKey, "acme's key": e.APIKey, "admin password": adminPassword, "olivia's password": "olivia-password-1"} {
		if strings.Contains(html, s) {
			t.Errorf("the page shows %s", name)
		}
	}
	b.done()
}

// browser is a headless Chromium on the console, 1,280 px wide.
type browser struct {
	t       *testing.T
	ctx     context.Context
	mu      sync.Mutex
	console []string
	shots   string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	b := &browser{t: t, ctx: ctx, shots: os.Getenv("ORDO_ADMIN_SCREENSHOTS")}
	if b.shots == "" {
		b.shots = t.TempDir()
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError || m.Source == "security" {
				b.mu.Lock()
				b.console = append(b.console, m.String())
				b.mu.Unlock()
			}
		}
	}()
	if _, err := chromedp.Run(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

func (b *browser) run(what string, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %s: %v (page errors: %v)", what, err, b.problems())
	}
}

// eval runs a script and returns its value as JSON text.
func (b *browser) eval(script string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](script))
	if err != nil {
		b.t.Fatalf("browser: %s: %v", script, err)
	}
	return string(v)
}

// text reads an element's visible text in one step in the page.
func (b *browser) text(selector string) string {
	b.t.Helper()
	q, _ := json.Marshal(selector)
	var s string
	_ = json.Unmarshal([]byte(b.eval(`document.querySelector(`+string(q)+`)?.innerText ?? ""`)), &s)
	return s
}

func (b *browser) count(selector string) int {
	b.t.Helper()
	q, _ := json.Marshal(selector)
	var n int
	_ = json.Unmarshal([]byte(b.eval(`document.querySelectorAll(`+string(q)+`).length`)), &n)
	return n
}

func (b *browser) html() string {
	b.t.Helper()
	var s string
	_ = json.Unmarshal([]byte(b.eval(`document.documentElement.outerHTML`)), &s)
	return s
}

// poll waits until a script is true in the page.
func (b *browser) poll(script string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](script,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(55*time.Second))); err != nil {
		b.t.Fatalf("browser: waiting for %s: %v (page errors: %v)", script, err, b.problems())
	}
}

// shot checks that the page is no wider than the 1,280 px window and
// saves a screenshot of the whole page.
func (b *browser) shot(name string) {
	b.t.Helper()
	b.poll(`document.body.dataset.loaded === "true"`)
	if w, _ := strconv.Atoi(b.eval(`Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)`)); w > 1280 {
		b.t.Errorf("%s: the page is %d px wide in a 1280 px window", name, w)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name), png, 0o644); err != nil {
		b.t.Errorf("write screenshot: %v", err)
	}
}

func (b *browser) problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.console)
}

// done fails the test on anything the page reported.
func (b *browser) done() {
	b.t.Helper()
	// The viewer's refused replay is a 403 the page expects.
	p := slices.DeleteFunc(b.problems(), func(m string) bool { return strings.Contains(m, "status of 403") })
	if len(p) > 0 {
		b.t.Errorf("the browser reported:\n%s", strings.Join(p, "\n"))
	}
}
