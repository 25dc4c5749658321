package chaos

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// faultHandlerOutage is the tenants' handler away: n8n restarting, then up
// with the workflow not yet active. For the first half of the outage its
// port refuses connections; for the second it answers n8n's 404 for a
// webhook that is not registered. ordo must treat that as a state of the
// tenant (contract: handler callback, Failures): its conversations wait,
// nothing is dead-lettered, nothing halts, and every inbound message that
// arrived meanwhile is handled soon after the handler is back.
const faultHandlerOutage = "handler_outage"

// HandlerOutageFull is how long the handler is away in a run of at least
// HandlerOutageFullFrom: the 3 minutes of an n8n upgrade. A shorter run
// gets half its duration (at least 20 s), said in the fault's Desc.
const (
	HandlerOutageFull     = 3 * time.Minute
	HandlerOutageFullFrom = 5 * time.Minute
)

// HandledAfterBackMax bounds how long after the handler is back every
// inbound message that waited for it is handled: one probe interval of at
// most jobs.HandlerProbeMax (30 s), and the backlog.
const HandledAfterBackMax = 90 * time.Second

// n8nNotRegistered is n8n's answer for a webhook whose workflow is not
// active (n8n 1.x, POST to a path nothing listens on).
const n8nNotRegistered = `{"code":404,"message":"The requested webhook \"POST ordo\" is not registered."}`

// handlerOutageKind takes the handler away once, for Config.handlerOutageFor.
var handlerOutageKind = faultKind{
	name: faultHandlerOutage,
	plan: func(p *planner) []fault {
		d := p.cfg.handlerOutageFor()
		if d <= 0 {
			return nil
		}
		earliest := max(3*time.Second, p.cfg.Duration/10)
		// The load goes on at least 30 s after it: messages keep arriving
		// behind the backlog while it drains.
		at := p.between(earliest, p.cfg.Duration-d-30*time.Second)
		p.special = append(p.special, at)
		s := slot{at: at, pause: d}
		p.handlerOutage = &s
		return []fault{&handlerOutage{s: s, shortened: d < HandlerOutageFull}}
	},
	summary: func(n int) string {
		if n == 0 {
			return ""
		}
		return fmt.Sprintf("%d handler outages", n)
	},
}

// handlerOutageFor is how long the handler outage lasts: HandlerOutage if
// set (negative: none), else HandlerOutageFull in a run long enough, else
// half the run.
func (c Config) handlerOutageFor() time.Duration {
	switch {
	case c.HandlerOutage < 0:
		return 0
	case c.HandlerOutage > 0:
		return c.HandlerOutage
	case c.Duration >= HandlerOutageFullFrom:
		return HandlerOutageFull
	}
	return max(20*time.Second, c.Duration/2)
}

// handlerOutage is one outage of the handler. It runs beside the other
// faults (it takes no part in their exclusion): a tenant's handler is away
// whatever ordo's processes are doing.
type handlerOutage struct {
	s         slot
	shortened bool
	rec       handlerOutageRecord
}

func (f *handlerOutage) Kind() string { return faultHandlerOutage }
func (f *handlerOutage) Desc() string {
	d := fmt.Sprintf("the handler refuses connections for %s, then answers n8n's 404 for %s", f.s.pause/2, f.s.pause-f.s.pause/2)
	if f.shortened {
		d += fmt.Sprintf(" (shortened from %s to fit a run under %s)", HandlerOutageFull, HandlerOutageFullFrom)
	}
	return d
}
func (f *handlerOutage) slot() slot   { return f.s }
func (f *handlerOutage) independent() {}

// Inject closes the handler's port, and schedules the 404s for half-time.
func (f *handlerOutage) Inject(_ context.Context, r *run) bool {
	r.log.fault(faultHandlerOutage, "%s", f.Desc())
	f.rec.down = time.Now()
	r.handler.srv.refuse()
	time.AfterFunc(f.s.pause/2, func() {
		if err := r.handler.srv.notFound(); err != nil {
			r.log.printf("handler outage: listen again: %v", err)
		}
		f.rec.notFound = time.Now()
		r.log.printf("handler outage: the handler answers 404 (webhook not registered)")
	})
	return true
}

// Recover serves the handler again and notes the inbound messages still
// waiting for it: each conversation's must be handled in turn, each within
// HandledAfterBackMax of the return or of the one before it.
func (f *handlerOutage) Recover(_ context.Context, r *run) {
	if err := r.handler.srv.restore(); err != nil {
		r.log.printf("handler outage: listen again: %v", err)
	}
	f.rec.back = time.Now()
	f.rec.notFounds = r.handler.srv.notFoundCount()
	okAt := r.handler.srv.handled()
	for i, m := range r.ledger.accepted() {
		t := r.tenants[m.tenant]
		if !m.inbound || !t.inbound {
			continue
		}
		if key := t.slug + ":" + m.id; okAt[key].IsZero() {
			f.rec.waiting = append(f.rec.waiting, waitingMsg{key: key, conv: t.slug + ":" + m.conv, order: i})
		}
	}
	r.log.printf("handler back after %s: %d inbound messages waiting for it, %d 404s answered meanwhile",
		f.rec.back.Sub(f.rec.down).Round(time.Millisecond), len(f.rec.waiting), f.rec.notFounds)
	r.windowMu.Lock()
	r.handlerOutages = append(r.handlerOutages, f.rec)
	r.windowMu.Unlock()
}

// handlerOutageRecord is what one handler outage left for the checker.
type handlerOutageRecord struct {
	down, notFound, back time.Time
	notFounds            int          // 404s answered: ordo's probes (and calls in flight)
	waiting              []waitingMsg // the inbound messages not handled when it came back
}

// waitingMsg is an inbound message that waited for the handler: its key
// (tenant slug:message id), its conversation (tenant slug:conversation id)
// and its place among the ledger's offers (a conversation's are offered one
// at a time, in order; a webhook's answer carries no seq).
type waitingMsg struct {
	key, conv string
	order     int
}

// judgeHandlerOutages checks what the contract promises for a handler that
// is away: no dead letter and no halt on its account, and each conversation
// that waited resumes in order once it is back — its first waiting inbound
// message handled within HandledAfterBackMax of the return, each later one
// within HandledAfterBackMax of the one before it. A conversation's messages
// go one at a time (each one's replies sent, retries and reconcile waits
// included, before the next is handled), so a conversation with 15 waiting
// is not held to 90 s for all 15 (the soak of 2026-11-27 failed so, its
// deepest conversation handled at its pace, cmd/ordo-chaos/soak/README.md),
// while one that does not resume, or stalls, still fails.
func judgeHandlerOutages(rep *Report, in chaosInput) {
	if len(in.handlerOutages) == 0 {
		return
	}
	inbound := make(map[chaosDeadLetter]bool)
	for _, m := range in.ledger.msgs { // the caller holds the ledger's lock
		if m.inbound {
			inbound[chaosDeadLetter{tenant: m.tenant, messageID: m.id}] = true
		}
	}
	var problems []string
	dead := 0
	for _, d := range in.deadLetters {
		if inbound[d] {
			dead++
			problems = append(problems, fmt.Sprintf("tenant %d inbound message %.80q dead-lettered", d.tenant, d.messageID))
		}
	}
	problems = append(problems, in.halted...)
	var figures []string
	for _, o := range in.handlerOutages {
		waiting := slices.Clone(o.waiting)
		slices.SortFunc(waiting, func(a, b waitingMsg) int {
			return cmp.Or(strings.Compare(a.conv, b.conv), cmp.Compare(a.order, b.order))
		})
		var slowest, behind time.Duration // after the return; after the one before
		late, never := 0, 0
		from := o.back // the return, or when the one before it in its conversation was handled
		for i, w := range waiting {
			if i == 0 || w.conv != waiting[i-1].conv {
				from = o.back
			}
			bound := HandledAfterBackMax + stoppedDelivery(in.exclusives, from, from.Add(HandledAfterBackMax))
			at, ok := in.handledAt[w.key]
			switch {
			case !ok:
				never++
				problems = append(problems, fmt.Sprintf("%.80q waited for the handler and was never handled", w.key))
				continue
			case at.Sub(from) > bound:
				late++
				problems = append(problems, fmt.Sprintf("%.80q handled %.1fs after the handler was back, %.1fs after the one before it (bound %.0fs)",
					w.key, at.Sub(o.back).Seconds(), at.Sub(from).Seconds(), bound.Seconds()))
			}
			slowest, behind = max(slowest, at.Sub(o.back)), max(behind, at.Sub(from))
			if at.After(from) {
				from = at
			}
		}
		figures = append(figures, fmt.Sprintf("away %.0fs (404 from +%.0fs, %d answered): %d inbound messages waited, the last handled %.1fs after it was back, the longest %.1fs after the return or the one before it in its conversation (bound %s plus the faults that stopped delivery meanwhile), %d late, %d never",
			o.back.Sub(o.down).Seconds(), o.notFound.Sub(o.down).Seconds(), o.notFounds, len(o.waiting), slowest.Seconds(), behind.Seconds(), HandledAfterBackMax, late, never))
	}
	rep.add("a handler outage: no dead letter, no halt, each conversation resumes in order", len(problems) == 0,
		fmt.Sprintf("%d inbound dead letters, %d halted conversations; %s", dead, len(in.halted), strings.Join(figures, "; ")), problems...)
}

// exclusiveSpan is when an exclusive fault (one that runs alone) ran, from
// its Inject to the end of its Recover.
type exclusiveSpan struct {
	kind     string
	from, to time.Time
}

// stoppedDelivery is how long, within [from, to], an exclusive fault that
// stops delivery was under way (a rolling deploy, Postgres away, a
// failover; not a hostile flood, which leaves the workers be): the
// handler's verdict window is lengthened by it, so that it judges the
// handler's return, not a deploy that happened to follow it.
func stoppedDelivery(spans []exclusiveSpan, from, to time.Time) time.Duration {
	var d time.Duration
	for _, s := range spans {
		if s.kind == faultHostileFlood {
			continue
		}
		if lo, hi := maxTime(s.from, from), minTime(s.to, to); hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// haltedConversations lists the handler tenants' conversations that ordo
// shows halted, through GET /v1/conversations/{id}.
func (r *run) haltedConversations(ctx context.Context) []string {
	api := newChaosClient(r.apiURL)
	var out []string
	for ti, t := range r.tenants {
		if !t.inbound {
			continue
		}
		seen := make(map[string]bool)
		for _, m := range r.ledger.accepted() {
			if m.tenant != ti || seen[m.conv] {
				continue
			}
			seen[m.conv] = true
			status, body, err := api.do(ctx, http.MethodGet, "/v1/conversations/"+url.PathEscape(m.conv), "Bearer "+t.apiKey, "", nil)
			if err != nil || status != http.StatusOK {
				out = append(out, fmt.Sprintf("GET conversation %.40q of %s: %d %v %.100s", m.conv, t.slug, status, err, body))
				continue
			}
			var c struct {
				Status string `json:"status"`
			}
			if json.Unmarshal(body, &c) != nil || c.Status == "halted" {
				out = append(out, fmt.Sprintf("conversation %.40q of %s: %.100s", m.conv, t.slug, body))
			}
		}
	}
	sort.Strings(out)
	return out
}

// handlerServer serves the tenants' handler on a port of its own that it
// can close (connections refused) and open again, and answers n8n's 404
// meanwhile when told to. It notes when each message was first answered
// 200.
type handlerServer struct {
	h    http.Handler
	addr string

	mu        sync.Mutex
	srv       *http.Server
	missing   bool // answering 404
	notFounds int
	okAt      map[string]time.Time // slug:message_id → first 200
}

func newHandlerServer(h http.Handler) *handlerServer {
	s := &handlerServer{h: h, okAt: make(map[string]time.Time)}
	port, err := chaosFreePort()
	if err != nil {
		panic(fmt.Sprintf("chaos handler: %v", err))
	}
	s.addr = "127.0.0.1:" + strconv.Itoa(port)
	if err := s.listen(); err != nil {
		panic(fmt.Sprintf("chaos handler: %v", err))
	}
	return s
}

// URL is the handler's base URL.
func (s *handlerServer) URL() string { return "http://" + s.addr }

// listen serves on the handler's address; s.mu is held or s not yet shared.
// The port may be briefly taken (TIME_WAIT is not, Go sets SO_REUSEADDR):
// it tries for a few seconds.
func (s *handlerServer) listen() error {
	var (
		ln  net.Listener
		err error
	)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if ln, err = net.Listen("tcp", s.addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return err
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return nil
}

// refuse closes the port and every open connection: connections are refused.
func (s *handlerServer) refuse() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		_ = s.srv.Close()
		s.srv = nil
	}
}

// notFound opens the port again, answering every call with n8n's 404.
func (s *handlerServer) notFound() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.missing = true
	if s.srv == nil {
		return s.listen()
	}
	return nil
}

// restore serves the handler again.
func (s *handlerServer) restore() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.missing = false
	if s.srv == nil {
		return s.listen()
	}
	return nil
}

// Close stops the server for good.
func (s *handlerServer) Close() { s.refuse() }

func (s *handlerServer) notFoundCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notFounds
}

// handled returns when each message was first answered 200.
func (s *handlerServer) handled() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.okAt))
	for k, v := range s.okAt {
		out[k] = v
	}
	return out
}

func (s *handlerServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	missing := s.missing
	if missing {
		s.notFounds++
	}
	s.mu.Unlock()
	if missing {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, n8nNotRegistered)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var call struct {
		MessageID string `json:"message_id"`
	}
	_ = json.Unmarshal(body, &call)
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	s.h.ServeHTTP(sw, r)
	if sw.status == http.StatusOK {
		key := strings.TrimPrefix(r.URL.Path, "/") + ":" + call.MessageID
		s.mu.Lock()
		if s.okAt[key].IsZero() {
			s.okAt[key] = time.Now()
		}
		s.mu.Unlock()
	}
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
