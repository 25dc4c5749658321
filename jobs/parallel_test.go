package jobs_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/tenants"
)

// Different conversations run in parallel (the contract's point 2), also
// two of one tenant: a message of a second conversation that comes in while
// the first's send is with the provider is claimed by an idle worker at
// once, not after that send, with or without other tenants' sends in
// flight. (The tenant is paced, as by default. An unpaced tenant's batch
// gathers instead: a conversation that becomes due meanwhile joins its next
// round, after the send, waiting at most a turn slice; fair.Scheduler.Gather.)
func TestASecondConversationDoesNotWaitForTheFirstsSend(t *testing.T) {
	t.Parallel()
	for _, others := range []int{0, 2} {
		t.Run(fmt.Sprintf("%d other tenants busy", others), func(t *testing.T) {
			t.Parallel()
			b := jobstest.Setup(t, jobstest.Options{})
			const slow = 2 * time.Second
			b.WhatsApp.SetResponder(func(req whatsapptest.Send, attempt int) whatsapptest.Response {
				r := whatsapptest.Default(req, attempt)
				if strings.HasPrefix(req.To, "first") {
					r.Delay = slow
				}
				return r
			})
			slugs := []string{"acme"}
			for i := range others {
				slug := fmt.Sprintf("other-%d", i)
				b.AddTenant(slug, fmt.Sprintf("P%d", 100+i), tenants.UpdateParams{})
				slugs = append(slugs, slug)
			}
			for _, s := range slugs {
				b.IngestFor(s, "first-"+s, "first-"+s, "first")
			}
			b.WaitFor("the first sends with the provider", 10*time.Second, func() bool {
				for _, s := range slugs {
					if len(b.WhatsApp.SendsTo("first-"+s)) != 1 {
						return false
					}
				}
				return true
			})
			at := time.Now()
			b.Ingest("second", "second-1", "second")
			b.WaitFor("the second sent", 10*time.Second, func() bool { return len(b.WhatsApp.SendsTo("second")) == 1 })
			if waited := b.WhatsApp.SendsTo("second")[0].At.Sub(at); waited > slow/2 {
				t.Fatalf("the second conversation's message reached the provider %s after its ingest, while the first's send took %s: it waited for it", waited, slow)
			}
		})
	}
}
