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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// Console sizes: three tenants × consoleConvs conversations × consolePerConv
// inbound messages, every one dead-lettered by the failing handler (210).
const (
	consoleConvs   = 10
	consolePerConv = 7
)

// handlerCall is one call the tenants' handler received.
type handlerCall struct{ tenant, conversation, message string }

// The operator's console in a real browser, as issue 13's acceptance says:
// onboard a tenant from the page (credential set, key shown once), send
// messages, ~200 dead letters over three tenants from a failing handler,
// find a conversation by id and read its timeline, fix the handler,
// bulk-replay one tenant's dead letters (they finish in order, the others
// stay), pause and resume a tenant; every action is in the audit list.
// With ORDO_ADMIN_SCREENSHOTS=dir it writes the README's screenshots there.
func TestAdminConsoleInChromium(t *testing.T) {
	t.Parallel()
	needChromium(t)
	var (
		failing atomic.Bool
		mu      sync.Mutex
		calls   []handlerCall
	)
	failing.Store(true)
	handler := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Tenant         string `json:"tenant"`
			ConversationID string `json:"conversation_id"`
			MessageID      string `json:"message_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		w.Header().Set("Content-Type", "application/json")
		if failing.Load() {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"error":"workflow broken"}`))
			return
		}
		mu.Lock()
		calls = append(calls, handlerCall{in.Tenant, in.ConversationID, in.MessageID})
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"replies": []any{map[string]any{"type": "text", "text": map[string]string{"body": "re: " + in.MessageID}}}})
	}))
	defer handler.Close()

	e := start(t, options{web: web.Config{AdminPassword: adminPassword}, sandboxChannel: true, jobs: jobstest.Options{HandlerURL: handler.URL}})
	ctx := context.Background()
	skip, url := "skip", handler.URL
	if _, err := e.Tenants.Update(ctx, "acme", tenants.UpdateParams{OnDeadLetter: &skip}); err != nil {
		t.Fatal(err)
	}
	e.AddTenant("gamma", "1066", tenants.UpdateParams{OnDeadLetter: &skip, HandlerURL: &url})
	gammaKey, _, err := e.Tenants.CreateAPIKey(ctx, "gamma")
	if err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t)
	b.run("open /admin", 60*time.Second,
		chromedp.Navigate(e.URL+"/admin"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-loaded="true"]`)),
	)
	// The page asks before bulk actions and for a pause's reason: say yes,
	// and take the suggested reason.
	b.eval(`window.confirm = () => true; window.prompt = (m, d) => d; true`)

	// Onboard beta: the key and handler secret are shown once.
	b.run("create beta", 30*time.Second,
		chromedp.SetValue(chromedp.CSS(`#tenant-form input[name=slug]`), "beta"),
		chromedp.SetValue(chromedp.CSS(`#tenant-form input[name=name]`), "Beta Ltd"),
		chromedp.SetValue(chromedp.CSS(`#tenant-form input[name=handler_url]`), handler.URL),
		chromedp.Click(chromedp.CSS(`#tenant-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#secret-once`)),
		chromedp.WaitVisible(chromedp.CSS(`#tenant-detail[data-slug="beta"]`)),
	)
	betaKey := b.text("#once-key")
	if !strings.HasPrefix(betaKey, "ordo_") || len(b.text("#once-secret")) != 64 {
		t.Fatalf("the new tenant's key %q and secret are not shown", betaKey)
	}
	b.run("dismiss the key", 10*time.Second, chromedp.Click(chromedp.CSS(`#once-done`)), chromedp.WaitNotVisible(chromedp.CSS(`#secret-once`)))
	if html := b.html(); strings.Contains(html, betaKey) {
		t.Fatalf("the key stays on the page after it was dismissed")
	}
	const accessToken, appSecret, verifyToken = "EAAG-beta-access-token", "beta-app-secret-1", "beta-verify-token-1"
	b.run("set beta's credential", 30*time.Second,
		chromedp.SetValue(chromedp.CSS(`#cred-form input[name=phone_number_id]`), "1077"),
		chromedp.SetValue(chromedp.CSS(`#cred-form input[name=access_token]`), accessToken),
		chromedp.SetValue(chromedp.CSS(`#cred-form input[name=app_secret]`), appSecret),
		chromedp.SetValue(chromedp.CSS(`#cred-form input[name=verify_token]`), verifyToken),
		chromedp.Click(chromedp.CSS(`#cred-form button[type=submit]`)),
	)
	b.poll(`document.querySelector('#cred-state').innerText === 'set' && document.querySelector('#verify-state').innerText === 'set'`)
	if got := b.text("#webhook-url"); got != e.URL+"/webhooks/whatsapp/beta" {
		t.Errorf("webhook URL shown %q", got)
	}
	b.run("beta's policy", 30*time.Second,
		chromedp.SetValue(chromedp.CSS(`#settings-form select[name=on_dead_letter]`), "skip"),
		chromedp.SetValue(chromedp.CSS(`#settings-form input[name=max_attempts]`), "3"),
		chromedp.Click(chromedp.CSS(`#settings-form button[type=submit]`)),
	)
	b.poll(`(document.querySelector('#tenants tr[data-id="beta"]')?.innerText || '').includes('skip')`)
	b.shot("admin-tenant.png", "#tenant-detail")

	// Messages: 70 inbound per tenant, each dead-lettered by the handler.
	keys := map[string]string{"acme": e.APIKey, "beta": betaKey, "gamma": gammaKey}
	conv := func(tenant string, c int) string { return fmt.Sprintf("1555%c00%04d", tenant[0], c) }
	msgID := func(tenant string, c, m int) string { return fmt.Sprintf("%s-c%02d-m%02d", tenant, c, m) }
	for m := range consolePerConv {
		for c := range consoleConvs {
			for _, tenant := range []string{"acme", "beta", "gamma"} {
				body := map[string]any{"message_id": msgID(tenant, c, m), "conversation_id": conv(tenant, c), "direction": "inbound",
					"payload": map[string]any{"text": map[string]string{"body": "hi"}}}
				mustStatus(t, "post", e.post(t, keys[tenant], "/v1/messages", body), http.StatusAccepted)
			}
		}
	}
	total := 3 * consoleConvs * consolePerConv
	e.WaitFor("every message dead-lettered", 120*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.dead_letters WHERE resolved_at IS NULL`) == total
	})
	b.poll(fmt.Sprintf(`(document.querySelector('#tile-overall [data-tile="open dead letters"] b')?.innerText) === '%d'`, total))

	// Find a conversation by its id and read its timeline.
	target := conv("beta", 3)
	b.run("search", 30*time.Second,
		chromedp.SetValue(chromedp.CSS(`#search-form input[name=q]`), target),
		chromedp.Click(chromedp.CSS(`#search-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#search tbody tr[data-id="`+msgID("beta", 3, 6)+`"]`)),
		chromedp.Click(chromedp.CSS(`#search tbody tr[data-id="`+msgID("beta", 3, 0)+`"] a.conv`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline-messages li.msg[data-id="`+msgID("beta", 3, 6)+`"]`)),
	)
	// It opens at the head, every message of it passed (policy skip): the
	// earlier ones are one click away.
	if n := b.count(`#timeline-messages li.msg`); n != engine.TimelineBeforeHead {
		t.Errorf("the timeline opened with %d messages, want the last %d up to the head", n, engine.TimelineBeforeHead)
	}
	b.run("timeline from seq 1", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#timeline-start`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline-messages li.msg[data-id="`+msgID("beta", 3, 0)+`"]`)),
	)
	if n := b.count(`#timeline-messages li.msg`); n != consolePerConv {
		t.Errorf("the timeline shows %d messages, want %d", n, consolePerConv)
	}
	first := b.text(`#timeline-messages li.msg[data-id="` + msgID("beta", 3, 0) + `"]`)
	for _, want := range []string{"#1", "dead", "handler call", "failed", "422", "dead letter #", "open"} {
		if !strings.Contains(first, want) {
			t.Errorf("the timeline's first message %q does not show %q", first, want)
		}
	}
	if head := b.text("#timeline-head"); !strings.Contains(head, "last seq 7") {
		t.Errorf("timeline head %q", head)
	}
	b.shot("admin-timeline.png", "#timeline")

	// Fix the handler and replay beta's dead letters in bulk.
	failing.Store(false)
	b.run("filter beta's dead letters", 30*time.Second,
		chromedp.SetValue(chromedp.CSS(`#dl-form select[name=tenant]`), "beta"),
		chromedp.Click(chromedp.CSS(`#dl-form button[type=submit]`)),
	)
	perTenant := consoleConvs * consolePerConv
	b.poll(fmt.Sprintf(`document.querySelector('#dl-preview').innerText === '%d match'`, perTenant))
	b.shot("admin-dead-letters.png", "#dl-console")
	b.run("replay all", 120*time.Second,
		chromedp.Click(chromedp.CSS(`#dl-replay-all`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#dl-console[data-last-bulk="replay:%d"]`, perTenant))),
	)
	e.WaitFor("beta's messages done", 120*time.Second, func() bool {
		return e.Count(`SELECT count(*) FROM ordo.messages m JOIN ordo.tenants t ON t.id = m.tenant_id WHERE t.slug = 'beta' AND m.status <> 'done'`) == 0
	})
	mu.Lock()
	byConv := map[string][]string{}
	for _, c := range calls {
		if c.tenant != "beta" {
			t.Errorf("a handler call for %s, whose dead letters were not replayed: %+v", c.tenant, c)
		}
		byConv[c.conversation] = append(byConv[c.conversation], c.message)
	}
	mu.Unlock()
	for c := range consoleConvs {
		var want []string
		for m := range consolePerConv {
			want = append(want, msgID("beta", c, m))
		}
		if got := byConv[conv("beta", c)]; !slices.Equal(got, want) {
			t.Errorf("conversation %s ran %v after the replay, want %v", conv("beta", c), got, want)
		}
	}
	var sent []string
	rows, _ := e.Pool.Query(ctx, `SELECT body ->> 'to', body -> 'text' ->> 'body' FROM ordo.sandbox_sends WHERE phone_number_id = '1077' ORDER BY id`)
	sentBy := map[string][]string{}
	for rows.Next() {
		var to, text string
		if err := rows.Scan(&to, &text); err != nil {
			t.Fatal(err)
		}
		sentBy[to] = append(sentBy[to], text)
		sent = append(sent, text)
	}
	if len(sent) != perTenant {
		t.Errorf("beta's replies sent: %d, want %d", len(sent), perTenant)
	}
	for c := range consoleConvs {
		if got := sentBy[conv("beta", c)]; !slices.IsSorted(got) || len(got) != consolePerConv {
			t.Errorf("replies to %s went out as %v, not in order", conv("beta", c), got)
		}
	}
	if n := e.Count(`SELECT count(*) FROM ordo.dead_letters WHERE resolved_at IS NULL`); n != 2*perTenant {
		t.Errorf("open dead letters after beta's replay: %d, want acme's and gamma's %d", n, 2*perTenant)
	}
	b.poll(fmt.Sprintf(`(document.querySelector('#tiles tr[data-id="beta"]')?.innerText || '').split('\t')[2] === '%.1f'`, float64(perTenant)/15))
	if tile := b.text(`#tiles tr[data-id="beta"]`); strings.Contains(tile, "–") || !strings.HasSuffix(strings.TrimSpace(tile), "0") {
		t.Errorf("beta's tile after the replay %q: want its sends, their latency and no open dead letter", tile)
	}
	b.shot("admin-live.png", "#tiles")

	// Pause gamma from the page: its new message waits; resume: it goes out.
	b.run("pause gamma", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#tenants tr[data-id="gamma"] button.manage`)),
		chromedp.WaitVisible(chromedp.CSS(`#tenant-detail[data-slug="gamma"] #pause`)),
		chromedp.Click(chromedp.CSS(`#pause`)),
		chromedp.WaitVisible(chromedp.CSS(`#resume`)),
	)
	mustStatus(t, "post while paused", e.post(t, gammaKey, "/v1/messages", outbound("gamma-after-pause", "15559990001", "waits for the resume")), http.StatusAccepted)
	time.Sleep(time.Second)
	if n := e.Count(`SELECT count(*) FROM ordo.sandbox_sends WHERE body -> 'text' ->> 'body' = 'waits for the resume'`); n != 0 {
		t.Fatalf("a paused tenant's message went out")
	}
	b.run("resume gamma", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#resume`)),
		chromedp.WaitVisible(chromedp.CSS(`#pause`)),
	)
	e.waitStatus(t, gammaKey, "gamma-after-pause", "done")

	// Every action is in the page's audit list (loading more as needed).
	wantActions := []string{"tenant.create", "credential.set", "tenant.update", "dead_letter.replay", "dead_letters.bulk_replay", "tenant.pause", "tenant.resume"}
	b.poll(`!!document.querySelector('#audit tbody tr[data-action="tenant.resume"]')`)
	b.shot("admin-audit.png", "#audit")
	// The tenant filter narrows the list to one tenant's actions.
	b.run("audit of gamma", 10*time.Second, chromedp.SetValue(chromedp.CSS(`#audit-form select[name=tenant]`), "gamma"))
	b.eval(`document.querySelector('#audit-form select[name=tenant]').dispatchEvent(new Event('change', {bubbles: true})); true`)
	b.poll(`[...document.querySelectorAll('#audit tbody tr')].map(r => r.dataset.action).join() === 'tenant.resume,tenant.pause'`)
	b.run("audit of every tenant", 10*time.Second, chromedp.SetValue(chromedp.CSS(`#audit-form select[name=tenant]`), ""))
	b.eval(`document.querySelector('#audit-form select[name=tenant]').dispatchEvent(new Event('change', {bubbles: true})); true`)
	b.poll(`!!document.querySelector('#audit tbody tr[data-action="dead_letters.bulk_replay"]')`)
	for range 8 {
		if b.eval(`!!document.querySelector('#audit tbody tr[data-action="tenant.create"]')`) == "true" {
			break
		}
		n := b.count(`#audit tbody tr`)
		b.run("load more audit", 10*time.Second, chromedp.Click(chromedp.CSS(`#audit-more`)))
		b.poll(fmt.Sprintf(`document.querySelectorAll('#audit tbody tr').length > %d`, n))
	}
	for _, a := range wantActions {
		row := b.text(`#audit tbody tr[data-action="` + a + `"]`)
		if !strings.Contains(row, "admin:operator") {
			t.Errorf("audit list: %s: %q, want it done by admin:operator", a, row)
		}
	}
	if n := b.count(`#audit tbody tr[data-action="dead_letter.replay"]`); n != perTenant {
		t.Errorf("audit list: %d dead_letter.replay rows, want %d", n, perTenant)
	}

	html := b.html()
	for name, s := range map[string]string{"access token": accessToken, "app secret": appSecret, "verify token": verifyToken,
		"beta's key": betaKey, "gamma's key": gammaKey, "acme's key": e.APIKey, "admin password": adminPassword} {
		if strings.Contains(html, s) {
			t.Errorf("the page shows %s", name)
		}
	}
	b.done()
}

// browser is a headless Chromium on the admin page, with the admin
// password sent on every request.
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
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
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
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": basic("operator", adminPassword).Get("Authorization")},
	}); err != nil {
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

// shot saves a screenshot of one section, at 3/4 scale to keep it small.
func (b *browser) shot(name, selector string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.ScreenshotScale(chromedp.CSS(selector), 0.75))
	if err != nil {
		b.t.Fatalf("screenshot of %s: %v", selector, err)
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
	if p := b.problems(); len(p) > 0 {
		b.t.Errorf("the browser reported:\n%s", strings.Join(p, "\n"))
	}
}
