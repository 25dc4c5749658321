// Package fair decides which tenant a worker process's next free runner
// claims from, so that one tenant's backlog never delays another's runnable
// conversations by more than about one turn (contract point 8). It is a
// pure model: plain values, the clock passed in as now, no database and no
// goroutines. jobs/scheduler.go is the shell that feeds it the ready set
// and notifications and carries out its decisions; sim_test.go runs it in
// virtual time over a thousand tenants.
//
// The policy:
//
//   - The ready set (ordo.ready) holds every conversation that expects a
//     drain, with the time it is due. A summary of it — each tenant with a
//     conversation in it, its earliest due time, weight, cap and how many
//     of its conversations are due now — comes in through Refresh, at most
//     every RefreshMin, or when a tenant the model does not know became
//     due. A notification of a known tenant's conversation (NoteDue) adds
//     one to its count and puts it in the round without a read: how often
//     the ready set is read is not what makes the shares.
//   - A round visits each tenant that has a due conversation, in the
//     summary's order (tenant id), then as they became due, giving it
//     Weight claims, but no more than it has conversations due that this
//     process has not claimed (at 0 it leaves the round): weighted round
//     robin, without a claim for each runner a notification woke when one
//     batch took them all. What the round shares is what the workers send,
//     so a claim that took a batch of n conversations counts as n visits
//     (Took), a claim out of turn (urgent, handed) as one, and each
//     message a drain or a batch sends after its claim's first as one more
//     (Sent): the tenant skips as many of its next visits. When every
//     tenant of the round owes a round or more, they all owe as many rounds
//     less (deficit round robin); a tenant that leaves the round owes
//     nothing. A tenant whose claim found nothing to take (all taken, or at
//     its cap) leaves the round and sits out (Missed) until something may
//     have changed for it: a conversation of its became due, one of its
//     drains here ended or claimed, or a poll interval passed.
//   - A tenant that became due (NoteDue) and was not picked since is
//     waiting for a worker. A drain of another tenant that ran for a turn
//     slice stops at its next message boundary for it (DrainGoesOn,
//     HandOff) and its runner claims for that tenant first. A waiting
//     tenant with nothing running in this process is urgent (Urgent):
//     served before the round, and beyond the process's room when there
//     is none (Room.Overdraw).
//   - A batch (several conversations of one tenant drained together, one
//     write per round for all of them) costs a fraction of a message per
//     message; many small batches cost almost what drains alone do. So a
//     tenant alone in the round (Alone: no other tenant due or waiting)
//     is served by its batch running here, which takes more of its
//     conversations at each round (a refill), rather than by new claims:
//     while that batch is gathering (Gather), the tenant sits out of the
//     round, and its conversations that become due meanwhile join the
//     batch instead of starting batches of one or two of their own — for
//     at most a turn slice of its round; and while batch claims leave
//     due conversations behind, a free runner waits up to a turn slice
//     for room for half a batch before it takes less (Want). This is not
//     work-conserving on purpose: a gathering batch that can take only a
//     place or two more keeps its tenant's backlog from runners with room
//     free (in the simulation beside a steady tenant, up to 156 ms with
//     five of sixteen places free). Three rules that served that case cost more
//     elsewhere: gathering only while the batch could refill made the
//     simulated campaign's batches beside quiet tenants emptier (5.8 to
//     5.4 conversations a round) and let a hung round keep conversations
//     waiting up to 289 ms; gathering only while its tenant has no more
//     due than the batch can take cost `make bench` hot 0.69 to 0.77
//     transactions a message; sitting out a pick only while the batches
//     could take the picking runner's room gained that campaign 4 % for
//     emptier batches elsewhere (4.35 to 4.08 a round beside a hung one).
//     With another tenant due, batches do not refill, and a batch past
//     its turn slice ends: the workers go by the round, by weight.
//   - Each process keeps its own model; a tenant's cap holds across
//     processes because the claim takes one of its advisory-lock slots.
package fair

import (
	"cmp"
	"slices"
	"time"
)

// Turn is a tenant's place in a round.
type Turn struct {
	Tenant int64
	Weight int
	Cap    int // max_concurrency; 0 is none
}

// Due is one tenant's line of the ready set's summary: its weight and cap,
// and how long until its earliest conversation is due (0 or less: now).
type Due struct {
	Turn
	DueIn time.Duration
	// Ready is how many of its conversations are due now, as far as the
	// summary counted them (0: not counted, as many as it takes).
	Ready int
	// Later is, for a tenant with conversations due now, how long until
	// the earliest of its others is due (0: none, or not read).
	Later time.Duration
}

// readyUncounted stands for a count the summary did not give.
const readyUncounted = 1 << 30

// Decision is what the caller of Pick or Urgent does next.
type Decision int

const (
	// Go: claim from the turn returned.
	Go Decision = iota
	// None: nothing to claim now; wait (Wait says how long at most).
	None
	// Refresh: read the ready set's summary, give it to Refresh, and ask
	// again with fresh set.
	Refresh
)

// Config is a model's settings.
type Config struct {
	// Poll is how long a runner waits at most when nothing is due, and how
	// long a tenant that missed sits out at most.
	Poll time.Duration
	// RefreshMin is how often, at most, the ready set's summary is read
	// while nothing new became due.
	RefreshMin time.Duration
	// Slice is a turn: how long a drain runs before it stops for a tenant
	// that waits with nothing running, and how long a tenant whose last
	// drain here ended must have had nothing running to count as idle.
	Slice time.Duration
}

// Scheduler is the model. The zero value is not usable; see New.
type Scheduler struct {
	cfg       Config
	round     []Turn // this round's tenants, in order
	pos       int    // the current tenant in round
	left      int    // claims the current tenant has left in this visit
	stale     bool   // something the model cannot count became due: read the ready set before the next round
	refreshed time.Time
	// readAt is when the ready set was last read (a read in the middle of
	// a round too).
	readAt  time.Time
	nextDue time.Time // the earliest due time of a tenant not due at the last refresh
	// dueAt is when each tenant last had a conversation become due,
	// pickedAt when it was last picked: a tenant due since it was last
	// picked waits for a worker. handed are the tenants drains stopped
	// their turn for, picked before the round.
	dueAt    map[int64]time.Time
	pickedAt map[int64]time.Time
	// waiting are the tenants due since they were last picked: what
	// waitingSince and Alone look through, rather than every tenant ever
	// due (a runner waiting for room asks at every room change).
	waiting map[int64]struct{}
	handed  []int64
	// dueAny is when a conversation of a tenant not named last became due.
	dueAny time.Time
	// known is each tenant's weight and cap as last read.
	known map[int64]Turn
	// blocked are the tenants whose last claim found nothing, since when.
	blocked map[int64]time.Time
	// running counts each tenant's drains (and batches) in this process;
	// ended is when its last one ended.
	running map[int64]int
	ended   map[int64]time.Time
	// served counts the visits a tenant owes the round: its claims out of
	// turn (urgent, handed), the conversations of its batches beyond the
	// first (Took) and the messages its runs sent after their first
	// (Sent). Its next visits in the round skip as many, so that being
	// served early, in bulk or for long is not a share on top of its own.
	// A tenant that leaves the round owes nothing.
	served map[int64]int
	// ready is how many due conversations each tenant of the round has
	// left to claim, as far as this process knows: the summary's count,
	// one more for each conversation that became due since, less what its
	// claims took. A visit claims no more than that, so the runners that
	// notifications woke do not all claim for one conversation a batch
	// took already; a tenant at 0 leaves the round.
	ready map[int64]int
	// gathering holds, for each tenant with batches in this process that
	// take in its conversations as they become due (Gather), when the
	// current round of each began: it sits out of the round while one of
	// them is within a turn slice of it.
	gathering map[int64][]time.Time
	// backlogAt is when a batch claim here last left due conversations of
	// its tenant behind (StartBatch): Want asks for half a batch for
	// BacklogRecent after.
	backlogAt time.Time
}

// Wake says which runners waiting for work an event wakes.
type Wake int

const (
	// WakeNone wakes no runner.
	WakeNone Wake = iota
	// WakeWaiting wakes the runner that has waited longest, if one waits.
	WakeWaiting
	// WakeOne wakes that runner or, with none waiting, the next runner
	// that would wait (it does not).
	WakeOne
)

// New returns a model that reads the ready set before its first round.
func New(cfg Config) *Scheduler {
	return &Scheduler{cfg: cfg, stale: true,
		dueAt: map[int64]time.Time{}, pickedAt: map[int64]time.Time{}, waiting: map[int64]struct{}{}, known: map[int64]Turn{},
		blocked: map[int64]time.Time{}, running: map[int64]int{}, ended: map[int64]time.Time{}, served: map[int64]int{},
		ready: map[int64]int{}, gathering: map[int64][]time.Time{}}
}

// NoteDue records that a conversation of tenant became due at now (0: of
// a tenant not named): it may be waiting for a worker. A tenant whose
// weight and cap are known joins the round with one more conversation to
// claim, without a read of the ready set; for another, the next round
// reads it. Either way a runner is woken for it.
func (s *Scheduler) NoteDue(now time.Time, tenant int64) Wake {
	if tenant <= 0 {
		s.dueAny = now
		clear(s.blocked)
		s.stale = true
		return WakeOne
	}
	s.setDue(tenant, now)
	delete(s.blocked, tenant)
	t, known := s.known[tenant]
	if !known {
		s.stale = true
		return WakeOne
	}
	s.join(t, s.ready[tenant]+1)
	return WakeOne
}

// join puts t in the round, at its end, with n due conversations to claim
// (or keeps its place, with n).
func (s *Scheduler) join(t Turn, n int) {
	if s.ready[t.Tenant] <= 0 { // not in the round
		if s.pos >= len(s.round) {
			s.left = t.Weight
		}
		s.round = append(s.round, t)
	}
	s.ready[t.Tenant] = min(n, readyUncounted)
}

// claimed counts n of tenant's due conversations as claimed; at none left
// it leaves the round.
func (s *Scheduler) claimed(tenant int64, n int) {
	if s.ready[tenant] >= readyUncounted {
		return
	}
	if s.ready[tenant] -= n; s.ready[tenant] <= 0 {
		s.leave(tenant)
	}
}

// setDue records that a conversation of tenant became due at at.
func (s *Scheduler) setDue(tenant int64, at time.Time) {
	s.dueAt[tenant] = at
	s.mark(tenant)
}

// setPicked records that tenant was (last) picked at at.
func (s *Scheduler) setPicked(tenant int64, at time.Time) {
	s.pickedAt[tenant] = at
	s.mark(tenant)
}

// mark keeps waiting in step with dueAt and pickedAt.
func (s *Scheduler) mark(tenant int64) {
	if s.dueAt[tenant].After(s.pickedAt[tenant]) {
		s.waiting[tenant] = struct{}{}
	} else {
		delete(s.waiting, tenant)
	}
}

// waitingSince returns the tenant other than mine (0: none excluded) that
// has waited for a worker longest with nothing running in this process for
// a slice (urgent), if any. Ties go to the lower id, so that the model is
// deterministic.
//
// A tenant whose drain here just ended — it yielded its worker at a turn's
// end, or finished a conversation with more behind it — had its turn: it
// waits for the round like the others. Counting it idle at once served the
// lightest campaigns out of turn whenever their one drain ended
// (sim_test.go: a weight-1 tenant took 0.114 of the workers among weights
// 1 to 4, not 0.1).
func (s *Scheduler) waitingSince(now time.Time, mine int64) (int64, bool) {
	var (
		best   int64
		bestAt time.Time
	)
	for id := range s.waiting {
		if id == mine {
			continue
		}
		if _, blocked := s.blocked[id]; blocked || s.running[id] > 0 || now.Sub(s.ended[id]) < s.cfg.Slice {
			continue
		}
		at := s.dueAt[id]
		if best == 0 || at.Before(bestAt) || at.Equal(bestAt) && id < best {
			best, bestAt = id, at
		}
	}
	return best, best != 0
}

// Urgent returns a tenant that waits for a worker and has nothing running
// in this process, and counts it as picked at now: the one kind of claim
// that may go beyond the process's room. prev is when it was picked
// before, for Unpick. Refresh: the tenant's weight and cap are not known
// yet (a new process); read them and ask again with fresh.
func (s *Scheduler) Urgent(now time.Time, fresh bool) (t Turn, prev time.Time, d Decision) {
	if len(s.handed) > 0 {
		return Turn{}, time.Time{}, None // a drain stopped its turn for them: Pick serves them first
	}
	id, ok := s.waitingSince(now, 0)
	if !ok {
		return Turn{}, time.Time{}, None
	}
	t, known := s.known[id]
	if !known {
		if !fresh {
			s.stale = true
			return Turn{}, time.Time{}, Refresh
		}
		// Not in the ready set any more: nothing to wait for.
		s.setPicked(id, now)
		return Turn{}, time.Time{}, None
	}
	prev = s.pickedAt[id]
	s.setPicked(id, now)
	s.served[id]++
	s.claimed(id, 1)
	return t, prev, Go
}

// Unpick undoes Urgent's pick of tenant (picked before at prev): no room
// could be had for it.
func (s *Scheduler) Unpick(tenant int64, prev time.Time) {
	s.setPicked(tenant, prev)
	if s.served[tenant]--; s.served[tenant] <= 0 {
		delete(s.served, tenant)
	}
}

// WaitingTenant says whether tenant waits for a worker: a conversation of
// its became due since it was last picked.
func (s *Scheduler) WaitingTenant(tenant int64) bool {
	return s.dueAt[tenant].After(s.pickedAt[tenant])
}

// HandOff promises the calling drain's worker (a drain of mine that had
// its turn slice) to the tenant other than mine that has waited longest
// with nothing running here, if any: it counts as picked at now (no other
// drain stops for it) and is the next pick. A tenant that has drains
// running gets its share through the round, by weight; stopping drains
// for it too would hand workers round the backlogged tenants in turn,
// whatever their weights (sim_test.go found equal shares for weights 1
// to 4).
func (s *Scheduler) HandOff(now time.Time, mine int64) bool {
	t, ok := s.waitingSince(now, mine)
	if !ok {
		return false
	}
	s.setPicked(t, now)
	s.handed = append(s.handed, t)
	s.served[t]++ // out of turn, as an urgent pick
	return true
}

// PassOn records that a runner claimed from tenant at now (a drain, or a
// batch, now running). more: another of its conversations was due behind
// the claimed one — one more runner that waits is woken for it, unless a
// batch of the tenant gathers it; without it the tenant leaves the round
// until the next summary finds it due.
func (s *Scheduler) PassOn(now time.Time, tenant int64, more bool) Wake {
	delete(s.blocked, tenant)
	s.running[tenant]++
	t, known := s.known[tenant]
	switch {
	case !more:
		s.leave(tenant)
		return WakeNone
	case known && s.ready[tenant] <= 0:
		s.join(t, 1) // the claim saw more than this process counted
	}
	if s.Gathering(now, tenant) {
		return WakeNone
	}
	return WakeWaiting
}

// Took records that a claim of tenant took n conversations (a batch of
// n): the round shares the workers by weight, not the claims, so each
// conversation beyond the first counts as one of the tenant's next visits
// of the round, which it skips. Counting claims, a weight-1 tenant took
// 0.13 of the workers among weights 1 to 4, not 0.1 (sim_test.go): claims
// took 1 to 8 conversations, the larger ones when room had just been
// given back — as when a drain handed its worker to a tenant.
func (s *Scheduler) Took(tenant int64, n int) {
	if n > 1 {
		s.served[tenant] += n - 1
		s.claimed(tenant, n-1)
	}
}

// Refilled records that a batch of tenant running here took n more of its
// due conversations at a round's end (a refill): not the round's to claim
// any more.
func (s *Scheduler) Refilled(tenant int64, n int) { s.claimed(tenant, n) }

// Sent records that n more messages of tenant go out on workers its
// drains and batches hold already: a drain's next message, a batch's next
// round. The round shares what the workers send, not the claims: a
// campaign's batch that runs round after round on the conversations of
// one claim costs its tenant a visit per message, as a tenant whose
// conversations each carry one message pays a claim for each. Counting
// claims, a steady tenant beside a campaign waited up to 226 ms for a
// worker once the ready set was no longer read on each notification
// (sim_steady_test.go, 20 seeds; the bound is 152 ms).
func (s *Scheduler) Sent(tenant int64, n int) {
	if n > 0 {
		s.served[tenant] += n
	}
}

// Released records that a drain (or batch) of tenant in this process
// ended. capped: it held one of the tenant's concurrency slots, about to be
// free: the next round reads the ready set again, and a runner is woken to
// use it.
func (s *Scheduler) Released(now time.Time, tenant int64, capped bool) Wake {
	delete(s.blocked, tenant)
	if s.running[tenant]--; s.running[tenant] <= 0 {
		delete(s.running, tenant)
		s.ended[tenant] = now
	}
	if capped {
		s.stale = true
		return WakeOne
	}
	return WakeNone
}

// Alone says whether tenant is the only one that wants a worker here at
// now: no other tenant is in the round (due at the last read of the ready
// set, not sitting out a miss) or waiting for a worker since. Only then
// may a batch of tenant take more of its conversations (a refill) and
// gather: with another tenant due, every claim goes by the round.
func (s *Scheduler) Alone(now time.Time, tenant int64) bool {
	for _, t := range s.round {
		if _, blocked := s.blocked[t.Tenant]; t.Tenant != tenant && !blocked {
			return false
		}
	}
	for id := range s.waiting {
		if id != tenant {
			return false
		}
	}
	return true
}

// Gather records that a batch of tenant running in this process starts a
// round at now after which it takes in more of the tenant's conversations
// (on: it has room for more, and the tenant is Alone), or that it stopped
// doing so; since is when its previous such round began (zero: it did not
// gather). It returns the batch's since for its next call: now, or zero.
// While a batch gathers, the tenant sits out of the round: its
// conversations that become due meanwhile wait for that round's end, not
// for a claim — but not past a turn slice of the batch's own round (a
// send that hangs must not hold the tenant's others, whatever its other
// batches do). When the last within its slice stops, the tenant is back
// in the round with what became due meanwhile and its batches did not
// take (Refilled), and a runner is woken for it. (It read the ready set for that, after every
// batch: a read a message in a trickle.)
func (s *Scheduler) Gather(now time.Time, tenant int64, on bool, since time.Time) (time.Time, Wake) {
	g := s.gathering[tenant]
	if !since.IsZero() {
		if i := slices.Index(g, since); i >= 0 {
			g = slices.Delete(g, i, i+1)
		}
	}
	if on {
		s.gathering[tenant] = append(g, now)
		return now, WakeNone
	}
	if since.IsZero() {
		return time.Time{}, WakeNone
	}
	if len(g) > 0 {
		s.gathering[tenant] = g
	} else {
		delete(s.gathering, tenant)
		if _, known := s.known[tenant]; !known {
			s.stale = true
		}
	}
	if s.Gathering(now, tenant) {
		return time.Time{}, WakeNone
	}
	return time.Time{}, WakeOne
}

// Merge says whether a gathering batch of tenant holding own of the most
// a batch may hold should end its run at this round, so that another
// batch of the tenant that gathers here takes its room and conversations:
// batches started as conversations trickled in (or the room came back a
// little at a time) would otherwise share the room among them for good,
// each round recording a few sends where one could record them all.
// The smaller half yields; two small ones both yield, and the next claim
// takes their room at once.
func (s *Scheduler) Merge(tenant int64, own, most int) bool {
	return len(s.gathering[tenant]) > 1 && 2*own <= most
}

// Gathering says whether a batch of tenant gathers at now in this process
// (Gather), within a turn slice of its own round's start. Counting the
// tenant's latest round start for all its batches, one batch whose send
// hung kept the tenant out of the round as long as another gathered now
// and then: its due conversations waited up to 3 s with every runner idle
// (sim_gather_test.go, seed 10).
func (s *Scheduler) Gathering(now time.Time, tenant int64) bool {
	return slices.ContainsFunc(s.gathering[tenant], func(at time.Time) bool { return now.Sub(at) < s.cfg.Slice })
}

// Running is how many drains of tenant run in this process.
func (s *Scheduler) Running(tenant int64) int { return s.running[tenant] }

// DueIn records that a drain of this process parked its conversation
// until now+d: nothing else tells the model of a conversation that becomes
// due by time. One due now (d 0: a yield, or a drain that caught up) is
// notified by the park itself (ordo.park_conversation, ordo.finish): taking
// it as due by time made the next pick of every runner read the ready set
// after each drain (a read per message in a trickle).
func (s *Scheduler) DueIn(now time.Time, d time.Duration) {
	if d <= 0 {
		return
	}
	if at := now.Add(d); at.Before(s.nextDue) {
		s.nextDue = at
	}
}

// Missed records that tenant had nothing to claim at now, for a claim
// asked at asked: it leaves the round and sits out until something may
// have changed for it — unless something did while the claim was on its
// way (a conversation of its, or of a tenant not named, became due after
// asked): the claim may have been answered before that conversation was
// there, and the runner its notification woke must find the tenant.
func (s *Scheduler) Missed(now time.Time, tenant int64, asked time.Time) {
	s.leave(tenant)
	if s.dueAt[tenant].After(asked) || s.dueAny.After(asked) {
		return
	}
	s.blocked[tenant] = now
}

// WakeAll forgets every tenant's miss and reads the ready set before the
// next round (a stop, or notifications that may have been missed).
func (s *Scheduler) WakeAll() {
	s.stale = true
	clear(s.blocked)
}

// Waited records that a runner waited until now without being woken:
// conversations may have become due by time (in another process: a known
// due time of this one's is nextDue), and a slot freed by another process
// tells no one, so the ready set is read unless it was within a poll
// interval, and tenants blocked for a poll interval are tried again. Each
// idle runner's poll read it before: 18 runners, 90 reads a second of an
// idle process (286 of a trickle's 300 messages' reads).
func (s *Scheduler) Waited(now time.Time) {
	if now.Sub(s.readAt) >= s.cfg.Poll {
		s.stale = true
	}
	for id, at := range s.blocked {
		if now.Sub(at) >= s.cfg.Poll {
			delete(s.blocked, id)
		}
	}
}

// Wait is how long a runner with nothing to claim waits at most at now:
// until the earliest known due time, or a poll interval.
func (s *Scheduler) Wait(now time.Time) time.Duration {
	d := min(s.nextDue.Sub(now), s.cfg.Poll)
	for _, g := range s.gathering {
		for _, at := range g {
			// A round that outlasts its slice: the tenant's due
			// conversations are for claims again. Once it has (a send
			// that hangs), that is no reason to wake: the runners woke
			// every millisecond until the send returned (sim_test.go).
			if end := at.Add(s.cfg.Slice); end.After(now) {
				d = min(d, end.Sub(now))
			}
		}
	}
	return max(d, time.Millisecond)
}

// Pick returns the tenant to claim from next, counted as picked at now:
// tenants drains handed their worker to first, then an urgent tenant, then
// the round. fresh says the ready set was just read (Refresh).
func (s *Scheduler) Pick(now time.Time, fresh bool) (Turn, Decision) {
	for len(s.handed) > 0 {
		id := s.handed[0]
		t, ok := s.known[id]
		if !ok && !fresh {
			s.stale = true
			return Turn{}, Refresh
		}
		s.handed = s.handed[1:]
		if ok {
			s.claimed(id, 1)
			return t, Go
		}
	}
	// Then a tenant that waits with nothing running here: the round may be
	// on a campaign's tenant, whose batches would take the room before the
	// round reached it.
	if t, _, d := s.Urgent(now, fresh); d != None {
		return t, d
	}
	if s.pos >= len(s.round) {
		if !fresh && s.needsRefresh(now) {
			return Turn{}, Refresh
		}
		// Nothing became due since the last read: repeat its round.
		if s.pos = 0; len(s.round) > 0 {
			s.left = s.round[0].Weight
		}
		if len(s.round) == 0 {
			return Turn{}, None
		}
	}
	// A tenant whose batch gathers is served by it: no claim for it.
	if !slices.ContainsFunc(s.round, func(t Turn) bool { return !s.Gathering(now, t.Tenant) }) {
		return Turn{}, None
	}
	s.settle(now)
	// Skip the visits of tenants served out of turn — unless every tenant
	// of the round was: then the next one goes all the same (a round of
	// one tenant must not come back empty). The round goes round once
	// more only while skipping: after its last visit it is over, and the
	// next pick reads who is due (a round that wrapped at once was never
	// read again while its tenants stayed in it, and a tenant with a
	// drain running here, so not urgent, got no claim meanwhile).
	for skipped := 0; ; {
		if s.pos >= len(s.round) {
			s.pos, s.left = 0, s.round[0].Weight
		}
		t := s.round[s.pos]
		if s.Gathering(now, t.Tenant) {
			s.advance()
			continue
		}
		s.left--
		if s.left <= 0 {
			s.advance()
			skipped++
		}
		if s.served[t.Tenant] > 0 && skipped < len(s.round) {
			if s.served[t.Tenant]--; s.served[t.Tenant] == 0 {
				delete(s.served, t.Tenant)
			}
			continue
		}
		s.setPicked(t.Tenant, now)
		s.claimed(t.Tenant, 1)
		return t, Go
	}
}

// settle: when every tenant the round visits owes it a round or more of
// visits (its weight's worth), skipping them would serve none of them;
// each owes as many rounds less as the one that owes fewest, as if they
// had passed. Without it the tenant the skips wrapped round to went,
// however much it owed: a campaign owing 800 visits took every claim
// while a steady tenant owed one (sim_steady_test.go, seed 16: a wait
// of 757 ms).
func (s *Scheduler) settle(now time.Time) {
	rounds := -1
	for _, t := range s.round {
		if n := s.served[t.Tenant] / max(t.Weight, 1); !s.Gathering(now, t.Tenant) && (rounds < 0 || n < rounds) {
			rounds = n
		}
	}
	if rounds <= 0 {
		return
	}
	for _, t := range s.round {
		if s.served[t.Tenant] -= rounds * max(t.Weight, 1); s.served[t.Tenant] <= 0 {
			delete(s.served, t.Tenant)
		}
	}
}

// needsRefresh says whether the next round must read the ready set again:
// something the model cannot count became due, a known due time came, or
// — after a round that had tenants in it — RefreshMin passed. After an
// empty one, the due time (a poll interval at most after the last read)
// is enough: reading every RefreshMin read the ready set at each idle
// runner's poll.
func (s *Scheduler) needsRefresh(now time.Time) bool {
	return s.stale || !now.Before(s.nextDue) || len(s.round) > 0 && now.Sub(s.refreshed) >= s.cfg.RefreshMin
}

// Refresh takes in the ready set's summary read at now: each tenant's
// weight and cap, and the earliest later due time, which bounds the next
// wait. When the round is over it starts the next one over the tenants
// with a conversation due now, in rows' order, less those sitting out a
// miss. A read in the middle of a round (for an urgent or handed tenant's
// weight and cap) leaves the round where it is: restarting it there put
// the first tenants of every round ahead of the last, which starved
// (sim_test.go: a weight-4 tenant went 19 s without a worker while a
// thousand quiet tenants came in).
func (s *Scheduler) Refresh(now time.Time, rows []Due) {
	midRound := s.pos < len(s.round)
	// A conversation that became due since the last read, of a tenant not
	// picked since, makes that tenant wait for a worker as its
	// notification would have: a notification can be lost (a listener
	// reconnecting) or late (a starved process), and the ready set is the
	// truth. Not on the first read: everything is due then.
	if !s.readAt.IsZero() {
		for _, r := range rows {
			if at := now.Add(r.DueIn); r.DueIn <= 0 && at.After(s.readAt) && s.pickedAt[r.Tenant].Before(at) && s.dueAt[r.Tenant].Before(at) {
				s.setDue(r.Tenant, at)
			}
		}
	}
	s.readAt = now
	var round []Turn
	if !midRound {
		round = s.round[:0]
	}
	// The next due time: a poll interval at most, the earliest a tenant
	// not due now has, the earliest after now of a tenant due now, and a
	// park of this process's still ahead (DueIn). Without the last two a
	// paced tenant's conversations, each due at its send slot, waited for
	// the poll once the one due at the read was claimed (80/s paced sent
	// 29 a second).
	next := now.Add(s.cfg.Poll)
	if s.nextDue.After(now) && s.nextDue.Before(next) {
		next = s.nextDue
	}
	ready := map[int64]int{}
	for _, r := range rows {
		s.known[r.Tenant] = r.Turn
		if r.DueIn <= 0 {
			ready[r.Tenant] = cmp.Or(r.Ready, readyUncounted)
			if r.Later > 0 && now.Add(r.Later).Before(next) {
				next = now.Add(r.Later)
			}
		}
		if at, blocked := s.blocked[r.Tenant]; blocked {
			// It sits out while something of its is due and nothing may
			// have changed for it. It is tried again once nothing is due
			// now (its next conversation is tried when due), once a
			// conversation of its became due since the miss (the read
			// above finds one whose notification was lost), or a poll
			// interval after the miss: with every runner busy (a
			// campaign) none waits, and Waited never comes.
			if r.DueIn <= 0 && !s.dueAt[r.Tenant].After(at) && now.Sub(at) < s.cfg.Poll {
				continue
			}
			delete(s.blocked, r.Tenant)
		}
		if r.DueIn <= 0 {
			if !midRound {
				round = append(round, r.Turn)
			}
		} else if at := now.Add(r.DueIn); at.Before(next) {
			next = at
		}
	}
	s.nextDue = next
	if midRound {
		for id := range s.ready {
			if n, ok := ready[id]; ok {
				s.ready[id] = n
			}
		}
		return // stale stays as it was: the next round reads again if need be
	}
	s.round, s.pos, s.stale, s.refreshed = round, 0, false, now
	clear(s.ready)
	for _, t := range round {
		s.ready[t.Tenant] = ready[t.Tenant]
	}
	if len(s.served) > 0 {
		// A tenant out of the new round owes it nothing: a quiet
		// tenant served out of turn again and again must not skip its
		// visits when it has a backlog one day.
		in := make(map[int64]bool, len(round))
		for _, t := range round {
			in[t.Tenant] = true
		}
		for id := range s.served {
			if !in[id] {
				delete(s.served, id)
			}
		}
	}
	if len(round) > 0 {
		s.left = round[0].Weight
	}
}

// RefreshFailed records that the ready set could not be read: no round
// until it can be.
func (s *Scheduler) RefreshFailed() { s.round, s.pos = s.round[:0], 0 }

// advance moves to the next tenant of the round.
func (s *Scheduler) advance() {
	s.pos++
	if s.pos < len(s.round) {
		s.left = s.round[s.pos].Weight
	}
}

// leave takes tenant out of the round, wherever it is; it owes the round
// nothing then.
func (s *Scheduler) leave(tenant int64) {
	delete(s.ready, tenant)
	delete(s.served, tenant)
	i := slices.IndexFunc(s.round, func(t Turn) bool { return t.Tenant == tenant })
	if i < 0 {
		return
	}
	s.round = slices.Delete(s.round, i, i+1)
	switch {
	case i < s.pos:
		s.pos--
	case i == s.pos && s.pos < len(s.round):
		s.left = s.round[s.pos].Weight
	}
}

// Room counts the conversations a process may still take on: Workers in
// all, shared by its drains and batches, and overdrawn by at most Over for
// urgent tenants. Free goes below 0 while overdrawn.
type Room struct {
	Free, Over int
}

// OverdraftFor is how far beyond its room a process of workers goes for
// urgent tenants (and how many runners it keeps beyond workers for them).
func OverdraftFor(workers int) int { return max(1, workers/8) }

// Grab takes up to most when at least want (1 or more) is free; 0 when it
// cannot.
func (r *Room) Grab(most, want int) int {
	if r.Free < want || r.Free <= 0 {
		return 0
	}
	n := min(r.Free, most)
	r.Free -= n
	return n
}

// Overdraw takes one beyond the room, at most Over beyond it at once.
func (r *Room) Overdraw() bool {
	if r.Free <= -r.Over {
		return false
	}
	r.Free--
	return true
}

// Give returns n taken by Grab or Overdraw.
func (r *Room) Give(n int) { r.Free += max(n, 0) }

// BacklogRecent is how long after a batch claim left due conversations
// behind a free runner still waits for room for half a batch (Want).
const BacklogRecent = time.Second

// Want is the room a free runner that began to look at since wants at
// now before it claims: half a batch (of most) while batch claims here
// leave due conversations behind (the last within BacklogRecent), until
// it has looked for a turn slice, so that room given back gathers into
// full batches instead of scattering into batches of one or two; one
// otherwise. later is how long until the answer drops to one (0: it is
// one).
func (s *Scheduler) Want(now, since time.Time, most int) (want int, later time.Duration) {
	if want = max(1, most/2); want == 1 || s.backlogAt.IsZero() || now.Sub(s.backlogAt) >= BacklogRecent {
		return 1, 0
	}
	if later = min(s.cfg.Slice-now.Sub(since), BacklogRecent-now.Sub(s.backlogAt)); later <= 0 {
		return 1, 0
	}
	return want, later
}

// Take is a free runner's decision for room at now, given the room it
// wants (Want): room to claim from the round (n > 0, d Go, urgent false:
// Pick says whose), room for an urgent tenant (urgent true, t its turn),
// or none (d None: wait for room to be given back, or Refresh: read the
// ready set and ask again).
func Take(s *Scheduler, r *Room, now time.Time, most, want int, fresh bool) (n int, t Turn, urgent bool, d Decision) {
	if n := r.Grab(most, want); n > 0 {
		return n, Turn{}, false, Go // Pick serves urgent tenants first
	}
	t, prev, d := s.Urgent(now, fresh)
	if d == None && !fresh && now.Sub(s.readAt) >= s.cfg.Poll {
		// No room, and no tenant known to wait: after a poll interval, read
		// the ready set for one whose notification never came.
		return 0, Turn{}, false, Refresh
	}
	if d != Go {
		return 0, Turn{}, false, d
	}
	if n := r.Grab(most, 1); n > 0 {
		return n, t, true, Go
	}
	if r.Overdraw() {
		return 1, t, true, Go
	}
	s.Unpick(t.Tenant, prev) // as much overdrawn as may be
	return 0, Turn{}, false, None
}
