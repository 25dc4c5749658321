package fair

import (
	"fmt"
	"testing"
	"time"
)

// TestSimulatedSteadyTenantBesideACampaign: a campaign's backlog beside a
// tenant whose messages come steadily, one every 10 ms on average, each
// to one of its 200 conversations. It nearly always has a drain running,
// so it is seldom urgent: its conversations get their workers through the
// round. The round used to wrap to its start right after its last visit
// and was then never read again while the campaign stayed in it, so the
// steady tenant's conversations waited until none of its drains ran for a
// turn slice: 382 to 436 of its 2,000 messages went out in 20 s, and
// one conversation waited 18.8 s for a claim.
func TestSimulatedSteadyTenantBesideACampaign(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds() {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			cfg := simConfig{
				seed: seed, workers: 16, duration: 20 * time.Second,
				sendMin: 5 * time.Millisecond, sendMax: 25 * time.Millisecond,
				campaigns: []campaign{
					{weight: 1, conversations: 2000, messages: 20, shareUnchecked: true},
					{weight: 1, conversations: 200, messages: 10, every: 10 * time.Millisecond, shareUnchecked: true},
				},
			}
			m := runSim(t, cfg)
			for _, v := range m.violations {
				t.Error(v)
			}
			steady := m.tenants[1]
			// A worker comes free within a turn slice and a send (the
			// campaign's batch ends its round); the tenant's own earlier
			// conversations, oldest first, may take it: one send more.
			bound := simTurnSlice + 2*cfg.sendMax + 2*simClaimCost
			t.Logf("steady tenant: %d sent, longest wait for a claim %s (bound %s); campaign: %d sent; %d reads of the ready set", steady.sent, steady.maxWait, bound, m.tenants[0].sent, m.reads)
			if steady.maxWait > bound {
				t.Errorf("a conversation of the steady tenant waited %s for a claim; want at most a turn slice and two sends (%s)", steady.maxWait, bound)
			}
		})
	}
}
