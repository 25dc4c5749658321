package fair

import (
	"slices"
	"sort"
	"time"
)

// Batches in the simulation, as jobs/batch.go drains them. A runner whose
// pick is an unpaced, uncapped tenant (ordo.may_batch) claims up to the
// room it took of the tenant's conversations due longest, gives back the
// room it did not use, and drains them in rounds: each round sends one
// message of every conversation at once (it takes the slowest send) and
// records them in one write (a claim's cost); a conversation that caught
// up leaves. After a round the run goes on within MaxMessagesPerRun
// rounds and MaxRunTime, past a turn slice only while its tenant is
// alone and no tenant waits (HandOff), and not for a small gathering
// batch beside a larger one (Merge); when it ends, every conversation
// with messages left is due again at once. While its tenant is Alone, the write also refills
// the batch (more of the tenant's due conversations, free room grabbed up
// to BatchSize), and a batch that will refill with room for more gathers
// (Gather) at its next round's start.

// simBatch is one batch claim's run: the model's Batch, which decides
// at its rounds' ends as it does for jobs/batch.go.
type simBatch struct {
	Batch
	tn     *simTenant
	active []*simConv // this round's conversations
}

// dueOf returns up to most of tn's due conversations no drain holds, due
// longest first (ordo.claim's walk), and whether another was due behind
// them.
func (m *sim) dueOf(tn *simTenant, most int) (out []*simConv, more bool) {
	for _, cv := range m.convs[tn.id] {
		if !cv.inReady || cv.running || cv.due.After(m.now) {
			continue
		}
		if len(out) == most {
			more = true
			if most == 0 || !cv.due.Before(out[most-1].due) {
				continue
			}
			out = out[:most-1]
		}
		i := sort.Search(len(out), func(i int) bool { return cv.due.Before(out[i].due) })
		out = slices.Insert(out, i, cv)
	}
	return out, more
}

// claimBatch is ordo.claim for a batch of up to n (the room r took) of
// t's conversations.
func (m *sim) claimBatch(r *simRunner, t Turn, n int) {
	tn := m.tenants[t.Tenant-1]
	convs, more := m.dueOf(tn, n)
	if len(convs) == 0 {
		// Nothing due (the claim alone would find nothing either): a
		// miss, a claim's cost later.
		m.room.Give(n)
		m.pokeRoom()
		asked := m.now
		m.at(simClaimCost, func() {
			m.s.Missed(m.now, t.Tenant, asked)
			m.free(r)
		})
		return
	}
	for _, cv := range convs {
		m.claimed(cv)
		cv.running = true
	}
	tn.running += len(convs)
	tn.most = max(tn.most, tn.running)
	b := &simBatch{Batch: Batch{Tenant: tn.id, Most: simBatchSize, Own: n}, tn: tn, active: convs}
	r.batch = b
	// The claim's answer, a round trip later (jobs.Runner.runDrains, then
	// drainBatch): the room not used goes back, and the batch starts.
	m.at(simClaimCost, func() {
		m.room.Give(n - len(convs))
		b.Own = len(convs)
		m.pokeRoom()
		m.wake(m.s.StartBatch(m.now, &b.Batch, more))
		m.round(r)
	})
}

// round sends one message of each of the batch's conversations at once:
// the round takes the slowest send.
func (m *sim) round(r *simRunner) {
	b := r.batch
	b.tn.rounds++
	b.tn.roundConvs += len(b.active)
	var d time.Duration
	for range b.active {
		d = max(d, m.send())
	}
	if c := m.cfg; c.hang > 0 && !m.hung && b.tn.id == c.hangTenant && !b.Gathering.IsZero() && m.now.Sub(m.start) >= c.hangAt {
		m.hung, m.hungAt, d = true, m.now, c.hang
	}
	m.inFlight += len(b.active)
	m.at(d, func() {
		m.inFlight -= len(b.active)
		m.roundSent(r)
	})
}

// roundSent is a round's end, as drainBatch decides it: whether the run
// goes on, and whether the batch refills (its tenant alone: free room
// joins it first); the round's write takes a claim's cost.
func (m *sim) roundSent(r *simRunner) {
	b := r.batch
	tn := b.tn
	for range b.active {
		m.count(tn)
	}
	// Past its turn slice, a batch goes on only while its tenant is alone
	// and no tenant waits for its worker (GoesOn). Without Alone there,
	// batches ran on among other tenants until one waited with nothing
	// running, 30 rounds on average here, and a claim's share of the
	// workers was up to 8 conversations for that long: the weight-1
	// tenant's share went from 0.074 to 0.109 between seeds, and it went
	// 6.5 s without a send.
	goOn := m.s.GoesOn(m.now, &b.Batch, RunLimits{Rounds: simMaxMessagesPerRun, Time: simMaxRunTime})
	refill := m.s.Refills(m.now, &b.Batch, goOn)
	if refill {
		b.Own += m.room.Grab(b.Most-b.Own, 1)
	}
	m.at(simClaimCost, func() { m.finish(r, goOn, refill) })
}

// finish is the round's write (ordo.finish, then ordo.claim for a
// refill) and what drainBatch does with its answer.
func (m *sim) finish(r *simRunner, goOn, refill bool) {
	b := r.batch
	tn := b.tn
	var next []*simConv
	parked := false
	for _, cv := range b.active {
		cv.pending--
		switch {
		case cv.pending == 0: // caught up: out of the ready set
			cv.inReady, cv.running = false, false
			tn.running--
		case goOn: // its next message starts for the next round
			next = append(next, cv)
		default: // due again now, behind its tenant's others
			cv.running, cv.due, cv.waitingAt = false, m.now, m.now
			tn.running--
			parked = true
		}
	}
	if parked {
		m.notify(tn.id)
	}
	// The refill takes the room of those that left once that is half the
	// batch's and another conversation of the tenant is due. (Every
	// conversation here may go in a batch: a refill that finds none to
	// take — drainBatch's blocked — does not happen.)
	if free := b.Own - len(next); refill && free > 0 && free*2 >= b.Own {
		convs, _ := m.dueOf(tn, free)
		m.s.Refilled(tn.id, len(convs))
		for _, cv := range convs {
			m.claimed(cv)
			cv.running = true
		}
		tn.running += len(convs)
		tn.most = max(tn.most, tn.running)
		next = append(next, convs...)
	}
	if surplus := b.Surplus(len(next), 0, goOn, refill); surplus > 0 {
		b.Own -= surplus
		m.room.Give(surplus)
		m.pokeRoom()
	}
	b.active = next
	m.wake(m.s.RoundDone(m.now, &b.Batch, len(next), 0, refill, false))
	if len(next) == 0 {
		m.room.Give(b.Own)
		b.Own = 0
		m.pokeRoom()
		r.batch = nil
		m.wake(m.s.Released(m.now, tn.id, false))
		m.at(0, func() { m.free(r) })
		return
	}
	m.round(r)
}
