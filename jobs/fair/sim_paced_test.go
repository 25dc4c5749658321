package fair

import (
	"fmt"
	"testing"
	"time"
)

// TestSimulatedPacedTenantSendsAtItsRate: a tenant paced at 80 sends a
// second (Meta's default per number) with a backlog of 8,000 messages in
// 800 conversations, alone on 16 workers (`make bench` noisy, paced). Each
// of its conversations waits for its send slot in the ready set, due at a
// time no notification announces, and keeps that slot for its next claim
// (ordo.reserve_send). The simulation took a new slot at each claim
// instead, and this tenant sent 2 messages in 12 s. (A model that forgot
// the slots' due times at each read of the ready set sent 29 a second in
// `make bench` noisy, and 79 here: the simulation reads far less often
// than a process does; the bench's target "burst alone ≥ 0.9 × its send
// rate" guards that.)
func TestSimulatedPacedTenantSendsAtItsRate(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds() {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			cfg := simConfig{
				seed: seed, workers: 16, duration: 12 * time.Second,
				sendMin: 5 * time.Millisecond, sendMax: 25 * time.Millisecond,
				campaigns: []campaign{{weight: 1, conversations: 800, messages: 10, gap: 12500 * time.Microsecond}},
			}
			m := runSim(t, cfg)
			sent := perSecond(m.tenants[0])
			t.Logf("%d sent in %s; %d reads of the ready set", m.tenants[0].sent, cfg.duration, m.reads)
			for sec := m.start.Unix() + 1; sec < m.start.Unix()+11; sec++ {
				if n := sent[sec]; n < 76 || n > 82 {
					t.Errorf("sent %d in second %d of its backlog; want its rate, 80 a second", n, sec-m.start.Unix())
				}
			}
		})
	}
}
