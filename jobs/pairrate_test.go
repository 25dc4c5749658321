package jobs_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

// Meta's 131056 (too many messages to this user) answers the probe send of
// a number that was unreachable. That answer brings the number back
// (ordo.number_back), which wakes the conversations waiting for it — the
// probing conversation among them, its drain still running. The wake must
// not cut the pair-rate wait the same drain records next: Meta penalizes a
// business that ignores it. Before, the park took the wake-up for "go on at
// once" and the retry went out milliseconds after the error.
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
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.tenants SET number_down_since = now() - interval '1 minute',
		number_down_reason = 'test', number_probe_at = now() - interval '1 second' WHERE id = $1`, b.Tenant.ID); err != nil {
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
	if n := b.Count(`SELECT count(*) FROM ordo.tenants WHERE number_down_since IS NOT NULL`); n != 0 {
		t.Fatal("the probe's answer did not bring the number back")
	}
}
