package jobs

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs/outage"
	ordosql "github.com/ordo-dev/ordo/sql"
)

// The scheduler decides which tenant a worker process's next free runner
// claims from, so that one tenant's backlog never delays another's runnable
// conversations by more than about one turn (contract point 8):
//
//   - ordo.ready holds every conversation that expects a drain, with the
//     time it is due (now, the end of a wait, or the lease of the drain that
//     holds it). A waiting conversation is a row with a future due time: it
//     holds no worker, no connection, and is never claimed before its time.
//   - A round visits each tenant that has a due conversation, in tenant id
//     order, giving it weight claims (weighted round robin). Within a
//     tenant, ordo.claim_conversation takes the conversation due longest.
//     A tenant with nothing claimable (all taken, or at max_concurrency)
//     drops out of the round. A tenant that becomes runnable joins at the
//     next round, which starts at the latest after every other tenant had
//     its turn.
//   - The list of tenants with due work is one walk over ready_tenant_due_idx
//     (one index probe per tenant that has a conversation in the ready set;
//     idle tenants and conversations cost nothing), run once per round and
//     at most every RefreshMin.
//   - Each process keeps its own round; they share nothing but Postgres, so
//     N processes are N fair schedulers and no leader is needed. A
//     tenant's max_concurrency holds across processes because it is a set
//     of advisory locks, released by Postgres with a dead worker's session.
//   - Runners with nothing to claim wait for a notification (ordo_ready: a
//     conversation became due), the earliest known due time, or
//     Config.FetchPollInterval, whichever comes first. A notification wakes
//     one waiting runner, not all of them: with 16 idle runners, each
//     accepted message used to wake 16 runners that raced for one
//     conversation (`make bench` latency: 7.7 transactions per message). A
//     runner that claims a conversation with another due behind it wakes
//     one more, so a burst that
//     came with a single notification (Postgres folds a transaction's
//     identical notifications into one: an import of 500 conversations is
//     one) still has every runner at work within a few claims.
//   - Turns are short when someone waits: the notification names the
//     tenant whose conversation became due. While such a tenant has not
//     been picked since, a drain of another tenant that ran for
//     Config.TurnSlice stops at its next message boundary, requeues its
//     conversation, and its runner claims for the waiting tenant first
//     (handOff). A burst of long conversations thus delays a quiet tenant
//     by about a slice and a message, not a whole conversation; with no one
//     waiting, drains run their conversations to the end.
//   - A tenant that waits and has nothing running in this process is
//     urgent: pick serves it before the round (after handed tenants), and
//     a runner finding no room serves it beyond the room (runner.go,
//     takeRoom). Batches
//     (batch.go) end their rounds together; without this a quiet tenant
//     waited for a campaign's whole round.

// ActiveTenantsQuery lists each tenant with a conversation in the ready set
// and its earliest due time: a loose index scan of ready_tenant_due_idx, one
// probe per such tenant, whatever the number of conversations. Exported for
// the benchmark, which measures its cost (`make bench ARGS="--scenario claim"`).
const ActiveTenantsQuery = `
WITH RECURSIVE t AS (
    (SELECT r.tenant_id, r.due_at FROM ordo.ready r ORDER BY r.tenant_id, r.due_at LIMIT 1)
    UNION ALL
    SELECT n.tenant_id, n.due_at FROM t, LATERAL (
        SELECT r.tenant_id, r.due_at FROM ordo.ready r WHERE r.tenant_id > t.tenant_id
        ORDER BY r.tenant_id, r.due_at LIMIT 1) n
)
SELECT t.tenant_id, extract(epoch FROM t.due_at - now()) * 1000, tn.weight, tn.max_concurrency
FROM t JOIN ordo.tenants tn ON tn.id = t.tenant_id`

// RefreshMinDefault is how often, at most, a process re-reads which tenants
// have due conversations (Config.RefreshMin).
const RefreshMinDefault = 20 * time.Millisecond

// turn is a tenant's place in a round.
type turn struct {
	tenant int64
	weight int
	cap    int // max_concurrency; 0 is none
}

type scheduler struct {
	pool       *pgxpool.Pool
	db         *outage.Watch
	poll       time.Duration
	refreshMin time.Duration
	logger     *slog.Logger

	mu        sync.Mutex
	round     []turn // this round's tenants, in order
	pos       int    // the current tenant in round
	left      int    // claims the current tenant has left in this visit
	stale     bool   // something became due: refresh before the next round
	refreshed time.Time
	nextDue   time.Time // the earliest due time of a tenant not due at the last refresh
	// waiters are the runners blocked in wait, oldest first; wakeups are
	// wake-ups that found no runner waiting, taken by the next runners
	// that would wait (at most maxWakeups: one per runner).
	waiters    []chan struct{}
	wakeups    int
	maxWakeups int

	// dueAt is when each tenant last had a conversation become due (the
	// ordo_ready payload), pickedAt when a runner last picked it: a tenant
	// due since it was last picked is waiting for a worker. handed are the
	// tenants drains stopped their turn for, picked before the round.
	dueAt    map[int64]time.Time
	pickedAt map[int64]time.Time
	handed   []int64
	// known is each tenant's weight and cap as the last refresh that saw
	// it read them: a handed tenant is claimed with its own cap.
	known map[int64]turn
	// blocked are the tenants whose last claim found nothing to take (all
	// their due conversations being claimed by others, or no free
	// concurrency slot), since when. They sit out every round until
	// something may have changed for them: a conversation of theirs became
	// due, one of their drains here ended or claimed, or a poll interval
	// passed (a slot freed by another process tells no one). Before, a
	// runner that missed picked the same tenant again from the reused
	// round and claimed in a loop: 30 to 50 empty claims per message with
	// idle runners, and without end beside a tenant at its cap.
	blocked map[int64]time.Time
	// running counts each tenant's drains and batches in this process
	// (passOn to released): a tenant with none that waits may have a
	// worker beyond the process's room (urgent).
	running map[int64]int
	// onDue, if set, is told that a conversation became due (the runner's
	// room wakes the runners waiting for room, to look for urgent tenants).
	onDue func()
}

// newScheduler builds the scheduler of a process whose runners number
// runners.
func newScheduler(pool *pgxpool.Pool, poll, refreshMin time.Duration, runners int, db *outage.Watch, logger *slog.Logger) *scheduler {
	return &scheduler{pool: pool, db: db, poll: poll, refreshMin: refreshMin, logger: logger, stale: true, maxWakeups: runners,
		dueAt: map[int64]time.Time{}, pickedAt: map[int64]time.Time{}, known: map[int64]turn{}, blocked: map[int64]time.Time{}, running: map[int64]int{}}
}

// noteDue records that a conversation of tenant became due (0: unknown)
// and wakes a runner.
func (s *scheduler) noteDue(tenant int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tenant > 0 {
		s.dueAt[tenant] = time.Now()
		delete(s.blocked, tenant)
	} else {
		clear(s.blocked)
	}
	s.stale = true
	s.wakeLocked()
	if s.onDue != nil {
		s.onDue()
	}
}

// urgent returns a tenant that waits for a worker (due since it was last
// picked) and has no drain in this process, and counts it as picked: the
// one kind of claim that may go beyond the process's room (runner.go), so
// that a quiet tenant never waits for a campaign's batches to end a round.
// prev is when it was picked before, for unpick.
func (s *scheduler) urgent(ctx context.Context) (t turn, prev time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.urgentLocked(ctx)
}

// urgentLocked is urgent, called with mu held.
func (s *scheduler) urgentLocked(ctx context.Context) (t turn, prev time.Time, ok bool) {
	if len(s.handed) > 0 {
		return turn{}, time.Time{}, false // a drain stopped its turn for them: pick's first
	}
	refreshed := false
	for id, at := range s.dueAt {
		if _, blocked := s.blocked[id]; blocked || s.running[id] > 0 || !at.After(s.pickedAt[id]) {
			continue
		}
		t, known := s.known[id]
		if !known && !refreshed {
			// Not seen by a refresh yet (a new process): read its weight
			// and cap first, as pick does for a handed tenant.
			refreshed, s.stale = true, true
			if err := s.newRound(ctx); err != nil {
				return turn{}, time.Time{}, false
			}
			t, known = s.known[id]
		}
		if !known {
			continue
		}
		prev = s.pickedAt[id]
		s.pickedAt[id] = time.Now()
		return t, prev, true
	}
	return turn{}, time.Time{}, false
}

// unpick undoes urgent's pick of tenant (picked before at prev): no room
// could be had for it.
func (s *scheduler) unpick(tenant int64, prev time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pickedAt[tenant] = prev
}

// waitingOther returns a tenant other than mine that is waiting for a
// worker. Called with mu held.
func (s *scheduler) waitingOther(mine int64) (int64, bool) {
	for t, at := range s.dueAt {
		if t != mine && at.After(s.pickedAt[t]) {
			return t, true
		}
	}
	return 0, false
}

// waiting says whether a tenant other than mine waits for a worker.
func (s *scheduler) waiting(mine int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.waitingOther(mine)
	return ok
}

// handOff promises the calling drain's worker to a tenant other than mine
// that waits for one, if any: that tenant counts as picked (no other drain
// stops for it) and is the next pick.
func (s *scheduler) handOff(mine int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.waitingOther(mine)
	if !ok {
		return false
	}
	s.pickedAt[t] = time.Now()
	s.handed = append(s.handed, t)
	return true
}

// released: a drain of tenant in this process ended. When it held one of
// the tenant's concurrency slots (capped), a runner is woken to use it.
func (s *scheduler) released(tenant int64, capped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.blocked, tenant)
	if s.running[tenant]--; s.running[tenant] <= 0 {
		delete(s.running, tenant)
	}
	if capped {
		s.stale = true
		s.wakeLocked()
	}
}

// dueIn: a drain of this process parked its conversation for d (0: due
// again now, and the park notified). Nothing else tells the scheduler of a
// conversation that becomes due by time, so the earliest due time it waits
// for moves up.
func (s *scheduler) dueIn(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at := time.Now().Add(d); at.Before(s.nextDue) {
		s.nextDue = at
	}
}

// wakeLocked wakes the runner that has waited longest, or leaves the
// wake-up to the next runner that would wait. Called with mu held.
func (s *scheduler) wakeLocked() {
	if !s.wakeWaiter() {
		s.wakeups = min(s.wakeups+1, s.maxWakeups)
	}
}

// wakeWaiter wakes the runner that has waited longest, if one waits.
// Called with mu held.
func (s *scheduler) wakeWaiter() bool {
	if len(s.waiters) == 0 {
		return false
	}
	close(s.waiters[0])
	s.waiters = s.waiters[1:]
	return true
}

// passOn: a runner claimed a conversation of tenant. With more (another
// was due behind it) it wakes one more runner, if one waits: there may be
// more to claim than the notifications that came said.
// Without more, the tenant leaves the round: its next turn comes with the
// next refresh that finds it due.
func (s *scheduler) passOn(tenant int64, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.blocked, tenant)
	s.running[tenant]++
	if !more {
		s.leave(tenant)
		return
	}
	s.wakeWaiter()
}

// wakeAll wakes every waiting runner (a stop, or a listener that just
// started and may have missed notifications).
func (s *scheduler) wakeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stale = true
	clear(s.blocked)
	for _, w := range s.waiters {
		close(w)
	}
	s.waiters = nil
	s.wakeups = s.maxWakeups
}

// pick returns the tenant to claim from next; false when no tenant has a
// due conversation (the runner waits).
func (s *scheduler) pick(ctx context.Context) (turn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.handed) > 0 {
		id := s.handed[0]
		t, ok := s.known[id]
		if !ok {
			// Not seen by a refresh yet: read its weight and cap first.
			s.stale = true
			if err := s.newRound(ctx); err != nil {
				break
			}
			t, ok = s.known[id]
		}
		s.handed = s.handed[1:]
		if ok {
			return t, true
		}
	}
	// Then a tenant that waits with nothing running here: the round may be
	// on a campaign's tenant, whose batches would take the room before the
	// round reached it.
	if t, _, ok := s.urgentLocked(ctx); ok {
		return t, true
	}
	if s.pos >= len(s.round) {
		if err := s.newRound(ctx); err != nil {
			if ctx.Err() == nil && !s.db.Down() {
				s.logger.WarnContext(ctx, "read tenants with due conversations", slog.String("error", err.Error()))
			}
			return turn{}, false
		}
		if len(s.round) == 0 {
			return turn{}, false
		}
	}
	t := s.round[s.pos]
	s.pickedAt[t.tenant] = time.Now()
	s.left--
	if s.left <= 0 {
		s.advance()
	}
	return t, true
}

// advance moves to the next tenant of the round.
func (s *scheduler) advance() {
	s.pos++
	if s.pos < len(s.round) {
		s.left = s.round[s.pos].weight
	}
}

// missed: tenant had nothing to claim. It leaves the round and sits out
// the next ones until something may have changed for it (blocked).
func (s *scheduler) missed(tenant int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blocked[tenant] = time.Now()
	s.leave(tenant)
}

// leave takes tenant out of the round, wherever it is: a round is repeated
// without a refresh while the last one is fresh. Called with mu held.
func (s *scheduler) leave(tenant int64) {
	i := slices.IndexFunc(s.round, func(t turn) bool { return t.tenant == tenant })
	if i < 0 {
		return
	}
	s.round = slices.Delete(s.round, i, i+1)
	switch {
	case i < s.pos:
		s.pos--
	case i == s.pos && s.pos < len(s.round):
		s.left = s.round[s.pos].weight
	}
}

// newRound starts a round over the tenants that have due conversations,
// re-reading them unless the last read is fresh and nothing new is due (the
// round then repeats over the tenants of the last read). Called with mu held.
func (s *scheduler) newRound(ctx context.Context) error {
	now := time.Now()
	if !s.stale && now.Sub(s.refreshed) < s.refreshMin && now.Before(s.nextDue) {
		// Nothing became due since (a notification would have made the
		// round stale): repeat it, or wait when it is empty.
		if s.pos = 0; len(s.round) > 0 {
			s.left = s.round[0].weight
		}
		return nil
	}
	rows, err := s.pool.Query(ctx, ActiveTenantsQuery)
	if err != nil {
		s.round = s.round[:0]
		s.db.Report(err, ordosql.Unavailable)
		return err
	}
	round := s.round[:0]
	next := now.Add(s.poll)
	var (
		t     turn
		dueIn float64
	)
	_, err = pgx.ForEachRow(rows, []any{&t.tenant, &dueIn, &t.weight, &t.cap}, func() error {
		s.known[t.tenant] = t
		if _, blocked := s.blocked[t.tenant]; blocked {
			if dueIn <= 0 {
				return nil // retried after an event or a poll interval
			}
			// Nothing due now: what blocked it is over, and its next
			// conversation is tried when due.
			delete(s.blocked, t.tenant)
		}
		if dueIn <= 0 {
			round = append(round, t)
		} else if at := now.Add(time.Duration(dueIn * float64(time.Millisecond))); at.Before(next) {
			next = at
		}
		return nil
	})
	s.round, s.pos, s.stale, s.refreshed, s.nextDue = round, 0, false, now, next
	if len(round) > 0 {
		s.left = round[0].weight
	}
	s.db.Report(err, ordosql.Unavailable)
	return err
}

// wait blocks until a runner is woken (wakeOne, passOn, wakeAll), the
// earliest known due time or the poll interval passes, or ctx ends. A
// wake-up that came while no runner waited — since this runner's last
// pick, say — ends it at once.
func (s *scheduler) wait(ctx context.Context) {
	s.mu.Lock()
	backoff := s.db.Wait() // Postgres away: everyone waits it out
	if s.wakeups > 0 && backoff == 0 {
		s.wakeups--
		s.mu.Unlock()
		return
	}
	d := max(min(time.Until(s.nextDue), s.poll), time.Millisecond, backoff)
	w := make(chan struct{})
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-w:
		return
	case <-t.C:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.waiters, w); i >= 0 {
		s.waiters = slices.Delete(s.waiters, i, i+1)
	}
	// Time passed: conversations may have become due, and a slot freed
	// by another process tells no one (blocked tenants are tried again
	// after a poll interval).
	s.stale = true
	now := time.Now()
	maps.DeleteFunc(s.blocked, func(_ int64, at time.Time) bool { return now.Sub(at) >= s.poll })
}

// pause waits the poll interval (or Postgres's backoff while it is away),
// or until ctx ends, whatever wakes other runners: after an error, trying
// again at once would fail again.
func (s *scheduler) pause(ctx context.Context) {
	t := time.NewTimer(max(s.poll, s.db.Wait()))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// listen wakes the scheduler on every ordo_ready notification until ctx
// ends, on a connection of its own (re-established after errors).
func (s *scheduler) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if !s.db.Report(err, ordosql.Unavailable) {
			s.logger.WarnContext(ctx, "listen for due conversations; polling meanwhile", slog.String("error", err.Error()))
		}
		_ = s.db.Sleep(ctx, time.Second)
	}
}

func (s *scheduler) listenOnce(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection carries LISTEN state: never hand it back to the pool.
	c := conn.Hijack()
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "LISTEN ordo_ready"); err != nil {
		return err
	}
	s.wakeAll() // anything that became due before LISTEN took effect
	for {
		n, err := c.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		tenant, _ := strconv.ParseInt(n.Payload, 10, 64)
		s.noteDue(tenant)
	}
}
