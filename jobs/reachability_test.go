package jobs_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
)

// flakyHandler is a tenant's handler that goes away and comes back: while
// refusing, nothing listens on its port; while missing, it answers n8n's
// 404 for a webhook that is not registered; up, it answers one reply that
// names the message. It counts calls, and calls in flight at once.
type flakyHandler struct {
	t      *testing.T
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	srv    *http.Server
	state  atomic.Value // "up", "missing"
	calls  atomic.Int32
	active atomic.Int32
	most   atomic.Int32
}

func newFlakyHandler(t *testing.T) *flakyHandler {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &flakyHandler{t: t, addr: ln.Addr().String()}
	h.state.Store("up")
	h.serve(ln)
	t.Cleanup(func() { h.refuse() })
	return h
}

func (h *flakyHandler) URL() string { return "http://" + h.addr + "/webhook/ordo" }

func (h *flakyHandler) serve(ln net.Listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ln = ln
	h.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := h.active.Add(1)
		defer h.active.Add(-1)
		for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
		}
		h.calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		if h.state.Load() == "missing" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"code":404,"message":"The requested webhook \"POST ordo\" is not registered."}`)
			return
		}
		id := between(string(body), `"message_id":"`, `"`)
		_, _ = fmt.Fprintf(w, `{"replies":[{"type":"text","text":{"body":"re %s"}}]}`, id)
	})}
	go func() { _ = h.srv.Serve(ln) }()
}

// refuse closes the port: connections are refused.
func (h *flakyHandler) refuse() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srv != nil {
		_ = h.srv.Close()
		h.srv = nil
	}
}

// listen opens the port again, answering as state says.
func (h *flakyHandler) listen(state string) {
	h.state.Store(state)
	ln, err := net.Listen("tcp", h.addr)
	if err != nil {
		h.t.Fatalf("listen again on %s: %v", h.addr, err)
	}
	h.serve(ln)
}

func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i+len(from):]
	if j := strings.Index(s, to); j >= 0 {
		return s[:j]
	}
	return s
}

// An n8n that is restarted or upgraded is away for minutes: first its port
// refuses connections, then it answers 404 until the workflow is active
// again. Its tenant's conversations must wait for it — no dead letter, no
// halt, no attempt burnt — while one probe at a time looks for it, and go
// on in order as soon as it answers. Before, each message's 8 attempts ran
// out within about two minutes and the conversation halted.
func TestUnreachableHandlerIsAStateTheConversationsWaitFor(t *testing.T) {
	t.Parallel()
	h := newFlakyHandler(t)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL(), Config: jobs.Config{RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond}})
	ctx := context.Background()
	// Few attempts, so that counting them would dead-letter within the outage.
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET max_attempts = 2, events_url = 'http://127.0.0.1:1/events'`); err != nil {
		t.Fatal(err)
	}

	h.refuse()
	inbound := func(conv, id string) {
		t.Helper()
		if _, err := b.Engine.Ingest(ctx, engine.NewMessage{Tenant: b.Tenant.Slug, ConversationID: conv, MessageID: id, Direction: "inbound", Payload: []byte(`{"text":"hi"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	inbound("c1", "in1")
	b.WaitFor("the tenant's handler to be marked unreachable", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.dependencies WHERE what = 'handler' AND down_since IS NOT NULL`) == 1
	})
	inbound("c1", "in2")
	inbound("c2", "other1")
	time.Sleep(1500 * time.Millisecond) // refused through at least one probe
	h.listen("missing")
	inbound("c1", "in3")
	time.Sleep(2500 * time.Millisecond) // 404 through at least one more
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters during the outage; want none", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.conversations WHERE halted_at IS NOT NULL`); n != 0 {
		t.Fatalf("%d conversations halted during the outage; want none", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`); n != 0 {
		t.Fatalf("%d messages done while the handler was away", n)
	}
	callsDown := h.calls.Load()
	back := time.Now()
	h.state.Store("up")

	b.WaitFor("every message handled", 30*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE direction = 'inbound' AND status = 'done'`) == 4 &&
			len(b.WhatsApp.Sends()) == 4
	})
	t.Logf("handler away: %d calls (probes); all handled %s after it answered", callsDown, time.Since(back).Round(time.Millisecond))
	var c1 []string
	for _, s := range texts(b.WhatsApp.Sends()) {
		if s != "re other1" {
			c1 = append(c1, s)
		}
	}
	if strings.Join(c1, "|") != "re in1|re in2|re in3" {
		t.Fatalf("c1's replies went out as %v; want in1, in2, in3 in order, once each", c1)
	}
	if most := h.most.Load(); most > 1 {
		t.Fatalf("%d handler calls at once while it was away; want one probe at a time", most)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.steps WHERE kind = 'handle' AND attempts <> 1`); n != 0 {
		t.Fatalf("%d handle steps with other than one attempt: the outage was counted as attempts", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.dependencies WHERE what = 'handler' AND (down_since IS NOT NULL OR probe_at IS NOT NULL)`); n != 0 {
		t.Fatal("the tenant is still marked unreachable after its handler answered")
	}
	if n := b.Count(`SELECT count(*) FROM ordo.conversations WHERE handler_wait`); n != 0 {
		t.Fatalf("%d conversations still waiting for the handler", n)
	}
	var events string
	if err := b.Pool.QueryRow(ctx, `SELECT string_agg(type, ',' ORDER BY id) FROM ordo.events WHERE type LIKE 'tenant.handler%'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != "tenant.handler_unreachable,tenant.handler_back" {
		t.Fatalf("tenant events %q; want one handler_unreachable then one handler_back", events)
	}
}

// Past the tenant's outage limit the handler's failures count as attempts
// again: a workflow switched off for good ends in a dead letter that says
// so, instead of waiting for ever.
func TestHandlerUnreachablePastTheOutageLimitDeadLetters(t *testing.T) {
	t.Parallel()
	h := newFlakyHandler(t)
	h.state.Store("missing")
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL(), Config: jobs.Config{RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond}})
	ctx := context.Background()
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET max_attempts = 3, handler_outage_limit_ms = 60000`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(ctx, `INSERT INTO ordo.dependencies (tenant_id, what, down_since, probe_at)
		SELECT id, 'handler', now() - interval '2 minutes', now() FROM ordo.tenants`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine.Ingest(ctx, engine.NewMessage{Tenant: b.Tenant.Slug, ConversationID: "c1", MessageID: "in1", Direction: "inbound", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("the dead letter", 15*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1 })
	var reason string
	if err := b.Pool.QueryRow(ctx, `SELECT reason FROM ordo.dead_letters`).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "attempts exhausted (3)") || !strings.Contains(reason, "is the n8n workflow active") {
		t.Fatalf("dead letter reason %q; want the attempts and the n8n hint", reason)
	}
}

// A handler back while a drain decides to wait for it must not leave that
// drain's conversation waiting: the chaos run with Patroni (make chaos-ha)
// saw inbound messages handled 125 s after their handler answered again.
// A drain that was told "not your probe" parked its conversation for a
// minute, and the prober's ordo.dependency_back, which wakes the waiting
// conversations, ran between that answer and the drain's mark: it found
// nothing marked, and the mark came after. The hook forces that order:
// the handler comes back after the drain's probe answer and before its mark.
func TestHandlerBackWhileADrainDecidesToWaitWakesIt(t *testing.T) {
	t.Parallel()
	h := newFlakyHandler(t)
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, HandlerURL: h.URL()})
	ctx := context.Background()
	// The handler was unreachable and another drain holds the probe for an
	// hour: this drain is told to wait.
	if _, err := b.Pool.Exec(ctx, `INSERT INTO ordo.dependencies (tenant_id, what, down_since, probe_at)
		SELECT id, 'handler', now(), now() + interval '1 hour' FROM ordo.tenants`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	jobs.SetBeforeWait(b.Runner, func(int64) {
		once.Do(func() {
			// The prober got its answer: the handler is back.
			if _, err := b.Pool.Exec(ctx, `SELECT ordo.dependency_back(id, 'handler') FROM ordo.tenants`); err != nil {
				t.Error(err)
			}
		})
	})
	b.Start()
	if _, err := b.Engine.Ingest(ctx, engine.NewMessage{Tenant: b.Tenant.Slug, ConversationID: "c1", MessageID: "in1", Direction: "inbound", Payload: []byte(`{"text":"hi"}`)}); err != nil {
		t.Fatal(err)
	}
	// Well under jobs.HandlerProbeMax, the wait the conversation was parked for.
	b.WaitFor("the message handled soon after its handler was back", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 1
	})
	if n := b.Count(`SELECT count(*) FROM ordo.conversations WHERE handler_wait`); n != 0 {
		t.Fatalf("%d conversations still marked waiting for a handler that is back", n)
	}
}

// One 503 among a stream of answers — a proxy in front of several n8n
// workers, one of them restarting — is that call's failure, not the
// handler's absence: it must not take the tenant's handler down and hold
// every conversation of the tenant for a probe. The hour-long soak saw its
// test handler's 3 % of 503s take the tenant "unreachable" 40 times in 3
// minutes, each holding all of its conversations.
func TestOne503AmongAnswersLeavesTheHandlerReachable(t *testing.T) {
	t.Parallel()
	var (
		calls  sync.Map // message id → calls
		failed atomic.Int32
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := between(string(body), `"message_id":"`, `"`)
		n, _ := calls.LoadOrStore(id, new(atomic.Int32))
		// Round 0: every conversation's first call meets the restarting
		// worker, at once (a suspicion: not yet down). Later rounds: one
		// call each, seconds apart, with answers between.
		if n.(*atomic.Int32).Add(1) == 1 && (strings.HasSuffix(id, "-0") || strings.HasPrefix(id, "c0-")) {
			failed.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintf(w, `{"replies":[{"type":"text","text":{"body":"re %s"}}]}`, id)
	}))
	t.Cleanup(srv.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: srv.URL, Config: jobs.Config{RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond}})
	ctx := context.Background()
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET events_url = 'http://127.0.0.1:1/events'`); err != nil {
		t.Fatal(err)
	}
	const convs, rounds = 10, 3
	for i := range rounds {
		for c := range convs {
			if _, err := b.Engine.Ingest(ctx, engine.NewMessage{Tenant: b.Tenant.Slug, ConversationID: fmt.Sprintf("c%d", c),
				MessageID: fmt.Sprintf("c%d-%d", c, i), Direction: "inbound", Payload: []byte(`{"text":"hi"}`)}); err != nil {
				t.Fatal(err)
			}
		}
		b.WaitFor("the round handled", 30*time.Second, func() bool {
			return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == (i+1)*convs
		})
		// The failures of the rounds span more than jobs.HandlerDownSpan:
		// only the answers between them say the handler is there.
		time.Sleep(jobs.HandlerDownSpan / 2)
	}
	if want := convs + rounds - 1; int(failed.Load()) != want {
		t.Fatalf("the handler answered 503 %d times; the test wants %d", failed.Load(), want)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.events WHERE type = 'tenant.handler_unreachable'`); n != 0 {
		t.Fatalf("the tenant's handler was taken down %d times by single 503s among answers; want never", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// A proxy with nothing behind it answers 503 to every call: for a tenant
// with one conversation that is the same message's retries, and they must
// take the handler down (no dead letter, however few its attempts) and let
// it go on when the handler is back.
func TestAProxyWithNothingBehindItTakesTheHandlerDown(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		_, _ = io.WriteString(w, `{"replies":[{"type":"text","text":{"body":"hello"}}]}`)
	}))
	t.Cleanup(srv.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: srv.URL, Config: jobs.Config{RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond}})
	ctx := context.Background()
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET max_attempts = 2`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine.Ingest(ctx, engine.NewMessage{Tenant: b.Tenant.Slug, ConversationID: "c1", MessageID: "in1", Direction: "inbound", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	b.WaitFor("the tenant's handler to be marked unreachable", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.dependencies WHERE what = 'handler' AND down_since IS NOT NULL`) == 1
	})
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters: the 502s burnt the message's attempts", n)
	}
	up.Store(true)
	b.WaitFor("the message handled once the handler answers", 30*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 1 && len(b.WhatsApp.Sends()) == 1
	})
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters`); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// A message its handler's proxy answers 504 every time (its workflow is too
// slow for the proxy on this input) while the handler answers the others
// is that message's problem: it dead-letters after its attempts, as any
// failing message — it neither takes the handler down nor waits for ever
// on its last attempt.
func TestAMessageAProxyAlwaysFailsDeadLetters(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"message_id":"poison"`) {
			w.WriteHeader(http.StatusGatewayTimeout)
			return
		}
		_, _ = io.WriteString(w, `{"replies":[]}`)
	}))
	t.Cleanup(srv.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: srv.URL, Config: jobs.Config{RetryBase: 400 * time.Millisecond, RetryMax: 400 * time.Millisecond}})
	ctx := context.Background()
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET max_attempts = 3, events_url = 'http://127.0.0.1:1/events'`); err != nil {
		t.Fatal(err)
	}
	ingest := func(conv, id string) {
		t.Helper()
		if _, err := b.Engine.Ingest(ctx, engine.NewMessage{Tenant: b.Tenant.Slug, ConversationID: conv, MessageID: id, Direction: "inbound", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	ingest("c0", "poison")
	// The handler answers other conversations all along.
	for i := 0; b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 0; i++ {
		if i > 600 {
			t.Fatal("no dead letter after 30 s: the message waits for ever")
		}
		ingest(fmt.Sprintf("c%d", 1+i%20), fmt.Sprintf("ok-%d", i))
		time.Sleep(50 * time.Millisecond)
	}
	var reason string
	if err := b.Pool.QueryRow(ctx, `SELECT reason FROM ordo.dead_letters`).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "attempts exhausted (3)") || !strings.Contains(reason, "504") {
		t.Fatalf("dead letter %q; want its 3 attempts and the 504", reason)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.events WHERE type = 'tenant.handler_unreachable'`); n != 0 {
		t.Fatalf("the handler was taken down %d times by one message's 504s", n)
	}
}

// A resume while a drain parks its conversation to wait for it must wake
// that conversation. The drain marked the conversation waiting in one
// transaction and parked it in another; ordo.wake_waiting only tries each
// marked row (it must not wait for rows), so a resume during the park
// skipped the conversation, and it waited out its park (PausedRecheck:
// 30 s by default; CI once: web's TestMissingCredentialPausesSending). The
// test holds the conversation's ready row so that the drain's park stops
// there, resumes meanwhile, then lets the park go on.
func TestResumeWhileADrainParksWakesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{PausedRecheck: time.Minute}})
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = 'test'`); err != nil {
		t.Fatal(err)
	}
	waiters := func() int { return b.Count(`SELECT count(*) FROM pg_locks WHERE NOT granted`) }
	var (
		once    sync.Once
		resumed = make(chan error, 1)
	)
	jobs.SetBeforeWait(b.Runner, func(conv int64) {
		once.Do(func() {
			tx, err := b.Pool.Begin(ctx)
			if err == nil {
				_, err = tx.Exec(ctx, `SELECT 1 FROM ordo.ready WHERE conversation_pk = $1 FOR UPDATE`, conv)
			}
			if err != nil {
				t.Error(err)
				resumed <- err
				return
			}
			go func() {
				defer func() { _ = tx.Rollback(ctx) }()
				// The drain's park waits for the ready row.
				b.WaitFor("the drain's park to wait for the ready row", 10*time.Second, func() bool { return waiters() >= 1 })
				done := make(chan error, 1)
				go func() {
					_, err := b.Pool.Exec(ctx, `SELECT ordo.resume_sending(id) FROM ordo.tenants`)
					done <- err
				}()
				// The resume either ran through, or waits behind the drain.
				b.WaitFor("the resume to run or wait", 10*time.Second, func() bool {
					select {
					case err := <-done:
						done <- err
						return true
					default:
						return waiters() >= 2
					}
				})
				_ = tx.Rollback(ctx)
				resumed <- <-done
			}()
		})
	})
	b.Start()
	b.Ingest("c1", "m1", "after the resume")
	select {
	case err := <-resumed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no resume")
	}
	// Well under the minute the conversation was parked for.
	b.WaitFor("the message sent soon after the resume", 10*time.Second, func() bool { return len(b.WhatsApp.SendsTo("c1")) == 1 })
}
