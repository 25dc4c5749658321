package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

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
