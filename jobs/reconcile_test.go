package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

// The reconciler's safety net, the only way the message gets out: a
// conversation with work missing from the ready set — its row deleted by
// hand, or a message written by hand behind ingest's back while the
// workers run — is found by the table scan every OrphanInterval (and at
// start).
func TestReconcilerReschedulesStrandedAndOrphanedConversations(t *testing.T) {
	t.Parallel()
	for _, orphan := range []bool{false, true} {
		name := "row_gone"
		if orphan {
			name = "orphan"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{
				OrphanInterval: 300 * time.Millisecond,
			}})
			ctx := context.Background()
			want := map[string][]string{"c1": {"one"}}
			if orphan {
				b.Start()
				b.Ingest("c1", "m1", "one")
				b.WaitFor("m1 to be finished", 10*time.Second, func() bool {
					return b.Count(`SELECT count(*) FROM ordo.conversations c WHERE head_seq = 1 AND NOT EXISTS (SELECT 1 FROM ordo.ready r WHERE r.conversation_pk = c.id)`) == 1
				})
				time.Sleep(500 * time.Millisecond) // past the orphan look at start
				if _, err := b.Pool.Exec(ctx, `
WITH c AS (UPDATE ordo.conversations SET last_seq = 2 RETURNING id, tenant_id)
INSERT INTO ordo.messages (tenant_id, conversation_pk, message_id, seq, direction, payload)
SELECT tenant_id, id, 'm2', 2, 'outbound', $1 FROM c`, jobstest.Outbound("c1", "two")); err != nil {
					t.Fatal(err)
				}
				want["c1"] = append(want["c1"], "two")
			} else {
				b.Ingest("c1", "m1", "one")
				if _, err := b.Pool.Exec(ctx, `DELETE FROM ordo.ready`); err != nil {
					t.Fatal(err)
				}
				b.Start()
			}
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := b.WhatsApp.WaitForSends(wctx, len(want["c1"])); err != nil {
				t.Fatalf("the reconciler did not re-schedule the conversation: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
			if rep := whatsapptest.Check(b.WhatsApp.Sends(), want); !rep.OK() {
				t.Fatalf("provider saw: %s", rep)
			}
		})
	}
}
