package jobs_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

// Every message posted twice (some copies at the same instant) by concurrent
// clients, one client per conversation posting in order: each is accepted
// once, sent exactly once, and each conversation's sends arrive in order.
func TestConcurrentDuplicatesSentOnceInOrder(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{})
	const convs, perConv = 40, 15
	expected := map[string][]string{}
	var mu sync.Mutex
	dupes := 0
	var wg sync.WaitGroup
	for c := range convs {
		conv := fmt.Sprintf("1555%04d", c)
		for k := range perConv {
			expected[conv] = append(expected[conv], fmt.Sprintf("%s #%d", conv, k))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range perConv {
				id, text := fmt.Sprintf("m-%s-%d", conv, k), fmt.Sprintf("%s #%d", conv, k)
				// The copy races the original half of the time.
				var inner sync.WaitGroup
				results := make([]engine.Accepted, 2)
				for i := range 2 {
					inner.Add(1)
					go func() {
						defer inner.Done()
						if i == 1 && rand.IntN(2) == 0 {
							time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
						}
						results[i] = b.Ingest(conv, id, text)
					}()
					if i == 0 && rand.IntN(2) == 0 {
						inner.Wait() // sequential copy
					}
				}
				inner.Wait()
				if results[0].Duplicate == results[1].Duplicate || results[0].Seq != results[1].Seq || results[0].ID != results[1].ID {
					t.Errorf("%s: answers %+v and %+v: want one original and one duplicate of it", id, results[0], results[1])
				}
				mu.Lock()
				dupes++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(ctx, convs*perConv); err != nil {
		t.Fatalf("waiting for sends: %v (got %d)", err, len(b.WhatsApp.Sends()))
	}
	time.Sleep(200 * time.Millisecond) // let a duplicate send, if any, arrive
	rep := whatsapptest.Check(b.WhatsApp.Sends(), expected)
	if !rep.OK() || rep.Sent != convs*perConv {
		t.Fatalf("provider saw: %s", rep)
	}
	if dupes != convs*perConv {
		t.Fatalf("duplicate answers: %d, want %d", dupes, convs*perConv)
	}
	// The provider records a send before ordo records its answer: wait for the heads.
	b.WaitFor("every conversation to be caught up", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.conversations WHERE head_seq <> last_seq OR last_seq <> $1`, perConv) == 0
	})
	// The provider never failed: no send may have been left in doubt.
	if n := b.Count(`SELECT coalesce(sum(ambiguous_count), 0)::int FROM ordo.steps`); n != 0 {
		t.Errorf("ambiguous sends: %d, want 0 in a run without failures", n)
	}
}

// A message accepted while the conversation's drain is finishing is sent:
// either the finish sees it (the ingest holds the row lock the finish waits
// for) or the ingest sees the drain gone and schedules a new one.
func TestMessageAtDrainFinishIsNeverStranded(t *testing.T) {
	t.Parallel()
	for _, ingestFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("ingest_commits_first=%t", ingestFirst), func(t *testing.T) {
			t.Parallel()
			b := jobstest.Setup(t, jobstest.Options{NoStart: true})
			atFinish, release := make(chan struct{}), make(chan struct{})
			var first atomic.Bool
			jobs.SetHooks(b.Runner, func(int64) {
				if first.CompareAndSwap(false, true) {
					close(atFinish)
					<-release
				}
			}, nil)
			b.Start()
			ctx := context.Background()
			b.Ingest("c1", "m1", "one")
			<-atFinish // the drain sent m1 and found nothing more

			tx, err := b.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := b.Engine.IngestTx(ctx, tx, engine.NewMessage{Tenant: "acme", ConversationID: "c1", MessageID: "m2", Payload: jobstest.Outbound("c1", "two")}); err != nil {
				t.Fatal(err)
			}
			if ingestFirst {
				close(release)
				// The finish now waits on the row lock this transaction holds.
				b.WaitFor("finish to block on the conversation row", 5*time.Second, func() bool {
					return b.Count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%ordo.finish(%'`) == 1
				})
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := tx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
				close(release)
				b.WaitFor("drain to finish", 5*time.Second, func() bool {
					return b.Count(`SELECT count(*) FROM ordo.conversations c WHERE NOT EXISTS (SELECT 1 FROM ordo.ready r WHERE r.conversation_pk = c.id)`) == 1
				})
				b.Ingest("c1", "m2", "two")
			}
			b.WaitFor("m2 to be sent", 10*time.Second, func() bool { return len(b.WhatsApp.Sends()) >= 2 })
			time.Sleep(100 * time.Millisecond)
			rep := whatsapptest.Check(b.WhatsApp.Sends(), map[string][]string{"c1": {"one", "two"}})
			if !rep.OK() {
				t.Fatalf("provider saw: %s", rep)
			}
		})
	}
}

// A drain that stalls past its lease after sending, and wakes after another
// drain took the conversation over, writes nothing: the new owner's record
// stands and the message is finished once.
func TestStalledDrainWritesNothingAfterTakeover(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{Lease: 1500 * time.Millisecond, HandlerTimeout: time.Second, SendTimeout: time.Second}})
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET ambiguous = 'resend'`); err != nil {
		t.Fatal(err)
	}
	stalled, wake := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	jobs.SetHooks(b.Runner, nil, func(int64) {
		if first.CompareAndSwap(false, true) { // the first send's drain stalls
			close(stalled)
			<-wake
		}
	})
	b.Start()
	b.Ingest("c1", "m1", "one")
	<-stalled
	b.Ingest("c1", "m2", "two")
	// The lease runs out, the reconciler re-schedules the conversation, a new
	// drain takes over, finds m1's outcome unknown, resends it, then sends m2.
	b.WaitFor("takeover to finish the conversation", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 2
	})
	var fence int64
	var provider string
	if err := b.Pool.QueryRow(context.Background(), `SELECT c.fence, s.provider_message_id FROM ordo.conversations c, ordo.steps s JOIN ordo.messages m ON m.id = s.message_pk WHERE m.message_id = 'm1'`).Scan(&fence, &provider); err != nil {
		t.Fatal(err)
	}
	close(wake)
	time.Sleep(500 * time.Millisecond) // the stalled drain tries to record its send
	sends := b.WhatsApp.Sends()
	if len(sends) != 3 || sends[0].Text != "one" || sends[1].Text != "one" || sends[2].Text != "two" {
		t.Fatalf("provider saw %d sends; want one (stalled), one (resent as ambiguous), two", len(sends))
	}
	var after string
	var ambiguous int
	if err := b.Pool.QueryRow(context.Background(), `SELECT s.provider_message_id, s.ambiguous_count FROM ordo.steps s JOIN ordo.messages m ON m.id = s.message_pk WHERE m.message_id = 'm1'`).Scan(&after, &ambiguous); err != nil {
		t.Fatal(err)
	}
	if after != provider || after != sends[1].WAMID {
		t.Fatalf("m1's recorded provider id changed from %q to %q after the stalled drain woke (new owner's send was %q)", provider, after, sends[1].WAMID)
	}
	if ambiguous != 1 {
		t.Fatalf("ambiguous_count = %d, want 1 (the resend is counted)", ambiguous)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.conversations WHERE head_seq = 2 AND fence = $1`, fence); n != 1 {
		t.Fatal("the stalled drain moved the conversation after waking")
	}
}

// A drain whose session vanished with its server — the primary failed over:
// its connection, its advisory lock and its lease are gone at once, while it
// waits on a send — writes nothing once it wakes: another drain took the
// conversation over on the (new) primary, bumped the fence, resent the send
// whose outcome it could not know, and went on. The old drain's only path
// to the database is its dead session, and a write on any other would meet
// the fence.
func TestDrainWhoseServerWentAwayWritesNothingAfterTakeover(t *testing.T) {
	t.Parallel()
	// A lease long enough that the session is ended by the "failover",
	// not by its idle timeout, however loaded the machine.
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{Lease: 5 * time.Second, HandlerTimeout: time.Second, SendTimeout: time.Second}})
	if _, err := b.Pool.Exec(context.Background(), `UPDATE ordo.tenants SET ambiguous = 'resend'`); err != nil {
		t.Fatal(err)
	}
	stalled, wake := make(chan struct{}), make(chan struct{})
	var woken sync.Once
	// Before the bundle's own cleanup stops the runner: a failed
	// assertion must not leave the drain waiting here for ever.
	t.Cleanup(func() { woken.Do(func() { close(wake) }) })
	var first atomic.Bool
	jobs.SetHooks(b.Runner, nil, func(int64) {
		if first.CompareAndSwap(false, true) { // the first send's drain waits here
			close(stalled)
			<-wake
		}
	})
	b.Start()
	b.Ingest("c1", "m1", "one")
	<-stalled
	// The failover, as the drain's session sees it: its backend is gone.
	var killed int
	if err := b.Pool.QueryRow(context.Background(), `
		SELECT count(pg_terminate_backend(l.pid))::int FROM pg_locks l
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid::bigint = $1
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`, int64(0x6f72646f)).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d drain sessions (%v), want 1", killed, err)
	}
	b.Ingest("c1", "m2", "two")
	b.WaitFor("a new drain to finish the conversation", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 2
	})
	var fence int64
	var provider string
	if err := b.Pool.QueryRow(context.Background(), `SELECT c.fence, s.provider_message_id FROM ordo.conversations c, ordo.steps s JOIN ordo.messages m ON m.id = s.message_pk WHERE m.message_id = 'm1'`).Scan(&fence, &provider); err != nil {
		t.Fatal(err)
	}
	woken.Do(func() { close(wake) })
	time.Sleep(500 * time.Millisecond) // the old drain tries to record its send
	sends := b.WhatsApp.Sends()
	if len(sends) != 3 || sends[0].Text != "one" || sends[1].Text != "one" || sends[2].Text != "two" {
		t.Fatalf("provider saw %d sends; want one (old drain), one (resent as ambiguous), two", len(sends))
	}
	var after string
	var ambiguous int
	if err := b.Pool.QueryRow(context.Background(), `SELECT s.provider_message_id, s.ambiguous_count FROM ordo.steps s JOIN ordo.messages m ON m.id = s.message_pk WHERE m.message_id = 'm1'`).Scan(&after, &ambiguous); err != nil {
		t.Fatal(err)
	}
	if after != provider || after != sends[1].WAMID {
		t.Fatalf("m1's recorded provider id changed from %q to %q after the old drain woke (new owner's send was %q)", provider, after, sends[1].WAMID)
	}
	if ambiguous != 1 {
		t.Fatalf("ambiguous_count = %d, want 1 (the resend is counted)", ambiguous)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.conversations WHERE head_seq = 2 AND fence = $1`, fence); n != 1 {
		t.Fatal("the old drain moved the conversation after waking")
	}
}
