package jobs_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/tenants"
)

// A sync call that timed out is not made again: n8n finishes an execution
// whose caller has gone, so a retry would run the workflow (its AI step)
// once more. The dead letter says what to change; --retry-timeouts opts a
// workflow that is safe to repeat back in.
func TestHandlerTimeoutIsNotCalledAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retry     bool
		wantCalls int32
		wantDead  string
	}{
		{name: "default", wantCalls: 1,
			wantDead: "the handler took longer than 1 s; n8n may still be running it — raise --handler-timeout or use async mode"},
		{name: "--retry-timeouts", retry: true, wantCalls: 3, wantDead: "called again: --retry-timeouts is set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			release := make(chan struct{})
			h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				select { // the workflow runs on after ordo gave up waiting
				case <-release:
				case <-time.After(10 * time.Second):
				}
				_, _ = io.WriteString(w, `{"replies":[`+reply("late")+`]}`)
			}))
			t.Cleanup(h.Close)
			t.Cleanup(func() { close(release) })
			b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL, Config: jobs.Config{RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond}})
			setTenant(t, b, tenants.UpdateParams{HandlerTimeoutMS: ptr(1000), MaxAttempts: ptr(3), RetryTimeouts: &tc.retry})
			inbound(t, b, "c1", "in1")
			b.WaitFor("the dead letter", 20*time.Second, func() bool { return b.Count(`SELECT count(*) FROM ordo.dead_letters`) == 1 })
			var reason string
			_ = b.Pool.QueryRow(context.Background(), `SELECT reason FROM ordo.dead_letters`).Scan(&reason)
			if !strings.Contains(reason, tc.wantDead) {
				t.Fatalf("dead letter %q; want it to say %q", reason, tc.wantDead)
			}
			if n := calls.Load(); n != tc.wantCalls {
				t.Fatalf("handler called %d times, want %d", n, tc.wantCalls)
			}
			if n := len(b.WhatsApp.Sends()); n != 0 {
				t.Fatalf("%d replies sent after a timeout", n)
			}
		})
	}
}

// A tenant starts with a handler timeout long enough for the AI workflows
// n8n users build, and the workers' cap lets it through.
func TestHandlerTimeoutDefaultFitsAnAIStep(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	if got := time.Duration(b.Tenant.HandlerTimeoutMS) * time.Millisecond; got < 2*time.Minute || got != tenants.HandlerTimeoutDefault {
		t.Fatalf("a new tenant's handler timeout is %s; want tenants.HandlerTimeoutDefault (%s), at least 2m", got, tenants.HandlerTimeoutDefault)
	}
	if b.Tenant.RetryTimeouts {
		t.Fatal("a new tenant retries timed-out handler calls")
	}
	if jobs.HandlerTimeoutDefault < tenants.HandlerTimeoutDefault {
		t.Fatalf("workers cap handler calls at %s, below a tenant's default %s", jobs.HandlerTimeoutDefault, tenants.HandlerTimeoutDefault)
	}
}

// A slow handler call (an AI step) holds one runner and nothing more: while
// it is in flight, another tenant's conversations go on through the other
// runner, and the slow call's reply goes out once it answers — one call.
func TestSlowHandlerHoldsOneRunner(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	inCall := make(chan struct{}, 1)
	release := make(chan struct{})
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		inCall <- struct{}{}
		<-release
		_, _ = io.WriteString(w, `{"replies":[`+reply("thought about it")+`]}`)
	}))
	t.Cleanup(h.Close)
	b := jobstest.Setup(t, jobstest.Options{HandlerURL: h.URL, Config: jobs.Config{Workers: 2, Lease: 1500 * time.Millisecond, SendTimeout: time.Second, HandlerTimeout: time.Minute}})
	inbound(t, b, "slow", "in1")
	select {
	case <-inCall:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was never called")
	}
	b.AddTenant("other", "2000002", tenants.UpdateParams{})
	const n = 12
	for i := range n {
		b.IngestFor("other", fmt.Sprintf("u%d", i%4), fmt.Sprintf("m%d", i), fmt.Sprintf("t%d", i))
	}
	b.WaitFor("the other tenant's messages, during the slow call", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages m JOIN ordo.tenants t ON t.id = m.tenant_id
			WHERE t.slug = 'other' AND m.status = 'done'`) == n
	})
	if calls.Load() != 1 {
		t.Fatalf("handler called %d times during its slow call, want once", calls.Load())
	}
	time.Sleep(2 * time.Second) // more than a lease: the call still holds its conversation
	close(release)
	b.WaitFor("the slow call's reply", 10*time.Second, func() bool {
		for _, s := range texts(b.WhatsApp.Sends()) {
			if s == "thought about it" {
				return true
			}
		}
		return false
	})
	if calls.Load() != 1 {
		t.Fatalf("handler called %d times, want once", calls.Load())
	}
}
