//go:build n8ne2e

package n8ne2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/web/n8n"
)

func hmacHex(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// handlerHeader is the Header Auth n8n checks on ordo's calls.
const handlerHeader = "X-N8N-Key"

// e2eTenant is one tenant of the run and the workflows it uses.
type e2eTenant struct {
	slug, mode string
	n          int
	templates  []string
	handler    string // the template its handler_url points at
	authValue  string // what n8n's credential expects
	sentValue  string // what ordo is given to send (wrong for badauth)
	events     bool
	node       bool // its workflows use the ordo node (n8n-nodes-ordo)
	key        string
	secret     string // its handler secret
}

// TestN8N runs the shipped templates on a real n8n against a fresh ordo dev:
// the HTTP-Request ones, and the node-* ones with n8n-nodes-ordo installed
// from its packed tarball.
func TestN8N(t *testing.T) {
	bin, err := filepath.Abs(os.Getenv("ORDO_BIN"))
	if os.Getenv("ORDO_BIN") == "" || err != nil {
		t.Fatal("ORDO_BIN must name the ordo binary (make n8n-e2e builds bin/ordo)")
	}
	n8nBin := ensureN8N(t)
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute) // within the Makefile's -timeout 60m
	defer cancel()
	dir := t.TempDir()
	start := time.Now()
	step := func(format string, args ...any) {
		t.Logf("[%5.1fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	// Where the events workflow posts its alerts.
	var (
		alertsMu sync.Mutex
		alerts   []map[string]any
	)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &a) == nil {
			alertsMu.Lock()
			alerts = append(alerts, a)
			alertsMu.Unlock()
		}
	}))
	defer sink.Close()
	alertTypes := func() []string {
		alertsMu.Lock()
		defer alertsMu.Unlock()
		var ts []string
		for _, a := range alerts {
			ts = append(ts, fmt.Sprint(a["type"]))
		}
		return ts
	}

	n8nHome := filepath.Join(dir, "n8n")
	tarball := packNode(t, dir)
	installNode(t, n8nHome, tarball)
	step("n8n-nodes-ordo built, linted, packed (%s) and installed into n8n's ~/.n8n/nodes", filepath.Base(tarball))
	nn := newN8N(t, n8nBin, n8nHome)
	defer nn.stop()
	// The async tenant's calls pass through a counter: the workflow must
	// run once per message however long its AI step takes.
	var asyncCalls atomic.Int64
	n8nURL, _ := url.Parse(nn.url())
	proxy := httputil.NewSingleHostReverseProxy(n8nURL)
	counter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asyncCalls.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	defer counter.Close()
	// The node tenants' calls pass through one too, counted per webhook.
	var nodeCallsMu sync.Mutex
	nodeCalls := map[string]int{}
	nodeCounter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nodeCallsMu.Lock()
		nodeCalls[r.URL.Path]++
		nodeCallsMu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	defer nodeCounter.Close()
	callsTo := func(tn *e2eTenant) int {
		nodeCallsMu.Lock()
		defer nodeCallsMu.Unlock()
		return nodeCalls["/webhook/"+n8n.WebhookPath(tn.handler, tn.slug)]
	}

	o := startOrdoDev(t, bin, dir)
	step("ordo dev up at %s", o.base)

	ts := []*e2eTenant{
		{slug: "e2e-sync", mode: "sync", templates: []string{"sync-handler", "events", "send-from-flow"}, handler: "sync-handler", events: true},
		{slug: "e2e-async", mode: "async", templates: []string{"async-handler"}, handler: "async-handler"},
		{slug: "e2e-immediate", mode: "sync", templates: []string{"async-handler"}, handler: "async-handler"},
		{slug: "e2e-badauth", mode: "sync", templates: []string{"sync-handler"}, handler: "sync-handler"},
		{slug: "e2e-node-sync", mode: "sync", templates: []string{"node-sync-handler", "node-send-from-flow"}, handler: "node-sync-handler", node: true},
		{slug: "e2e-node-last", mode: "sync", templates: []string{"node-sync-last-node"}, handler: "node-sync-last-node", node: true},
		{slug: "e2e-node-async", mode: "async", templates: []string{"node-async-handler"}, handler: "node-async-handler", node: true},
	}
	var creds []map[string]any
	var workflows []json.RawMessage
	for i, tn := range ts {
		tn.n = i + 1
		tn.authValue = "n8n-secret-" + tn.slug
		tn.sentValue = tn.authValue
		if tn.slug == "e2e-badauth" {
			tn.sentValue = "a-wrong-secret"
		}
		tn.key, tn.secret = o.createTenant(tn.slug, tn.n)
		hook := nn.url()
		switch {
		case tn.slug == "e2e-async":
			hook = counter.URL
		case tn.node:
			hook = nodeCounter.URL
		}
		// Only the mode and the URL: the node tenants run on ordo's defaults.
		o.cli("", "tenant", "update", "--slug", tn.slug, "--handler-mode", tn.mode,
			"--handler-url", hook+"/webhook/"+n8n.WebhookPath(tn.handler, tn.slug))
		if tn.node {
			nh, na := n8n.NodeCredentialIDs(tn.slug)
			creds = append(creds,
				map[string]any{"id": nh, "name": "Ordo handler (" + tn.slug + ")", "type": "ordoHandlerApi",
					"data": map[string]string{"secret": tn.secret}},
				map[string]any{"id": na, "name": "Ordo API (" + tn.slug + ")", "type": "ordoApi",
					"data": map[string]string{"baseUrl": o.base, "apiKey": tn.key}})
			for _, name := range tn.templates {
				wf, err := n8n.Render(name, n8n.Vars{Tenant: tn.slug, OrdoURL: o.base})
				must(t, err, "render %s", name)
				workflows = append(workflows, wf)
			}
			continue
		}
		auth, _ := json.Marshal(map[string]string{"header": handlerHeader, "value": tn.sentValue})
		o.cli(string(auth), "credential", "set", "--tenant", tn.slug, "--name", "handler_auth", "--from-file", "-")
		if tn.events {
			o.cli("", "tenant", "update", "--slug", tn.slug, "--events-url", nn.url()+"/webhook/"+n8n.WebhookPath("events", tn.slug))
		}
		hID, aID := n8n.CredentialIDs(tn.slug)
		creds = append(creds,
			map[string]any{"id": hID, "name": "ordo handler auth (" + tn.slug + ")", "type": "httpHeaderAuth",
				"data": map[string]string{"name": handlerHeader, "value": tn.authValue}},
			map[string]any{"id": aID, "name": "ordo API key (" + tn.slug + ")", "type": "httpHeaderAuth",
				"data": map[string]string{"name": "Authorization", "value": "Bearer " + tn.key}})
		for _, name := range tn.templates {
			wf, err := n8n.Render(name, n8n.Vars{Tenant: tn.slug, OrdoURL: o.base, NotifyURL: sink.URL})
			must(t, err, "render %s", name)
			workflows = append(workflows, wf)
		}
	}
	// As a user would: the credentials, then the workflows, imported
	// before n8n starts, and switched on.
	writeJSON(t, filepath.Join(dir, "credentials.json"), creds)
	writeJSON(t, filepath.Join(dir, "workflows.json"), workflows)
	nn.cli("import:credentials", "--input="+filepath.Join(dir, "credentials.json"))
	nn.cli("import:workflow", "--input="+filepath.Join(dir, "workflows.json"))
	nn.cli("update:workflow", "--all", "--active=true")
	nn.start(n8n.WebhookPath("sync-handler", "e2e-sync"))
	step("n8n %s up at %s with %d workflows", N8NVersion, nn.url(), len(workflows))

	// The node templates first (their 3 minute outage ends with n8n up
	// again), then the HTTP-Request ones; a failure in one still runs the
	// other (ARGS="-run TestN8N/node" runs only the node's).
	t.Run("node", func(t *testing.T) {
		nodeSteps(ctx, t, step, o, nn, ts[4], ts[5], ts[6], callsTo)
	})
	t.Run("templates", func(t *testing.T) {
		sync_, async_, immediate, badauth := ts[0], ts[1], ts[2], ts[3]

		// 1. Concurrent conversations, each message posted twice: replies
		// once, in order.
		var wg sync.WaitGroup
		want := map[string][]string{}
		for c := range 4 {
			conv := fmt.Sprintf("1555000%04d", c)
			for m := range 3 {
				id := fmt.Sprintf("wamid.in-%d-%d", c, m)
				want[conv] = append(want[conv], "You said: hello "+id, "Reply 2 to "+id)
			}
			wg.Go(func() {
				for m := range 3 {
					id := fmt.Sprintf("wamid.in-%d-%d", c, m)
					o.inbound(ctx, sync_.key, conv, id, "hello "+id)
					o.inbound(ctx, sync_.key, conv, id, "hello "+id) // a redelivery
				}
			})
		}
		wg.Wait()
		for conv, w := range want {
			must(t, waitFor(ctx, 2*time.Minute, func() (bool, string) {
				got := texts(o.sends(ctx, conv))
				return len(got) >= len(w), fmt.Sprint(got)
			}), "sync replies to %s", conv)
			time.Sleep(time.Second) // a duplicate would land meanwhile
			if got := texts(o.sends(ctx, conv)); !slices.Equal(got, w) {
				t.Errorf("sync: %s got %q, want %q (once each, in order)", conv, got, w)
			}
		}
		step("sync: 4 conversations × 3 messages, each posted twice: every reply once, in order")

		// 2. Async: a 25 s AI step runs once and its replies go out; the
		// conversation's next message waits for them.
		aconv := "15550009001"
		o.inbound(ctx, async_.key, aconv, "wamid.ai-1", "first question")
		o.inbound(ctx, async_.key, aconv, "wamid.ai-2", "second question")
		wantAsync := []string{"After thinking about: first question", "After thinking about: second question"}
		must(t, waitFor(ctx, 3*time.Minute, func() (bool, string) {
			got := texts(o.sends(ctx, aconv))
			return len(got) >= 2, fmt.Sprint(got)
		}), "async replies")
		time.Sleep(2 * time.Second)
		if got := texts(o.sends(ctx, aconv)); !slices.Equal(got, wantAsync) {
			t.Errorf("async: got %q, want %q", got, wantAsync)
		}
		if n := asyncCalls.Load(); n != 2 {
			t.Errorf("async: the workflow was called %d times for 2 messages, want 2", n)
		}
		step("async: 2 messages, 25 s AI step each: %d workflow runs, replies in order", asyncCalls.Load())

		// 3. Misconfigurations give an actionable dead letter, never a silent
		// done: "Respond: Immediately" in sync mode, a failing node, a wrong
		// Header Auth secret.
		deadFor := func(tn *e2eTenant, conv, id, text, mustSay string) {
			t.Helper()
			o.inbound(ctx, tn.key, conv, id, text)
			var dl []deadLetter
			must(t, waitFor(ctx, 2*time.Minute, func() (bool, string) {
				dl = o.deadLetters(ctx, tn.key, conv)
				return len(dl) > 0, "no dead letter"
			}), "%s: dead letter for %s", tn.slug, id)
			if !strings.Contains(strings.ToLower(dl[0].Reason), strings.ToLower(mustSay)) {
				t.Errorf("%s: dead letter reason %q does not say %q", tn.slug, dl[0].Reason, mustSay)
			}
			if s := o.sends(ctx, conv); len(s) != 0 {
				t.Errorf("%s: %d sends for a dead-lettered message", tn.slug, len(s))
			}
			step("%s: dead letter: %s", tn.slug, dl[0].Reason)
		}
		deadFor(immediate, "15550009101", "wamid.imm-1", "hello", "Respond")
		deadFor(sync_, "15550009102", "wamid.fail-1", "please [fail]", "n8n")
		deadFor(badauth, "15550009103", "wamid.auth-1", "hello", "403")

		// 4. n8n restarting mid-run loses and halts nothing.
		rconv := "15550009201"
		nn.stop()
		step("n8n stopped")
		var wantR []string
		for m := range 3 {
			id := fmt.Sprintf("wamid.restart-%d", m)
			o.inbound(ctx, sync_.key, rconv, id, "during restart "+id)
			wantR = append(wantR, "You said: during restart "+id, "Reply 2 to "+id)
		}
		time.Sleep(5 * time.Second)
		nn.start(n8n.WebhookPath("sync-handler", "e2e-sync"))
		step("n8n started again")
		must(t, waitFor(ctx, 4*time.Minute, func() (bool, string) {
			got := texts(o.sends(ctx, rconv))
			return len(got) >= len(wantR), fmt.Sprint(got)
		}), "replies after the restart")
		if got := texts(o.sends(ctx, rconv)); !slices.Equal(got, wantR) {
			t.Errorf("restart: got %q, want %q", got, wantR)
		}
		if dl := o.deadLetters(ctx, sync_.key, rconv); len(dl) > 0 || o.conversationStatus(ctx, sync_.key, rconv) != "active" {
			t.Errorf("restart: %d dead letters, conversation %s", len(dl), o.conversationStatus(ctx, sync_.key, rconv))
		}
		step("restart: 3 messages posted while n8n was down all answered in order, nothing halted")

		// 5. Events: the events workflow hears a delivery and the dead letter.
		first := o.sends(ctx, "15550000000")[0]
		o.statusWebhook(ctx, sync_.slug, first, "delivered")
		must(t, waitFor(ctx, 2*time.Minute, func() (bool, string) {
			got := alertTypes()
			return slices.Contains(got, "message.delivered") && slices.Contains(got, "message.dead_lettered"), fmt.Sprint(got)
		}), "events through n8n")
		step("events: n8n's events workflow received %v", alertTypes())

		// 6. Sending from a flow: the same order posted twice is one message.
		for range 2 {
			resp, err := http.Post(nn.url()+"/webhook/"+n8n.WebhookPath("send-from-flow", sync_.slug), "application/json",
				strings.NewReader(`{"order_id":"A-1001","phone":"15550009301"}`))
			must(t, err, "trigger the send flow")
			resp.Body.Close()
		}
		must(t, waitFor(ctx, time.Minute, func() (bool, string) {
			got := texts(o.sends(ctx, "15550009301"))
			return len(got) >= 1, fmt.Sprint(got)
		}), "send from a flow")
		time.Sleep(2 * time.Second)
		if got := texts(o.sends(ctx, "15550009301")); !slices.Equal(got, []string{"Order A-1001 is confirmed"}) {
			t.Errorf("send from a flow, triggered twice: got %q, want the confirmation once", got)
		}
		step("send from a flow: triggered twice, sent once")
	})
}

// nodeSteps runs the node-* templates: n8n-nodes-ordo's Ordo Trigger as the
// handler of tenants on ordo's defaults, its Ordo node sending and posting
// async replies.
func nodeSteps(ctx context.Context, t *testing.T, step func(string, ...any), o *ordoDev, nn *n8nProc,
	ns, nl, na *e2eTenant, callsTo func(*e2eTenant) int) {
	t.Helper()
	// in posts messages ids to conv and returns the replies they want.
	in := func(tn *e2eTenant, conv string, ids []string, want func(id string) []string) []string {
		var w []string
		for _, id := range ids {
			o.inbound(ctx, tn.key, conv, id, "hello "+id)
			w = append(w, want(id)...)
		}
		return w
	}
	// delivered waits for want on conv, then checks they came once, in
	// order, with no dead letter and the conversation active.
	delivered := func(tn *e2eTenant, conv string, want []string, within time.Duration, what string) {
		t.Helper()
		must(t, waitFor(ctx, within, func() (bool, string) {
			got := texts(o.sends(ctx, conv))
			return len(got) >= len(want), fmt.Sprint(got)
		}), "%s: replies to %s", what, conv)
		time.Sleep(time.Second) // a duplicate would land meanwhile
		if got := texts(o.sends(ctx, conv)); !slices.Equal(got, want) {
			t.Errorf("%s: %s got %q, want %q (once each, in order)", what, conv, got, want)
		}
		if dl := o.deadLetters(ctx, tn.key, conv); len(dl) > 0 {
			t.Errorf("%s: dead letter %q", what, dl[0].Reason)
		}
		if st := o.conversationStatus(ctx, tn.key, conv); st != "active" {
			t.Errorf("%s: conversation %s is %s", what, conv, st)
		}
	}

	// 6b. The trigger refuses a call ordo did not sign, before any node
	// runs (once n8n registered the triggers: it activates workflows one
	// by one after its first webhook answers).
	forged := func(tn *e2eTenant, sig string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, nn.url()+"/webhook/"+n8n.WebhookPath(tn.handler, tn.slug),
			strings.NewReader(`{"message_id":"forged"}`))
		req.Header.Set("Content-Type", "application/json")
		if sig != "" {
			req.Header.Set("X-Ordo-Signature", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err, "post a forged call")
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tn := range []*e2eTenant{ns, nl, na} {
		must(t, waitFor(ctx, 5*time.Minute, func() (bool, string) {
			code := forged(tn, "")
			return code != http.StatusNotFound, fmt.Sprintf("%s's trigger answers %d", tn.slug, code)
		}), "n8n registers the Ordo Trigger")
		for _, sig := range []string{"", "sha256=" + hmacHex("not-the-secret", []byte(`{"message_id":"forged"}`))} {
			if code := forged(tn, sig); code != http.StatusUnauthorized {
				t.Errorf("Ordo Trigger of %s: a call signed %q answered %d, want 401", tn.slug, sig, code)
			}
		}
	}
	step("node: the Ordo Trigger answers 401 to unsigned and wrongly signed calls")

	// 7. Two-item answers in both of n8n's shapes.
	items := in(ns, "15550009401", []string{"wamid.items-1", "wamid.items-2"}, func(id string) []string {
		return []string{"You said: hello " + id, "Reply 2 to " + id}
	})
	messages := in(nl, "15550009402", []string{"wamid.msgs-1", "wamid.msgs-2"}, func(id string) []string {
		return []string{"First: hello " + id, "Second: " + id}
	})
	delivered(ns, "15550009401", items, 2*time.Minute, "items holding replies (Respond to Webhook, All Incoming Items)")
	delivered(nl, "15550009402", messages, 2*time.Minute, "message items (When Last Node Finishes)")
	step("node: two-item answers, items holding replies and message items: every reply once, in order, no dead letter")

	// 8. A 45 s AI step in a sync workflow on ordo's defaults is called
	// once and its replies go out; beside it, the async node workflow
	// posts its replies with the Ordo node.
	before := callsTo(ns)
	began := time.Now()
	o.inbound(ctx, ns.key, "15550009403", "wamid.think-1", "[think] a hard question")
	o.inbound(ctx, na.key, "15550009404", "wamid.nasync-1", "slow question")
	delivered(ns, "15550009403", []string{"You said: [think] a hard question", "Reply 2 to wamid.think-1"}, 3*time.Minute, "45 s AI step")
	took := time.Since(began)
	if n := callsTo(ns) - before; n != 1 {
		t.Errorf("45 s AI step: the workflow was called %d times, want once", n)
	}
	if took < 45*time.Second {
		t.Errorf("45 s AI step: replies after %s; the stand-in did not wait", took)
	}
	delivered(na, "15550009404", []string{"After thinking about: slow question"}, 2*time.Minute, "async through Post Replies")
	if n := callsTo(na); n != 1 {
		t.Errorf("async node: the workflow was called %d times, want once", n)
	}
	step("node: a 45 s AI step (sync, ordo's defaults) called once, replies after %.0f s, no dead letter; async Post Replies sent", took.Seconds())

	// 9. The Ordo node sends from a flow: triggered twice, one message.
	for range 2 {
		resp, err := http.Post(nn.url()+"/webhook/"+n8n.WebhookPath("node-send-from-flow", ns.slug), "application/json",
			strings.NewReader(`{"order_id":"N-2002","phone":"15550009405"}`))
		must(t, err, "trigger the node send flow")
		resp.Body.Close()
	}
	delivered(ns, "15550009405", []string{"Order N-2002 is confirmed"}, time.Minute, "send with the Ordo node")
	step("node: send from a flow with the Ordo node: triggered twice, sent once")

	// 10. The handler away for 3 minutes: the messages wait, nothing is
	// dead-lettered or halted, and they go out in order once it is back.
	nn.stop()
	down := time.Now()
	step("n8n stopped for 3 minutes")
	outage := in(ns, "15550009406", []string{"wamid.outage-1", "wamid.outage-2", "wamid.outage-3"}, func(id string) []string {
		return []string{"You said: hello " + id, "Reply 2 to " + id}
	})
	time.Sleep(3*time.Minute - time.Since(down))
	if dl := o.deadLetters(ctx, ns.key, "15550009406"); len(dl) > 0 {
		t.Errorf("outage: dead letter during the outage: %q", dl[0].Reason)
	}
	if s := o.sends(ctx, "15550009406"); len(s) != 0 {
		t.Errorf("outage: %d sends while the handler was away", len(s))
	}
	nn.start(n8n.WebhookPath("node-sync-handler", ns.slug))
	back := time.Now()
	step("n8n started again after %.0f s", back.Sub(down).Seconds())
	delivered(ns, "15550009406", outage, 5*time.Minute, "after a 3 minute outage")
	step("node: a 3 minute handler outage: 3 messages delivered %.0f s after it ended, in order, no dead letter, no halt", time.Since(back).Seconds())
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	must(t, err, "encode %s", path)
	must(t, os.WriteFile(path, b, 0o600), "write %s", path)
}
