package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/tenants"
)

// A deploy: `ordo serve` gets SIGTERM, which ends the context its runner
// was started with, and calls Stop. Sends in flight at that moment must be
// finished and recorded — under the resend policy an unrecorded one is sent
// again by the next worker, a duplicate the user sees. (Before the fix River
// cancelled every drain with the start context: the steps stayed running.)
func TestDeployStopRecordsInFlightSends(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET ambiguous = 'resend'`); err != nil {
		t.Fatal(err)
	}
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		r := whatsapptest.Default(req, attempt)
		r.Delay = 400 * time.Millisecond // the answer is still on its way at SIGTERM
		return r
	})
	const convs, perConv = 8, 3
	for c := range convs {
		for i := range perConv {
			b.Ingest(fmt.Sprintf("c%d", c), fmt.Sprintf("c%d-m%d", c, i), fmt.Sprintf("c%d-%d", c, i))
		}
	}
	signalCtx, sigterm := context.WithCancel(context.Background())
	if err := b.Runner.Start(signalCtx); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(ctx, convs); err != nil {
		t.Fatal(err)
	}
	sigterm() // what serve does on SIGTERM, then Stop
	if err := b.Runner.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.steps WHERE status IN ('running', 'unknown')`); n != 0 {
		t.Fatalf("%d steps left in doubt by a graceful stop; every in-flight send must be recorded", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`); n == 0 {
		t.Fatal("no message finished before the stop: the test did not catch sends in flight")
	}

	// The next deploy's worker goes on from the checkpoints.
	secondRunner(t, b, 10, func() {})
	b.WaitFor("every message done after the restart", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == convs*perConv
	})
	for c := range convs {
		sends := b.WhatsApp.SendsTo(fmt.Sprintf("c%d", c))
		got := texts(sends)
		want := []string{}
		for i := range perConv {
			want = append(want, fmt.Sprintf("c%d-%d", c, i))
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("conversation c%d: provider saw %v, want %v (each once, in order)", c, got, want)
		}
	}
	if n := b.Count(`SELECT coalesce(sum(ambiguous_count), 0)::int FROM ordo.steps`); n != 0 {
		t.Errorf("ambiguous_count total = %d after a graceful deploy, want 0", n)
	}
}

// A worker frozen (SIGSTOP, a GC pause, a stalled VM) after recording a
// send's attempt and before making the request loses its lease; a newer
// drain resends. When the frozen one wakes it must not send: the fence
// guards its writes, and the lease bound guards its calls.
func TestFrozenDrainMakesNoCallAfterLosingLease(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{Lease: 1500 * time.Millisecond, HandlerTimeout: time.Second, SendTimeout: time.Second}})
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET ambiguous = 'resend'`); err != nil {
		t.Fatal(err)
	}
	stalled, wake := make(chan int64), make(chan struct{})
	var first atomic.Bool
	jobs.SetBeforeEffect(b.Runner, func(int64) {
		if first.CompareAndSwap(false, true) {
			var fence int64
			_ = b.Pool.QueryRow(context.Background(), `SELECT fence FROM ordo.conversations`).Scan(&fence)
			stalled <- fence
			<-wake
		}
	})
	b.Start()
	b.Ingest("c1", "m1", "one")
	<-stalled
	// The lease runs out, the reconciler re-schedules the conversation and a
	// new drain resends m1 (its outcome is unknown to it).
	b.WaitFor("takeover to finish m1", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 1
	})
	close(wake)
	time.Sleep(500 * time.Millisecond) // the frozen drain wakes and would call now
	if got := texts(b.WhatsApp.Sends()); len(got) != 1 {
		t.Fatalf("provider saw %v; want one send of m1 (the frozen drain must not call after losing its lease)", got)
	}
}

// Errors that repeat on every try — a credential sealed with a master key
// the process lacks, a handler secret that is gone — pause the tenant with
// a reason the operator sees, instead of failing the drain job until River
// discards it and the reconciler schedules it again, for ever.
func TestUnreadableCredentialsPauseTheTenant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, breakIt, direction, reason string
	}{
		{"whatsapp credential under an unknown master key", `UPDATE ordo.credentials SET key_id = 'gone' WHERE name = 'whatsapp'`, "outbound", "cannot be decrypted"},
		{"handler secret deleted", `DELETE FROM ordo.credentials WHERE name = '` + tenants.HandlerCredential + `'`, "inbound", "handler secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				_, _ = w.Write([]byte(`{"replies":[]}`))
			}))
			t.Cleanup(h.Close)
			b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL})
			if _, err := b.Pool.Exec(context.Background(), tc.breakIt); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Engine.Ingest(context.Background(), engine.NewMessage{
				Tenant: b.Tenant.Slug, ConversationID: "c1", MessageID: "m1", Direction: tc.direction, Payload: jobstest.Outbound("c1", "hi"),
			}); err != nil {
				t.Fatal(err)
			}
			b.WaitFor("the tenant to be paused", 10*time.Second, func() bool {
				return b.Count(`SELECT count(*) FROM ordo.tenants WHERE sending_paused_reason LIKE '%' || $1 || '%'`, tc.reason) == 1 &&
					b.Count(`SELECT count(*) FROM ordo.conversations WHERE paused_wait`) == 1 && // the attempt is given back with this mark
					b.Count(`SELECT count(*) FROM ordo.ready WHERE NOT running`) == 1 // and the drain parked the conversation
			})
			if n := b.Count(`SELECT count(*) FROM ordo.dead_letters`); n != 0 {
				t.Errorf("%d dead letters; a configuration error pauses, it does not dead-letter", n)
			}
			if n := b.Count(`SELECT count(*) FROM ordo.ready WHERE due_at < now() + interval '10 seconds'`); n != 0 {
				t.Errorf("%d conversations due again soon; a paused tenant's drain waits for the resume, it does not fail and retry", n)
			}
			if n := b.Count(`SELECT coalesce(sum(attempts), 0)::int FROM ordo.steps`); n != 0 {
				t.Errorf("steps used %d attempts while the tenant could not work; want them given back", n)
			}
			if calls.Load() != 0 || len(b.WhatsApp.Sends()) != 0 {
				t.Errorf("external calls made: handler %d, sends %d; want none", calls.Load(), len(b.WhatsApp.Sends()))
			}
		})
	}
}

// An operator replays a dead letter its conversation already passed (skip
// policy) while the conversation's drain has a send in flight. The replay
// appends the message to the conversation's tail, as ingest does; it has no
// reason to take the conversation over. (Before the fix it bumped the fence:
// the busy drain's finish was rejected, and the send — delivered — was
// treated as ambiguous and sent again: the user got "two" twice.)
func TestReplayOfPassedDeadLetterLeavesBusyDrainAlone(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET on_dead_letter = 'skip', ambiguous = 'resend'`); err != nil {
		t.Fatal(err)
	}
	var badFails atomic.Bool
	badFails.Store(true)
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if req.Text == "bad" && badFails.Load() {
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131026}
		}
		return whatsapptest.Default(req, attempt)
	})
	inFlight, release := make(chan struct{}), make(chan struct{})
	var effects atomic.Int32
	jobs.SetHooks(b.Runner, nil, func(int64) {
		if effects.Add(1) == 2 { // "two" reached the provider; its answer is not recorded yet
			close(inFlight)
			<-release
		}
	})
	b.Start()
	b.Ingest("c1", "m1", "bad")
	b.Ingest("c1", "m2", "two")
	<-inFlight
	var dl string
	if err := b.Pool.QueryRow(context.Background(), `SELECT id::text FROM ordo.dead_letters`).Scan(&dl); err != nil {
		t.Fatalf("m1's dead letter: %v", err)
	}
	badFails.Store(false)
	if _, err := b.Engine.Replay(context.Background(), b.Tenant.ID, dl, engine.ActorCLI); err != nil {
		t.Fatalf("replay: %v", err)
	}
	close(release)
	b.WaitFor("both messages done", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 2
	})
	if got := texts(b.WhatsApp.SendsTo("c1")); strings.Join(got, ",") != "two,bad" {
		t.Fatalf("provider saw %v; want [two bad] (two once, then the replayed message at the tail)", got)
	}
	if n := b.Count(`SELECT coalesce(sum(ambiguous_count), 0)::int FROM ordo.steps`); n != 0 {
		t.Errorf("ambiguous_count = %d; the replay made a delivered send look ambiguous", n)
	}
}

// Resuming a paused tenant wakes the drains that waited for the pause — and
// only those: a drain backing off for Meta's pair-rate advice keeps its
// time. (Before: resume made every snoozed drain of the tenant due at once.)
func TestResumeWakesOnlyDrainsWaitingForIt(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{Config: jobs.Config{PairRateUnit: 3 * time.Second}})
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if req.To == "r" && attempt == 1 {
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131056}
		}
		return whatsapptest.Default(req, attempt)
	})
	start := time.Now()
	b.Ingest("r", "r1", "backing off")
	b.WaitFor("r to back off", 5*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.steps WHERE pair_rate_errors = 1`) == 1
	})
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = 'test'`); err != nil {
		t.Fatal(err)
	}
	b.Ingest("p", "p1", "paused")
	b.WaitFor("p to wait for the resume", 5*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.conversations WHERE conversation_id = 'p' AND paused_wait`) == 1
	})
	if _, err := b.Pool.Exec(context.Background(), `SELECT ordo.resume_sending($1)`, b.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	b.WaitFor("p to be sent after the resume", 2*time.Second, func() bool { return len(b.WhatsApp.SendsTo("p")) == 1 })
	if d := time.Since(resumed); d > 1500*time.Millisecond {
		t.Errorf("p sent %s after the resume; want at once", d)
	}
	b.WaitFor("r's retry", 10*time.Second, func() bool { return len(b.WhatsApp.SendsTo("r")) == 1 })
	if d := b.WhatsApp.SendsTo("r")[0].At.Sub(start); d < 2900*time.Millisecond {
		t.Fatalf("r retried %s after its first attempt; Meta asked for 3s (the resume must not wake it)", d)
	}
}

// Send slots reserved before a pause are given up: on resume the tenant's
// conversations take fresh slots at its send_rate instead of all sending at
// once (a burst above the number's limit, which Meta answers with 130429).
func TestResumeSendsAtTheTenantsRate(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{})
	const rate, convs = 4, 12
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET send_rate = $1`, rate); err != nil {
		t.Fatal(err)
	}
	for i := range convs {
		b.Ingest(fmt.Sprintf("c%d", i), fmt.Sprintf("m%d", i), "hello")
	}
	b.WaitFor("the first sends", 5*time.Second, func() bool { return len(b.WhatsApp.Sends()) >= 2 })
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = 'test'`); err != nil {
		t.Fatal(err)
	}
	sentBefore := 0
	b.WaitFor("every unsent conversation to wait for the resume", 10*time.Second, func() bool {
		sentBefore = len(b.WhatsApp.Sends())
		return b.Count(`SELECT count(*) FROM ordo.conversations WHERE paused_wait`) == convs-sentBefore
	})
	if _, err := b.Pool.Exec(context.Background(), `SELECT ordo.resume_sending($1)`, b.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(b.WhatsApp.Sends()) != convs && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(b.WhatsApp.Sends()); n != convs {
		rows, _ := b.Pool.Query(context.Background(), `SELECT c.conversation_id, c.paused_wait, c.send_slot_at - now(), r.running, r.due_at - now() FROM ordo.conversations c LEFT JOIN ordo.ready r ON r.conversation_pk = c.id`)
		for rows.Next() {
			v, _ := rows.Values()
			t.Log(v...)
		}
		t.Fatalf("%d of %d sent (%d before the pause)", n, convs, sentBefore)
	}
	// Slots reserved before the pause would all fire at once on resume (every
	// unsent conversation held one); at the tenant's rate one second holds
	// about rate sends. Twice the rate leaves room for a loaded machine's
	// scheduling jitter and still catches the burst.
	after := b.WhatsApp.Sends()[sentBefore:]
	for i := range after {
		n := 0
		for j := i; j < len(after) && after[j].At.Sub(after[i].At) < time.Second; j++ {
			n++
		}
		if n > 2*rate {
			t.Fatalf("%d sends within one second after the resume; the tenant's rate is %d/s", n, rate)
		}
	}
}
