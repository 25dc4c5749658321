package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/tenants"
)

// A drain whose run is over at a message boundary (its budget, here one
// message a run) lets its conversation go in that message's finish
// (ordo.finish 'release': due again now, lock released) instead of a
// transaction of its own after it (ordo.park_conversation): a yield costs
// no extra write. Every message is still sent once, in order.
func TestARunOverItsBudgetYieldsInItsFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{Workers: 2, MaxMessagesPerRun: 1}})
	// Paced (a slot every millisecond): drained one conversation at a time,
	// never in a batch.
	if _, err := b.Tenants.Update(ctx, "acme", tenants.UpdateParams{SendRate: ptr(1000)}); err != nil {
		t.Fatal(err)
	}
	calls := countCalls(t, b)
	parksBefore, finishesBefore := calls("park_conversation"), calls("finish")
	want := []string{"one", "two", "three"}
	for i, text := range want {
		b.Ingest("c1", "m"+string(rune('1'+i)), text)
	}
	b.Start()
	b.WaitFor("all sent", 20*time.Second, func() bool { return len(b.WhatsApp.Sends()) == len(want) })
	b.WaitFor("caught up", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.conversations WHERE head_seq = last_seq`) == 1 &&
			b.Count(`SELECT count(*) FROM ordo.ready`) == 0
	})
	if rep := whatsapptest.Check(b.WhatsApp.Sends(), map[string][]string{"c1": want}); !rep.OK() {
		t.Fatalf("provider saw: %s", rep)
	}
	reportCalls(t, b)
	if parks := calls("park_conversation") - parksBefore; parks != 0 {
		t.Errorf("ordo.park_conversation called %d times for 3 runs of one message each; want 0 (each run ends in its finish)", parks)
	}
	if finishes := calls("finish") - finishesBefore; finishes != len(want) {
		t.Errorf("ordo.finish called %d times for %d messages of one send each; want %d", finishes, len(want), len(want))
	}
}

// countCalls makes the database count calls of ordo's functions (superuser
// in make test's cluster), from the connections opened next on, and returns
// the count of one function so far.
func countCalls(t *testing.T, b *jobstest.Bundle) func(fn string) int {
	t.Helper()
	if _, err := b.Pool.Exec(context.Background(), "DO $x$ BEGIN EXECUTE format('ALTER DATABASE %I SET track_functions = ''pl''', current_database()); END $x$"); err != nil {
		t.Fatal(err)
	}
	b.Pool.Reset()
	return func(fn string) int {
		return b.Count(`SELECT coalesce(sum(calls), 0)::int FROM pg_stat_user_functions WHERE schemaname = 'ordo' AND funcname = $1`, fn)
	}
}

// reportCalls stops the runner and ends every connection: a backend reports
// its function counts when it is idle for a while, or when it ends.
func reportCalls(t *testing.T, b *jobstest.Bundle) {
	t.Helper()
	if err := b.Runner.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.Pool.Reset()
	b.WaitFor("the counts reported", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`) == 0
	})
}
