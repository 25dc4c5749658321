package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

// Meta's 131056 (too many messages to this user) answers the probe send of
// a number that was unreachable. That answer brings the number back
// (ordo.dependency_back), which wakes the conversations waiting for it — the
// probing conversation among them, its drain still running. The wake must
// not cut the pair-rate wait the same drain records next: Meta penalizes a
// business that ignores it. Before, the park took the wake-up for "go on at
// once" and the retry went out milliseconds after the error. Two things
// hold it now: the way back does not wake the prober's own conversation,
// and the wait is the conversation's pair_ready_at, which every send start
// checks (TestPairRateWaitOutlivesTheDeadLetter and
// TestBatchHonoursThePairRateWait fail without that).
func TestPairRateWaitHoldsThroughAWakeUp(t *testing.T) {
	t.Parallel()
	const unit = time.Second
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{PairRateUnit: unit}})
	ctx := context.Background()
	var log attemptLog
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		log.add(req.Text)
		if attempt == 1 {
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131056}
		}
		return whatsapptest.Default(req, attempt)
	})
	b.Ingest("u1", "m1", "hello")
	// The state a number outage leaves (TestUnreachableNumberIsAStateTheConversationsWaitFor
	// drives it through real failures): the number down, its probe free,
	// the conversation marked waiting for it.
	if _, err := b.Pool.Exec(ctx, `INSERT INTO ordo.dependencies (tenant_id, what, down_since, down_reason, probe_at)
		VALUES ($1, 'number', now() - interval '1 minute', 'test', now() - interval '1 second')`, b.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.conversations SET number_wait = true WHERE conversation_id = 'u1'`); err != nil {
		t.Fatal(err)
	}
	b.Start()

	sendCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(sendCtx, 1); err != nil {
		t.Fatal(err)
	}
	at := log.get("hello")
	if len(at) != 2 {
		t.Fatalf("hello attempted %d times; want a pair-rate refusal and a success", len(at))
	}
	if d := at[1].Sub(at[0]); d < unit {
		t.Fatalf("the retry came %s after the pair-rate error; want at least %s", d, unit)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.dependencies WHERE what = 'number' AND down_since IS NOT NULL`); n != 0 {
		t.Fatal("the probe's answer did not bring the number back")
	}
}

// A 131056 on a message's last attempt dead-letters it, and under the
// tenant's skip policy the conversation goes on to its next message — to
// the same user, who Meta just said gets too many messages. That next
// send waits out the pair-rate wait the last error earned (4 units after a
// second consecutive error), as a retry would have.
func TestPairRateWaitOutlivesTheDeadLetter(t *testing.T) {
	t.Parallel()
	const unit = 250 * time.Millisecond
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{PairRateUnit: unit}})
	ctx := context.Background()
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET max_attempts = 2, on_dead_letter = 'skip' WHERE id = $1`, b.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	var log attemptLog
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		log.add(req.Text)
		if req.Text == "first" {
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131056}
		}
		return whatsapptest.Default(req, attempt)
	})
	b.Ingest("u1", "m1", "first")
	b.Ingest("u1", "m2", "second")
	b.Start()
	sendCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(sendCtx, 1); err != nil {
		t.Fatal(err)
	}
	first, second := log.get("first"), log.get("second")
	if len(first) != 2 || len(second) != 1 {
		t.Fatalf("first attempted %d times, second %d; want 2 pair-rate refusals, then the second message once", len(first), len(second))
	}
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters`); n != 1 {
		t.Fatalf("%d dead letters; want the first message's", n)
	}
	if d := second[0].Sub(first[1]); d < 4*unit {
		t.Fatalf("the next message went %s after the pair-rate error that dead-lettered the one before; want at least %s", d, 4*unit)
	}
}

// An unpaced tenant's quiet conversations are sent in batches (batch.go),
// which take no pacing slot. A conversation whose user is inside a
// pair-rate wait — the state a 131056 leaves on it — is not quiet: its
// next message waits for the end of it, as a per-conversation drain's does.
func TestBatchHonoursThePairRateWait(t *testing.T) {
	t.Parallel()
	const wait = 2 * time.Second
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	ctx := context.Background()
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET send_rate = 0 WHERE id = $1`, b.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		b.Ingest(fmt.Sprintf("calm%d", i), fmt.Sprintf("calm%d-1", i), fmt.Sprintf("calm%d", i))
	}
	b.Ingest("u1", "m1", "after the wait")
	var until time.Time
	if err := b.Pool.QueryRow(ctx, `UPDATE ordo.conversations SET pair_ready_at = clock_timestamp() + $1::interval
		WHERE conversation_id = 'u1' RETURNING pair_ready_at`, wait).Scan(&until); err != nil {
		t.Fatal(err)
	}
	b.Start()
	sendCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(sendCtx, 4); err != nil {
		t.Fatal(err)
	}
	if jobs.Batches(b.Runner) == 0 {
		t.Fatal("no batch was claimed; the test is about the batched drain")
	}
	if at := b.WhatsApp.SendsTo("u1")[0].At; at.Before(until) {
		t.Fatalf("u1's message went %s before its user's pair-rate wait ended", until.Sub(at))
	}
}
