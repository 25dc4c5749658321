package fair

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

// The simulation runs the model the way one worker process runs it
// (jobs/runner.go, jobs/batch.go) — runners that take room, pick a tenant
// and claim: for an unpaced, uncapped tenant a batch of its conversations
// due longest, drained in rounds (sim_batch_test.go); for a paced or
// capped one its conversation due longest, drained message by message,
// handing their worker over at a boundary past the turn slice — in
// virtual time, against a ready set kept in memory the way ordo.ready
// keeps it: due times, notifications for conversations that become due
// now, parks for paced sends, caps held across the claim. Sends take a few
// milliseconds of virtual time each; nothing sleeps, so a minute of a
// thousand tenants costs about a second of CPU.

// simConfig is one simulated world.
type simConfig struct {
	seed     uint64
	workers  int
	duration time.Duration
	// campaigns are backlogged tenants: conversations × messages queued at
	// the start, with a weight, a cap (0: none) and a send gap (paced: the
	// number's 1/rate; 0: unpaced).
	campaigns []campaign
	// quiet tenants send one message now and then (every quietEvery on
	// average, at random).
	quiet      int
	quietEvery time.Duration
	// send is a message's time at the provider: uniform in [sendMin, sendMax].
	sendMin, sendMax time.Duration
	// hang, if set, makes one send of a batch of tenant hangTenant take
	// hang: the first in a round that starts at hangAt or later while the
	// batch gathers.
	hang, hangAt time.Duration
	hangTenant   int64
}

type campaign struct {
	weight, cap    int
	conversations  int
	messages       int // per conversation (on average, with every)
	gap            time.Duration
	startsAt       time.Duration // when its backlog is imported
	shareUnchecked bool
	// every, if set, spreads the messages over time instead of queueing
	// them at startsAt: one every so long on average (at random), each to
	// a conversation taken at random.
	every time.Duration
}

const (
	simTurnSlice    = 100 * time.Millisecond // jobs.TurnSliceDefault
	simMaxRunTime   = 5 * time.Second        // jobs.MaxRunTimeDefault
	simPaceMaxSleep = 20 * time.Millisecond  // jobs.PaceMaxSleepDefault
	simClaimCost    = time.Millisecond       // a claim's round trip
	simLease        = 30 * time.Second
	simPoll         = 200 * time.Millisecond // jobs.FetchPollIntervalDefault
	// simMaxMessagesPerRun bounds a drain's messages, a batch's rounds
	// (jobs.MaxMessagesPerRunDefault).
	simMaxMessagesPerRun = 100
	simBatchSize         = 8   // jobs.BatchSizeDefault
	simReadyCountMax     = 256 // jobs.ReadyCountMax
)

type simTenant struct {
	id       int64
	c        campaign
	quiet    bool
	running  int // drains at once (across "processes": the claim enforces the cap)
	most     int
	sent     int
	sentIn   int // inside the measured window
	nextSlot time.Time
	sends    []time.Time
	// rounds counts its batches' rounds, roundConvs their conversations:
	// how full its batches ran.
	rounds, roundConvs int
	// maxWait is the longest any of its conversations was due and not
	// claimed (unpaced, uncapped tenants).
	maxWait time.Duration
}

type simConv struct {
	t         *simTenant
	pending   int
	inReady   bool
	running   bool
	due       time.Time
	waitingAt time.Time // when it became due while idle (for waits)
	// slot is the send slot it waits for in the ready set (paced), kept
	// for its next claim as ordo.reserve_send keeps it on the conversation.
	slot time.Time
}

type simRunner struct {
	id      int
	conv    *simConv  // the conversation it drains alone
	batch   *simBatch // or the batch it drains
	started time.Time
	n       int // messages its drain sent
	token   int // invalidates a wait's timer once woken
	// takeRoom's state (jobs.Runner.takeRoom): since when it looks for
	// room (Want), and a token that invalidates its timer once poked.
	takeAt    time.Time
	roomToken int
}

// busy says whether the runner drains (a conversation or a batch).
func (r *simRunner) busy() bool { return r.conv != nil || r.batch != nil }

type event struct {
	at  time.Time
	seq int
	do  func()
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if !e[i].at.Equal(e[j].at) {
		return e[i].at.Before(e[j].at)
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

type sim struct {
	cfg     simConfig
	rng     *rand.Rand
	now     time.Time
	start   time.Time
	q       events
	seq     int
	s       *Scheduler
	room    Room
	tenants []*simTenant
	convs   map[int64][]*simConv // each tenant's conversations
	idle    Idle[*simRunner]     // runners waiting for a notification
	roomQ   []*simRunner         // runners waiting for room
	runners []*simRunner
	hung    bool      // the hang (simConfig.hang) happened
	hungAt  time.Time // when its round started
	// measured
	quietWaits []time.Duration
	maxWait    time.Duration // any conversation due and unclaimed
	violations []string
	// roomUsed integrates the room taken (Workers less Free) over time,
	// sending the conversations with a send under way; waits counts
	// runners that went to wait for a notification, waitsHung those while
	// the hung round was under way.
	roomUsed, sending time.Duration
	inFlight          int
	waits, waitsHung  int
	// reads counts the reads of the ready set's summary.
	reads int
}

func (m *sim) at(d time.Duration, f func()) {
	m.seq++
	heap.Push(&m.q, event{at: m.now.Add(d), seq: m.seq, do: f})
}

func (m *sim) send() time.Duration {
	return m.cfg.sendMin + time.Duration(m.rng.Int64N(int64(m.cfg.sendMax-m.cfg.sendMin)+1))
}

func runSim(t *testing.T, cfg simConfig) *sim {
	t.Helper()
	m := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 1)), now: time.Unix(1e9, 0), convs: map[int64][]*simConv{}}
	m.start = m.now
	m.s = New(Config{Poll: 200 * time.Millisecond, RefreshMin: 20 * time.Millisecond, Slice: simTurnSlice})
	over := OverdraftFor(cfg.workers)
	m.room = Room{Free: cfg.workers, Over: over}
	id := int64(0)
	for _, c := range cfg.campaigns {
		id++
		tn := &simTenant{id: id, c: c}
		m.tenants = append(m.tenants, tn)
		m.at(c.startsAt, func() {
			for range c.conversations {
				cv := &simConv{t: tn}
				m.convs[tn.id] = append(m.convs[tn.id], cv)
				if c.every > 0 {
					continue
				}
				for range c.messages {
					m.arrive(cv)
				}
			}
			if c.every > 0 {
				left := c.conversations * c.messages
				var next func()
				next = func() {
					m.arrive(m.convs[tn.id][m.rng.IntN(c.conversations)])
					if left--; left > 0 {
						m.at(time.Duration(m.rng.ExpFloat64()*float64(c.every)), next)
					}
				}
				next()
			}
		})
	}
	for range cfg.quiet {
		id++
		tn := &simTenant{id: id, c: campaign{weight: 1}, quiet: true}
		m.tenants = append(m.tenants, tn)
		cv := &simConv{t: tn}
		m.convs[tn.id] = []*simConv{cv}
		var next func()
		next = func() {
			m.arrive(cv)
			m.at(time.Duration(m.rng.ExpFloat64()*float64(cfg.quietEvery)), next)
		}
		m.at(time.Duration(m.rng.Int64N(int64(cfg.quietEvery))), next)
	}
	m.idle.Runners = cfg.workers + over
	for i := range cfg.workers + over {
		r := &simRunner{id: i}
		m.runners = append(m.runners, r)
		m.at(0, func() { m.free(r) })
	}
	end := m.start.Add(cfg.duration)
	for m.q.Len() > 0 {
		e := heap.Pop(&m.q).(event)
		if e.at.After(end) {
			break
		}
		m.roomUsed += time.Duration(cfg.workers-m.room.Free) * e.at.Sub(m.now)
		m.sending += time.Duration(m.inFlight) * e.at.Sub(m.now)
		m.now = e.at
		e.do()
	}
	// Anything due and never claimed is a starvation.
	for _, tn := range m.tenants {
		for _, cv := range m.convs[tn.id] {
			if cv.inReady && !cv.running && !cv.due.After(m.now) && tn.c.cap == 0 && tn.c.gap == 0 {
				m.maxWait = max(m.maxWait, m.now.Sub(cv.due))
				tn.maxWait = max(tn.maxWait, m.now.Sub(cv.due))
			}
		}
	}
	return m
}

// arrive queues a message: a conversation with no row in the ready set
// gets one, due now, and the tenant's notification goes out.
func (m *sim) arrive(cv *simConv) {
	cv.pending++
	if cv.inReady || cv.running {
		return
	}
	cv.inReady, cv.due, cv.waitingAt = true, m.now, m.now
	m.notify(cv.t.id)
}

// notify is ordo_ready: the model hears of it, one waiting runner is woken
// (or the wake-up kept), and the runners waiting for room look again.
func (m *sim) notify(tenant int64) {
	m.wake(m.s.NoteDue(m.now, tenant))
	m.pokeRoom()
}

// pokeRoom wakes the runners waiting for room (room.poke, room.give).
func (m *sim) pokeRoom() {
	for _, r := range m.roomQ {
		r.roomToken++
		m.at(0, func() { m.take(r) })
	}
	m.roomQ = nil
}

// wake wakes the runner the model says (Idle.Wake, as jobs.scheduler.wake).
func (m *sim) wake(w Wake) {
	if r, ok := m.idle.Wake(w); ok {
		r.token++
		m.at(0, func() { m.free(r) })
	}
}

// refresh reads the ready set's summary into the model, and counts it.
func (m *sim) refresh() {
	m.reads++
	m.s.Refresh(m.now, m.rows())
}

// rows is the ready set's summary (ordo's ActiveTenantsQuery): each
// tenant's earliest due time, how many of its conversations are due now,
// up to simReadyCountMax, and when the earliest of its others is due.
func (m *sim) rows() []Due {
	var out []Due
	for _, tn := range m.tenants {
		var first, later time.Time
		found, ready := false, 0
		for _, cv := range m.convs[tn.id] {
			if !cv.inReady {
				continue
			}
			due := cv.due
			if cv.running {
				due = m.now.Add(simLease)
			}
			if !due.After(m.now) {
				ready = min(ready+1, simReadyCountMax)
			} else if later.IsZero() || due.Before(later) {
				later = due
			}
			if !found || due.Before(first) {
				first, found = due, true
			}
		}
		if found {
			d := Due{Turn: Turn{Tenant: tn.id, Weight: tn.c.weight, Cap: tn.c.cap}, DueIn: first.Sub(m.now), Ready: ready}
			if ready > 0 && !later.IsZero() {
				d.Later = later.Sub(m.now)
			}
			out = append(out, d)
		}
	}
	return out
}

// free is a runner with nothing to do: it starts looking for room
// (jobs.Runner.takeRoom): for half a batch while batch claims left a
// backlog lately, for one otherwise.
func (m *sim) free(r *simRunner) {
	if r.busy() {
		return // woken while draining: the wake-up is for the next free runner
	}
	r.takeAt = m.now
	m.take(r)
}

// take is a look for room (fair.Take, up to a batch), then the pick and
// the claim; with no room, the runner waits for room to be given back, a
// poll interval, or (wanting more than one) a turn slice, after which it
// takes less.
func (m *sim) take(r *simRunner) {
	if r.busy() {
		return
	}
	want, later := m.s.Want(m.now, r.takeAt, simBatchSize)
	n, t, urgent, d := Take(m.s, &m.room, m.now, simBatchSize, want, false)
	if d == Refresh {
		m.refresh()
		n, t, urgent, _ = Take(m.s, &m.room, m.now, simBatchSize, want, true)
	}
	if n == 0 {
		m.roomQ = append(m.roomQ, r)
		r.roomToken++
		token := r.roomToken
		// The runner's poll ticker, and its timer for wanting less.
		look := simPoll - m.now.Sub(r.takeAt)%simPoll
		if later > 0 {
			look = min(look, later)
		}
		m.at(look, func() {
			if r.roomToken != token {
				return
			}
			if i := slices.Index(m.roomQ, r); i >= 0 {
				m.roomQ = slices.Delete(m.roomQ, i, i+1)
			}
			m.take(r)
		})
		return
	}
	if !urgent {
		t, d = m.s.Pick(m.now, false)
		if d == Refresh {
			m.refresh()
			t, d = m.s.Pick(m.now, true)
		}
		if d != Go {
			m.room.Give(n)
			m.pokeRoom()
			m.wait(r)
			return
		}
	}
	if t.Cap == 0 && m.tenants[t.Tenant-1].c.gap == 0 {
		m.claimBatch(r, t, n) // ordo.may_batch: unpaced, uncapped
		return
	}
	m.room.Give(n - 1)
	m.pokeRoom()
	m.claim(r, t)
}

func (m *sim) wait(r *simRunner) {
	m.waits++
	if m.hung && m.now.Sub(m.hungAt) < m.cfg.hang {
		m.waitsHung++
	}
	if m.idle.Kept() {
		m.at(time.Millisecond, func() { m.free(r) })
		return
	}
	m.idle.Wait(r)
	token := r.token
	m.at(m.s.Wait(m.now), func() {
		if r.token != token {
			return
		}
		m.idle.Leave(r)
		m.s.Waited(m.now)
		m.free(r)
	})
}

// claim takes tenant t's conversation due longest, within its cap
// (ordo's claim and its advisory-lock slots).
func (m *sim) claim(r *simRunner, t Turn) {
	tn := m.tenants[t.Tenant-1]
	var pick *simConv
	due := 0
	if t.Cap == 0 || tn.running < t.Cap {
		for _, cv := range m.convs[t.Tenant] {
			if cv.inReady && !cv.running && !cv.due.After(m.now) {
				due++
				if pick == nil || cv.due.Before(pick.due) {
					pick = cv
				}
			}
		}
	}
	if pick == nil {
		// The claim's answer comes back a claim's cost later: what
		// became due meanwhile must not be forgotten by the miss.
		m.room.Give(1)
		asked := m.now
		m.at(simClaimCost, func() {
			m.s.Missed(m.now, t.Tenant, asked)
			m.free(r)
		})
		return
	}
	m.wake(m.s.PassOn(m.now, t.Tenant, due > 1))
	m.claimed(pick)
	pick.running, r.conv, r.started, r.n = true, pick, m.now, 0
	tn.running++
	tn.most = max(tn.most, tn.running)
	if t.Cap > 0 && tn.running > t.Cap {
		m.violations = append(m.violations, fmt.Sprintf("tenant %d: %d drains at once, cap %d", t.Tenant, tn.running, t.Cap))
	}
	m.next(r, simClaimCost)
}

// next sends the drain's next message after after, or waits for its send
// slot, or ends the run.
func (m *sim) next(r *simRunner, after time.Duration) {
	cv := r.conv
	tn := cv.t
	if tn.c.gap > 0 {
		slot := m.now.Add(after)
		switch {
		case !cv.slot.IsZero(): // the one it waited for
			slot, cv.slot = maxTime(slot, cv.slot), time.Time{}
		default:
			slot = maxTime(slot, tn.nextSlot)
			tn.nextSlot = slot.Add(tn.c.gap)
		}
		if wait := slot.Sub(m.now); wait > simPaceMaxSleep {
			// A slot further out: the conversation waits for it in the
			// ready set, holding no worker (it keeps its slot).
			cv.slot = slot
			m.park(r, wait)
			return
		}
		after = slot.Sub(m.now)
	}
	m.at(after, func() {
		m.inFlight++
		m.at(m.send(), func() {
			m.inFlight--
			m.sent(r)
		})
	})
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (m *sim) sent(r *simRunner) {
	cv := r.conv
	tn := cv.t
	cv.pending--
	m.count(tn)
	r.n++
	switch {
	case cv.pending == 0:
		cv.inReady = false
		m.end(r)
	case !m.s.DrainGoesOn(m.now, tn.id, r.started, r.n, RunLimits{Rounds: simMaxMessagesPerRun, Time: simMaxRunTime}):
		m.yield(r)
	default:
		m.s.Sent(tn.id, 1)
		m.next(r, 0)
	}
}

// yield requeues the conversation due now, behind its tenant's others.
func (m *sim) yield(r *simRunner) {
	cv := r.conv
	cv.due, cv.waitingAt = m.now, m.now
	m.end(r)
	m.notify(cv.t.id)
}

// park requeues the conversation due after d (a send slot).
func (m *sim) park(r *simRunner, d time.Duration) {
	cv := r.conv
	cv.due, cv.waitingAt = m.now.Add(d), m.now.Add(d)
	m.s.DueIn(m.now, d)
	m.end(r)
}

func (m *sim) end(r *simRunner) {
	cv := r.conv
	tn := cv.t
	cv.running, r.conv = false, nil
	tn.running--
	m.wake(m.s.Released(m.now, tn.id, tn.c.cap > 0))
	m.room.Give(1)
	m.pokeRoom()
	m.at(0, func() { m.free(r) })
}

// claimed records the wait of conversation cv, claimed now.
func (m *sim) claimed(cv *simConv) {
	tn := cv.t
	if tn.quiet {
		m.quietWaits = append(m.quietWaits, m.now.Sub(cv.waitingAt))
	}
	if tn.c.cap == 0 && tn.c.gap == 0 {
		w := m.now.Sub(cv.due)
		m.maxWait = max(m.maxWait, w)
		tn.maxWait = max(tn.maxWait, w)
	}
}

// count records a message sent for tenant tn now.
func (m *sim) count(tn *simTenant) {
	tn.sent++
	tn.sends = append(tn.sends, m.now)
	if m.now.Sub(m.start) >= m.cfg.duration/5 && m.now.Sub(m.start) < m.cfg.duration*4/5 {
		tn.sentIn++
	}
}

// perSecond counts tn's sends in each second of virtual time.
func perSecond(tn *simTenant) map[int64]int {
	n := map[int64]int{}
	for _, at := range tn.sends {
		n[at.Unix()]++
	}
	return n
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// TestSimulatedFairness runs a thousand tenants for a simulated minute on
// 16 workers: campaigns of different weights, one capped, one paced, one
// that starts halfway, beside 993 quiet tenants; the unpaced, uncapped
// ones claim batches. It asserts what the contract promises: backlogged
// tenants share the workers by weight (±10 %), a quiet tenant waits at
// most a turn slice and one send for a worker, no conversation starves,
// and no cap is exceeded.
func TestSimulatedFairness(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds() {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			cfg := simConfig{
				seed: seed, workers: 16, duration: time.Minute,
				sendMin: 5 * time.Millisecond, sendMax: 25 * time.Millisecond,
				campaigns: []campaign{
					{weight: 1, conversations: 1000, messages: 40},
					{weight: 2, conversations: 1000, messages: 40},
					{weight: 3, conversations: 1000, messages: 40},
					{weight: 4, conversations: 1000, messages: 40},
					{weight: 8, cap: 2, conversations: 100, messages: 30, shareUnchecked: true},
					{weight: 1, conversations: 200, messages: 5, gap: 12500 * time.Microsecond, shareUnchecked: true}, // 80/s
					{weight: 2, conversations: 400, messages: 30, startsAt: 30 * time.Second, shareUnchecked: true},
				},
				quiet: 993, quietEvery: 20 * time.Second,
			}
			m := runSim(t, cfg)
			for _, v := range m.violations {
				t.Error(v)
			}
			// Shares of the backlogged, uncapped, unpaced campaigns over the
			// middle of the run, where all of them had work.
			var sumW, sumSent int
			for _, tn := range m.tenants {
				if !tn.quiet && !tn.c.shareUnchecked {
					sumW += tn.c.weight
					sumSent += tn.sentIn
				}
			}
			for _, tn := range m.tenants {
				if tn.quiet || tn.c.shareUnchecked {
					continue
				}
				want := float64(tn.c.weight) / float64(sumW)
				got := float64(tn.sentIn) / float64(sumSent)
				t.Logf("tenant %d weight %d: share %.3f (want %.3f), %d sent, %.2f conversations a round", tn.id, tn.c.weight, got, want, tn.sent, fullness(tn))
				if got < want*0.9 || got > want*1.1 {
					t.Errorf("tenant %d (weight %d) had %.3f of the workers; want %.3f ± 10%%", tn.id, tn.c.weight, got, want)
				}
			}
			capped := m.tenants[4]
			if capped.most > capped.c.cap || capped.sent == 0 {
				t.Errorf("capped tenant: %d at once (cap %d), %d sent", capped.most, capped.c.cap, capped.sent)
			}
			for sec, n := range perSecond(m.tenants[5]) {
				if n > 82 {
					t.Errorf("paced tenant sent %d in second %d; its rate is 80/s", n, sec)
				}
			}
			bound := simTurnSlice + cfg.sendMax + 2*simClaimCost
			p99, worst := quantile(m.quietWaits, 0.99), quantile(m.quietWaits, 1)
			t.Logf("quiet tenants: %d waits, p50 %s, p99 %s, max %s (bound %s)",
				len(m.quietWaits), quantile(m.quietWaits, 0.5), p99, worst, bound)
			if worst > bound {
				t.Errorf("a quiet tenant waited %s for a worker; want at most a turn slice and one send (%s)", worst, bound)
			}
			// No tenant starves: one with due work sends at least every
			// couple of seconds (a tenant's own conversations queue behind
			// each other, oldest first, by design).
			for _, tn := range m.tenants {
				if tn.quiet || tn.c.gap > 0 || len(tn.sends) < 2 {
					continue
				}
				var gap time.Duration
				for i := 1; i < len(tn.sends); i++ {
					gap = max(gap, tn.sends[i].Sub(tn.sends[i-1]))
				}
				t.Logf("tenant %d weight %d: longest gap %s", tn.id, tn.c.weight, gap)
				if gap > 2*time.Second && tn.sent < tn.c.conversations*tn.c.messages {
					t.Errorf("tenant %d (weight %d, cap %d) went %s without a send while it had work: starvation", tn.id, tn.c.weight, tn.c.cap, gap)
				}
			}
			late := m.tenants[6]
			if late.sent == 0 {
				t.Error("the campaign that started halfway sent nothing")
			}
		})
	}
}
