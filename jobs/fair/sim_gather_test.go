package fair

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// gatherWorld is a campaign on 16 workers whose messages arrive over time,
// each to one of its 2,000 conversations at random, at 500 a second (a
// message alone holds a worker about 16 ms: the workers are about half
// busy, two thirds counting the rounds that wait for their slowest send),
// beside quiet tenants (500 of them: one every 10 ms on average).
func gatherWorld(seed uint64, quiet int) simConfig {
	return simConfig{
		seed: seed, workers: 16, duration: 20 * time.Second,
		sendMin: 5 * time.Millisecond, sendMax: 25 * time.Millisecond,
		campaigns: []campaign{
			{weight: 1, conversations: 2000, messages: 5, every: 2 * time.Millisecond, shareUnchecked: true},
		},
		quiet: quiet, quietEvery: 5 * time.Second,
	}
}

// fullness is how many conversations tn's batch rounds held on average.
func fullness(tn *simTenant) float64 {
	if tn.rounds == 0 {
		return 0
	}
	return float64(tn.roundConvs) / float64(tn.rounds)
}

// TestSimulatedGathering: a campaign alone whose messages trickle in goes
// out in full batches, because its batches gather (Gather) — the
// conversations that become due while a round is under way join the
// batch at the round's end instead of being claimed one by one by idle
// runners. Without gathering (Gathering always false) its rounds held 1.9
// to 2.2 conversations on average; with it, 5.4 to 5.7.
func TestSimulatedGathering(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds() {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			cfg := gatherWorld(seed, 0)
			m := runSim(t, cfg)
			tn := m.tenants[0]
			room := float64(m.roomUsed) / float64(cfg.duration) / float64(cfg.workers)
			busy := float64(m.sending) / float64(cfg.duration) / float64(cfg.workers)
			t.Logf("%d sent, %d rounds, %.2f conversations a round, workers %.2f sending (room %.2f taken), longest wait for a claim %s",
				tn.sent, tn.rounds, fullness(tn), busy, room, tn.maxWait)
			if want := cfg.campaigns[0].conversations * cfg.campaigns[0].messages; tn.sent < want*95/100 {
				t.Errorf("%d of %d messages sent", tn.sent, want)
			}
			if f := fullness(tn); f < 4 {
				t.Errorf("the campaign's rounds held %.2f conversations on average; want its batches to gather (at least 4 of %d)", f, simBatchSize)
			}
			if bound := simTurnSlice + cfg.sendMax + 2*simClaimCost; tn.maxWait > bound {
				t.Errorf("a conversation waited %s for a claim; want at most a turn slice and a round (%s)", tn.maxWait, bound)
			}
		})
	}
}

// TestSimulatedGatheringBesideQuietTenants: the same campaign beside 500
// quiet tenants, one of which comes every 10 ms. While one waits or is
// due, the campaign is not alone: its batches neither refill nor gather,
// and the quiet tenant waits at most a turn slice and one send. In between
// they gather as before (without gathering: 2.8 conversations a round).
func TestSimulatedGatheringBesideQuietTenants(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds() {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			cfg := gatherWorld(seed, 500)
			m := runSim(t, cfg)
			tn := m.tenants[0]
			bound := simTurnSlice + cfg.sendMax + 2*simClaimCost
			worst := quantile(m.quietWaits, 1)
			// The campaign's own conversations wait for room its batches
			// hold (up to 139 ms here): its backlog, not another's.
			t.Logf("campaign: %d sent, %.2f conversations a round, longest wait for a claim %s; quiet tenants: %d waits, p99 %s, max %s (bound %s)",
				tn.sent, fullness(tn), tn.maxWait, len(m.quietWaits), quantile(m.quietWaits, 0.99), worst, bound)
			if worst > bound {
				t.Errorf("a quiet tenant waited %s for a worker; want at most a turn slice and one send (%s)", worst, bound)
			}
			if f := fullness(tn); f < 4 {
				t.Errorf("the campaign's rounds held %.2f conversations on average; want its batches to gather between quiet tenants (at least 4 of %d)", f, simBatchSize)
			}
		})
	}
}

// TestSimulatedGatheringRoundThatHangs: one send of a gathering batch
// takes 10 s. The campaign's other conversations must not wait for it:
// a gathering tenant sits out for at most a turn slice of its round, then
// other runners claim its conversations (with Gathering blind to the
// slice, they waited 10.3 to 12.5 s).
func TestSimulatedGatheringRoundThatHangs(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds() {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			cfg := gatherWorld(seed, 0)
			// A hung round holds its places (up to 7) for the hang: of 16
			// workers at 500 messages a second, the other 9 cannot keep
			// up, whoever chooses; of 20, the other 13 can. (The model's
			// table test has the case of seed 10 on 16 workers, where a
			// conversation waited 3 s with every runner idle.)
			cfg.workers = 20
			cfg.hang, cfg.hangAt, cfg.hangTenant = 10*time.Second, 5*time.Second, 1
			m := runSim(t, cfg)
			tn := m.tenants[0]
			t.Logf("hung: %v; %d sent, %.2f conversations a round, longest wait for a claim %s, %d waits",
				m.hung, tn.sent, fullness(tn), tn.maxWait, m.waits)
			if !m.hung {
				t.Fatal("no gathering batch's round hung")
			}
			if bound := simTurnSlice + cfg.sendMax + 2*simClaimCost; tn.maxWait > bound {
				t.Errorf("a conversation waited %s for a claim while a round hung; want at most a turn slice and a round (%s)", tn.maxWait, bound)
			}
		})
	}
}

// TestSimulatedGatheringRoundThatHangsAsTheCampaignEnds: the same hang
// when the campaign's last messages are in: with nothing else due, the
// runners that wait for work sleep a poll interval at a time, rather than
// wake every millisecond until the hung send returns (Wait counted the
// gathering round's slice after it was over: 155,000 wake-ups in 10 s).
// The hang is the first gathering round from 3 s on (from 4 s, on 3 of 20
// seeds no batch gathered again before the campaign ended).
func TestSimulatedGatheringRoundThatHangsAsTheCampaignEnds(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds() {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			cfg := gatherWorld(seed, 0)
			cfg.campaigns[0].conversations = 500 // 2,500 messages: 5 s of them
			cfg.hang, cfg.hangAt, cfg.hangTenant = 10*time.Second, 3*time.Second, 1
			m := runSim(t, cfg)
			tn := m.tenants[0]
			// A runner with nothing to claim waits a poll interval at most
			// (900 waits of 18 runners in 10 s); three times that is
			// plenty, and far from a wake-up every millisecond.
			most := 3 * len(m.runners) * int(cfg.hang/simPoll)
			t.Logf("hung: %v at %s; %d sent, %d waits for work, %d while the round hung (at most %d)",
				m.hung, m.hungAt.Sub(m.start), tn.sent, m.waits, m.waitsHung, most)
			if !m.hung {
				t.Fatal("no gathering batch's round hung")
			}
			if m.waitsHung > most {
				t.Errorf("runners waited %d times for work while a gathering round hung for %s; want at most %d (a poll interval each)", m.waitsHung, cfg.hang, most)
			}
		})
	}
}

// seeds are the simulation's seeds: 1 to 3, or to ORDO_SIM_SEEDS for a
// sweep (`ORDO_SIM_SEEDS=20 go test -run Simulated ./jobs/fair/`: a
// change to the model should hold beyond the seeds make test runs); one
// under the race detector.
func seeds() []uint64 {
	if raceEnabled {
		return []uint64{1}
	}
	n, _ := strconv.Atoi(os.Getenv("ORDO_SIM_SEEDS"))
	out := make([]uint64, max(n, 3))
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}
