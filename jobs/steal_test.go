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

// One worker, a queue of conversations: the first drain, caught up, goes on
// with the other conversations' due drain jobs (steal) instead of handing
// its worker back to River, and a stolen conversation that must wait (a
// pair-rate error) is handed back to a job of its own, which sends it after
// the wait. The reconciler is kept out of the way (it would re-schedule a
// conversation whose job completed within ReconcileInterval), so a broken
// hand-back strands the conversation and fails the test.
func TestCaughtUpDrainStealsDueJobs(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{
		Workers: 1, PairRateUnit: 50 * time.Millisecond, MaxRunTime: time.Minute,
		ReconcileInterval: time.Minute, StrandedAfter: time.Minute,
	}})
	const convs, perConv = 30, 2
	const waiting = "15550010" // its first send gets 131056 (pair rate)
	b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
		if req.To == waiting && attempt == 1 {
			return whatsapptest.Response{Status: http.StatusBadRequest, ErrorCode: 131056}
		}
		return whatsapptest.Default(req, attempt)
	})
	expected := map[string][]string{}
	for k := range perConv {
		for c := range convs {
			conv := fmt.Sprintf("1555%04d", c)
			text := fmt.Sprintf("%s #%d", conv, k)
			expected[conv] = append(expected[conv], text)
			b.Ingest(conv, fmt.Sprintf("m-%s-%d", conv, k), text)
		}
	}
	if n := b.Count(`SELECT count(*) FROM ordo.river_job WHERE kind = 'ordo_drain'`); n != convs {
		t.Fatalf("drain jobs before start: %d, want one per conversation (%d)", n, convs)
	}
	b.Start()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(ctx, convs*perConv); err != nil {
		t.Fatalf("waiting for sends: %v (got %d)", err, len(b.WhatsApp.Sends()))
	}
	time.Sleep(200 * time.Millisecond) // a duplicate, if any, arrives
	if rep := whatsapptest.Check(b.WhatsApp.Sends(), expected); !rep.OK() || rep.Sent != convs*perConv {
		t.Fatalf("provider saw: %s", rep)
	}
	b.WaitFor("every conversation to be caught up", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.conversations WHERE head_seq <> last_seq OR drain_job_id IS NOT NULL`) == 0
	})
	// River ran the first job; most others were stolen (deleted unrun). The
	// waiting conversation's hand-back is a job of its own, run by River.
	ran := b.Count(`SELECT count(*) FROM ordo.river_job WHERE kind = 'ordo_drain'`)
	if ran >= convs/2 {
		t.Errorf("drain jobs River ran: %d of %d conversations; want most stolen by the caught-up drain", ran, convs)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.river_job WHERE kind = 'ordo_drain' AND args->>'conversation' = (SELECT id::text FROM ordo.conversations WHERE conversation_id = $1)`, waiting); n < 1 {
		t.Errorf("the waiting conversation has %d jobs of its own; want its hand-back", n)
	}
}

// A backlog drained by runs cut short (a few messages per run): each
// message's last write reads the next message and starts its first step,
// and that started step is always the one sent next — never left running
// for a later drain to find in doubt (which would wait ReconcileWait and
// count an ambiguous send). Everything is sent once, in order, with no
// ambiguous send, and handler replies keep their place.
func TestBacklogRunsStartEachNextMessageOnce(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{
		Workers: 2, MaxMessagesPerRun: 3, ReconcileWait: time.Minute,
	}})
	const convs, perConv = 4, 25
	expected := map[string][]string{}
	for k := range perConv {
		for c := range convs {
			conv := fmt.Sprintf("1556%04d", c)
			text := fmt.Sprintf("%s #%d", conv, k)
			expected[conv] = append(expected[conv], text)
			b.Ingest(conv, fmt.Sprintf("m-%s-%d", conv, k), text)
		}
	}
	b.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(ctx, convs*perConv); err != nil {
		t.Fatalf("waiting for sends: %v (got %d)", err, len(b.WhatsApp.Sends()))
	}
	time.Sleep(200 * time.Millisecond)
	if rep := whatsapptest.Check(b.WhatsApp.Sends(), expected); !rep.OK() || rep.Sent != convs*perConv {
		t.Fatalf("provider saw: %s", rep)
	}
	b.WaitFor("every conversation to be caught up", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.conversations WHERE head_seq <> last_seq`) == 0
	})
	if n := b.Count(`SELECT coalesce(sum(ambiguous_count), 0)::int FROM ordo.steps`); n != 0 {
		t.Errorf("ambiguous sends: %d, want 0 (a started step was left for a later drain)", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.steps WHERE attempts <> 1 OR status <> 'done'`); n != 0 {
		t.Errorf("%d steps not done in exactly one attempt", n)
	}
}
