package jobs_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/tenants"
)

// eventSink is a tenant's events_url: it checks each POST's signature and
// records the events in arrival order.
type eventSink struct {
	t      *testing.T
	secret string
	mu     sync.Mutex
	got    []jobs.Event
	bad    []string
	// wantHeader, if set, is a header (name, value) every POST must carry:
	// the tenant's handler_auth.
	wantHeader [2]string
	// answer, if set, decides the status of a POST (0: 200); it may block.
	answer func(r *http.Request, e jobs.Event, nth int) int
	seen   map[string]int
}

func (s *eventSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var e jobs.Event
	if err := json.Unmarshal(body, &e); err != nil {
		s.mu.Lock()
		s.bad = append(s.bad, "not JSON: "+string(body))
		s.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if got := r.Header.Get("X-Ordo-Signature"); got != jobs.Sign([]byte(s.secret), body) {
		s.bad = append(s.bad, "bad signature on event "+e.ID)
	}
	if got, want := r.Header.Get("Idempotency-Key"), e.Tenant+":event:"+e.ID; got != want {
		s.bad = append(s.bad, "Idempotency-Key "+got+", want "+want)
	}
	if s.wantHeader[0] != "" && r.Header.Get(s.wantHeader[0]) != s.wantHeader[1] {
		s.bad = append(s.bad, "event "+e.ID+" without the tenant's handler auth")
	}
	if s.seen == nil {
		s.seen = map[string]int{}
	}
	s.seen[e.ID]++
	nth := s.seen[e.ID]
	s.got = append(s.got, e)
	answer := s.answer
	s.mu.Unlock()
	status := http.StatusOK
	if answer != nil {
		if st := answer(r, e, nth); st != 0 {
			status = st
		}
	}
	w.WriteHeader(status)
}

// received returns the events received so far, in arrival order.
func (s *eventSink) received() []jobs.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]jobs.Event(nil), s.got...)
}

// eventData reads an event's data fields a test looks at.
func eventData(e jobs.Event) (messageID string) {
	var d struct {
		MessageID string `json:"message_id"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return d.MessageID
}

// Events reach the tenant's events_url signed, once each at least, in id
// order per conversation, across a worker stopped hard in the middle of a
// delivery (its River client cancelled while the POST was in flight: the
// endpoint got the event, ordo never recorded the answer; another worker
// delivers it again) and an endpoint that refuses an event twice before it
// takes it (the conversation's later events wait behind it).
func TestEventsInOrderAtLeastOnceAcrossAKilledWorker(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	ctx := context.Background()
	sink := &eventSink{t: t, secret: b.Secret}
	srv := httptest.NewServer(sink)
	t.Cleanup(srv.Close)
	url := srv.URL + "/events"
	if _, err := b.Tenants.Update(ctx, b.Tenant.Slug, tenants.UpdateParams{EventsURL: &url}); err != nil {
		t.Fatal(err)
	}
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, n int) whatsapptest.Response {
		if strings.HasPrefix(req.Text, "fail") {
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131026}
		}
		return whatsapptest.Default(req, n)
	})
	inFlight := make(chan struct{})
	var once sync.Once
	sink.answer = func(r *http.Request, e jobs.Event, nth int) int {
		switch {
		case e.Type == "message.sent" && eventData(e) == "c1-m2" && nth == 1:
			// Taken by the endpoint; the answer never reaches ordo.
			once.Do(func() { close(inFlight) })
			<-r.Context().Done()
			return http.StatusServiceUnavailable
		case e.Type == "message.sent" && eventData(e) == "c2-m1" && nth <= 2:
			return http.StatusServiceUnavailable
		}
		return 0
	}

	b.Start()
	for i := 1; i <= 3; i++ {
		b.Ingest("c1", "c1-m"+strconv.Itoa(i), "c1 text "+strconv.Itoa(i))
		b.Ingest("c2", "c2-m"+strconv.Itoa(i), "c2 text "+strconv.Itoa(i))
	}
	b.Ingest("c3", "c3-m1", "fail: refused for good") // dead letter, then halt
	b.WaitFor("every message finished", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status IN ('done', 'dead')`) == 7
	})
	// Meta's statuses for c1-m1's send, and a pause and resume of the tenant.
	for _, st := range []string{"delivered", "read"} {
		if _, err := b.Pool.Exec(ctx, `UPDATE ordo.steps s SET provider_status = $1 FROM ordo.messages m
			WHERE m.id = s.message_pk AND m.message_id = 'c1-m1'`, st); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = 'test pause' WHERE id = $1`, b.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Tenants.ResumeSending(ctx, b.Tenant.Slug); err != nil {
		t.Fatal(err)
	}

	select {
	case <-inFlight:
	case <-time.After(20 * time.Second):
		t.Fatalf("c1-m2's message.sent was never posted; received %v; events table %d, river: %v", sink.received(), b.Count(`SELECT count(*) FROM ordo.events`), riverStates(b))
	}
	// The kill: River's client stopped hard (its jobs' contexts cancelled)
	// while the POST is in flight; another process's runner takes over.
	dead, cancel := context.WithCancel(ctx)
	cancel()
	_ = b.Runner.Stop(dead)
	b.StartAnother()

	want := map[string][]string{
		"c1": {"message.sent", "message.sent", "message.sent", "message.delivered", "message.read"},
		"c2": {"message.sent", "message.sent", "message.sent"},
		"c3": {"message.dead_lettered", "conversation.halted"},
		"":   {"tenant.sending_paused", "tenant.sending_resumed"},
	}
	b.WaitFor("every event delivered", 30*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.events`) == 0
	})
	got := sink.received()
	sink.mu.Lock()
	if len(sink.bad) > 0 {
		t.Errorf("bad deliveries: %v", sink.bad)
	}
	sink.mu.Unlock()

	// Per stream: ids never go back (a repeat of the last one is the
	// at-least-once redelivery); each event's last delivery was taken.
	byStream := map[string][]jobs.Event{}
	for _, e := range got {
		byStream[e.ConversationID] = append(byStream[e.ConversationID], e)
	}
	redelivered := false
	for conv, types := range want {
		var last int64
		var distinct []string
		for _, e := range byStream[conv] {
			id, _ := strconv.ParseInt(e.ID, 10, 64)
			switch {
			case id < last:
				t.Errorf("stream %q: event %d (%s) after %d: out of order", conv, id, e.Type, last)
			case id == last:
				redelivered = redelivered || (conv == "c1")
				continue
			}
			last = id
			distinct = append(distinct, e.Type)
			if e.Tenant != b.Tenant.Slug || e.At.IsZero() {
				t.Errorf("event %s: tenant %q, at %s", e.ID, e.Tenant, e.At)
			}
		}
		if strings.Join(distinct, ",") != strings.Join(types, ",") {
			t.Errorf("stream %q got %v, want %v", conv, distinct, types)
		}
	}
	if !redelivered {
		t.Error("the event in flight at the kill was not delivered again")
	}
	var sentOrder []string
	for _, e := range byStream["c1"] {
		if e.Type == "message.sent" {
			sentOrder = append(sentOrder, eventData(e))
		}
	}
	if strings.Join(sentOrder, ",") != "c1-m1,c1-m2,c1-m2,c1-m3" {
		t.Errorf("c1's message.sent deliveries: %v, want m1, m2 (cut off), m2 again, m3", sentOrder)
	}
}

// A tenant without an events_url has no events written, whatever happens
// to its messages; one whose endpoint is removed later has its pending
// events dropped, not delivered.
func TestNoEventsWithoutEventsURL(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{})
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, n int) whatsapptest.Response {
		if strings.HasPrefix(req.Text, "fail") {
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131026}
		}
		return whatsapptest.Default(req, n)
	})
	b.Ingest("c1", "m1", "hello")
	b.Ingest("c2", "m2", "fail: dead")
	b.WaitFor("both finished", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status IN ('done', 'dead')`) == 2
	})
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET sending_paused_at = now() WHERE id = $1`, b.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.events`); n != 0 {
		t.Errorf("%d events written for a tenant without events_url", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters`); n != 1 {
		t.Errorf("%d dead letters, want 1 (the test did not exercise a dead letter)", n)
	}
}

func riverStates(b *jobstest.Bundle) string {
	rows, _ := b.Pool.Query(context.Background(), `SELECT kind, state, count(*), max(coalesce(errors::text, '')) FROM ordo.river_job GROUP BY 1, 2`)
	var out []string
	for rows.Next() {
		var k, st, e string
		var n int
		_ = rows.Scan(&k, &st, &n, &e)
		out = append(out, k+"/"+st+"/"+strconv.Itoa(n)+" "+e)
	}
	return strings.Join(out, "; ")
}

// A stream has one deliverer at a time, whatever the number of jobs or
// processes: while one job's POST is in flight (held by the endpoint), a
// second job for the same stream returns at once without posting; the
// event goes out once.
func TestEventsOneDelivererPerStream(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true}) // no dispatcher: the test runs the jobs
	ctx := context.Background()
	sink := &eventSink{t: t, secret: b.Secret}
	posted, release := make(chan struct{}), make(chan struct{})
	sink.answer = func(*http.Request, jobs.Event, int) int {
		close(posted)
		<-release
		return 0
	}
	srv := httptest.NewServer(sink)
	t.Cleanup(srv.Close)
	url := srv.URL
	if _, err := b.Tenants.Update(ctx, b.Tenant.Slug, tenants.UpdateParams{EventsURL: &url}); err != nil {
		t.Fatal(err)
	}
	// Authenticated like handler calls (n8n's Header Auth).
	if err := b.Vault.Put(ctx, nil, b.Tenant.ID, tenants.HandlerAuthCredential, []byte(`{"header":"X-N8N-Auth","value":"events-s3cret"}`)); err != nil {
		t.Fatal(err)
	}
	sink.wantHeader = [2]string{"X-N8N-Auth", "events-s3cret"}
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = 'x' WHERE id = $1`, b.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- jobs.DeliverEvents(ctx, b.Runner, b.Tenant.ID, 0) }()
	<-posted
	if err := jobs.DeliverEvents(ctx, b.Runner, b.Tenant.ID, 0); err != nil {
		t.Fatalf("second job: %v", err)
	}
	if n := len(sink.received()); n != 1 {
		t.Fatalf("%d POSTs while the first was in flight, want 1", n)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first job: %v", err)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.events`); n != 0 {
		t.Errorf("%d events left after the delivery", n)
	}
	if got := sink.received(); len(got) != 1 || got[0].Type != "tenant.sending_paused" || got[0].ConversationID != "" {
		t.Errorf("received %+v, want one tenant.sending_paused", got)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.bad) > 0 {
		t.Errorf("bad deliveries: %v", sink.bad)
	}
}
