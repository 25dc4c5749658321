package jobs

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs/fair"
	"github.com/ordo-dev/ordo/jobs/outage"
	ordosql "github.com/ordo-dev/ordo/sql"
)

// The scheduler is the shell around jobs/fair's model: it reads the
// ready set's summary for it, feeds it the notifications of conversations
// that became due, keeps the process's room (fair.Room), and parks and
// wakes the runners it says wait. The policy — weighted rounds, turn
// slices, urgency, misses, room — is in package fair. One mutex guards the
// model, the room and the waiting runners: a take decides over both at
// once.

// ActiveTenantsQuery lists each tenant with a conversation in the ready set
// and its earliest due time: a loose index scan of ready_tenant_due_idx, one
// probe per such tenant, whatever the number of conversations; how many of
// its conversations are due now, counted up to ReadyCountMax along the
// same index; and when the earliest of its others is due. Exported for the benchmark, which measures its cost (`make
// bench ARGS="--scenario claim"`).
const ActiveTenantsQuery = `
WITH RECURSIVE t AS (
    (SELECT r.tenant_id, r.due_at FROM ordo.ready r ORDER BY r.tenant_id, r.due_at LIMIT 1)
    UNION ALL
    SELECT n.tenant_id, n.due_at FROM t, LATERAL (
        SELECT r.tenant_id, r.due_at FROM ordo.ready r WHERE r.tenant_id > t.tenant_id
        ORDER BY r.tenant_id, r.due_at LIMIT 1) n
)
SELECT t.tenant_id, extract(epoch FROM t.due_at - now()) * 1000, tn.weight, tn.max_concurrency,
       (SELECT count(*) FROM (SELECT FROM ordo.ready r WHERE r.tenant_id = t.tenant_id AND r.due_at <= now() LIMIT $1) n),
       coalesce(extract(epoch FROM (SELECT min(r.due_at) FROM ordo.ready r WHERE r.tenant_id = t.tenant_id AND r.due_at > now()) - now()) * 1000, 0)
FROM t JOIN ordo.tenants tn ON tn.id = t.tenant_id`

// ReadyCountMax bounds how many of a tenant's due conversations a read of
// the ready set counts: more than a process claims before it reads again.
const ReadyCountMax = 256

// RefreshMinDefault is how often, at most, a process re-reads which tenants
// have due conversations (Config.RefreshMin).
const RefreshMinDefault = 20 * time.Millisecond

type scheduler struct {
	pool   *pgxpool.Pool
	db     *outage.Watch
	logger *slog.Logger

	mu sync.Mutex
	m  *fair.Scheduler
	// idle are the runners blocked in wait (fair.Idle), each by its
	// channel.
	idle fair.Idle[chan struct{}]
	// room is the process's room (Workers, and the overdraft), which its
	// runners take from and give back to; freed is closed (and replaced)
	// when room is given back or a conversation became due (a tenant may
	// be urgent), for the runners waiting for room; stopped: no take
	// succeeds any more (a stop).
	room    fair.Room
	freed   chan struct{}
	stopped bool
	// reads counts the reads of the ready set's summary (tests).
	reads atomic.Int64
}

// newScheduler builds the scheduler of a process whose runners number
// runners, sharing room.
func newScheduler(pool *pgxpool.Pool, poll, refreshMin, slice time.Duration, room fair.Room, runners int, db *outage.Watch, logger *slog.Logger) *scheduler {
	return &scheduler{pool: pool, db: db, logger: logger, idle: fair.Idle[chan struct{}]{Runners: runners}, room: room, freed: make(chan struct{}),
		m: fair.New(fair.Config{Poll: poll, RefreshMin: refreshMin, Slice: slice})}
}

// noteDue records that a conversation of tenant became due (0: unknown)
// and wakes a runner, and the runners waiting for room (to look for an
// urgent tenant).
func (s *scheduler) noteDue(tenant int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake(s.m.NoteDue(time.Now(), tenant))
	s.roomChanged()
}

// take is a free runner's claim on the room (fair.Take) for as much as
// the model wants of a runner that began to look at since (fair.Want),
// with the ready set read for it if need be. With none for it, freed is
// closed once that may have changed (room given back, a conversation due,
// a stop; nil after a stop), and the runner looks again after later
// (0: no sooner) when it would want less.
func (s *scheduler) take(ctx context.Context, most int, since time.Time) (n int, t fair.Turn, urgent bool, later time.Duration, freed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for fresh := false; !s.stopped; fresh = true {
		var (
			d    fair.Decision
			want int
			now  = time.Now()
		)
		want, later = s.m.Want(now, since, most)
		n, t, urgent, d = fair.Take(s.m, &s.room, now, most, want, fresh)
		// While Postgres is away its watch paces every look (no read every
		// poll from each runner waiting for room).
		if d != fair.Refresh || fresh || s.db.Wait() > 0 || s.refresh(ctx) != nil {
			return n, t, urgent, later, s.freed
		}
	}
	return 0, fair.Turn{}, false, 0, nil
}

// drainGoesOn says whether a drain of tenant goes on to its message
// number next (fair.Scheduler.DrainGoesOn).
func (s *scheduler) drainGoesOn(tenant int64, started time.Time, next int, l fair.RunLimits) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.DrainGoesOn(time.Now(), tenant, started, next, l)
}

// refilled: a batch of tenant took n more of its conversations
// (fair.Scheduler.Refilled).
func (s *scheduler) refilled(tenant int64, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.Refilled(tenant, n)
}

// sent: n more messages of tenant go out on workers its drains or
// batches here hold already (fair.Scheduler.Sent).
func (s *scheduler) sent(tenant int64, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.Sent(tenant, n)
}

// startBatch, goesOn, refills, roundDone and endBatch are the batch's
// decisions (fair.Batch), taken under the scheduler's lock.
func (s *scheduler) startBatch(b *fair.Batch, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake(s.m.StartBatch(time.Now(), b, more))
}

func (s *scheduler) goesOn(b *fair.Batch, l fair.RunLimits) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.GoesOn(time.Now(), b, l)
}

func (s *scheduler) refills(b *fair.Batch, goOn bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Refills(time.Now(), b, goOn)
}

func (s *scheduler) roundDone(b *fair.Batch, next, alone int, refilled, blocked bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake(s.m.RoundDone(time.Now(), b, next, alone, refilled, blocked))
}

func (s *scheduler) endBatch(b *fair.Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake(s.m.EndBatch(time.Now(), b))
}

// released: a drain of tenant in this process ended, holding one of the
// tenant's concurrency slots or not (capped; fair.Scheduler.Released).
func (s *scheduler) released(tenant int64, capped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake(s.m.Released(time.Now(), tenant, capped))
}

// dueIn: a drain of this process parked its conversation for d.
func (s *scheduler) dueIn(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.DueIn(time.Now(), d)
}

// wake wakes the runner the model says (fair.Idle.Wake). Called with mu
// held.
func (s *scheduler) wake(w fair.Wake) {
	if c, ok := s.idle.Wake(w); ok {
		close(c)
	}
}

// passOn: a runner claimed a conversation of tenant, and another was due
// behind it or not (more; fair.Scheduler.PassOn).
func (s *scheduler) passOn(tenant int64, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake(s.m.PassOn(time.Now(), tenant, more))
}

// wakeAll wakes every waiting runner (a listener that just started and
// may have missed notifications).
func (s *scheduler) wakeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.WakeAll()
	for _, c := range s.idle.All() {
		close(c)
	}
}

// stop wakes every runner, waiting for work or for room, and makes every
// take fail (a stop).
func (s *scheduler) stop() {
	s.wakeAll()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.roomChanged()
}

// grab takes up to most of the room when at least want is free
// (fair.Room.Grab), unless stopped.
func (s *scheduler) grab(most, want int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return 0
	}
	return s.room.Grab(most, want)
}

// give returns n taken by take or grab.
func (s *scheduler) give(n int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.room.Give(n)
	s.roomChanged()
}

// roomChanged wakes the runners waiting for room. Called with mu held.
func (s *scheduler) roomChanged() {
	close(s.freed)
	s.freed = make(chan struct{})
}

// pick returns the tenant to claim from next; false when no tenant has a
// due conversation (the runner waits).
func (s *scheduler) pick(ctx context.Context) (t fair.Turn, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, d := s.m.Pick(time.Now(), false)
	if d == fair.Refresh { // read the ready set for it, once
		if s.refresh(ctx) != nil {
			return t, false
		}
		t, d = s.m.Pick(time.Now(), true)
	}
	return t, d == fair.Go
}

// missed: tenant had nothing to claim, for a claim asked at asked.
func (s *scheduler) missed(tenant int64, asked time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.Missed(time.Now(), tenant, asked)
}

// refresh reads the ready set's summary into the model; a failure is
// logged unless Postgres's watch has it. Called with mu held.
func (s *scheduler) refresh(ctx context.Context) error {
	s.reads.Add(1)
	rows, err := s.pool.Query(ctx, ActiveTenantsQuery, ReadyCountMax)
	if err == nil {
		var (
			due          []fair.Due
			d            fair.Due
			dueIn, later float64
		)
		_, err = pgx.ForEachRow(rows, []any{&d.Tenant, &dueIn, &d.Weight, &d.Cap, &d.Ready, &later}, func() error {
			d.DueIn = time.Duration(dueIn * float64(time.Millisecond))
			d.Later = time.Duration(later * float64(time.Millisecond))
			due = append(due, d)
			return nil
		})
		if err == nil {
			s.m.Refresh(time.Now(), due)
		}
	}
	if err != nil {
		s.m.RefreshFailed()
	}
	if !s.db.Report(err, ordosql.Unavailable) && err != nil && ctx.Err() == nil {
		s.logger.WarnContext(ctx, "read tenants with due conversations", slog.String("error", err.Error()))
	}
	return err
}

// wait blocks until a runner is woken (noteDue, passOn, wakeAll), the
// earliest known due time or the poll interval passes, or ctx ends. A
// wake-up that came while no runner waited ends it at once, unless
// Postgres is away: then everyone waits out its backoff.
func (s *scheduler) wait(ctx context.Context) {
	s.mu.Lock()
	backoff := s.db.Wait()
	if backoff == 0 && s.idle.Kept() {
		s.mu.Unlock()
		return
	}
	d := max(s.m.Wait(time.Now()), backoff)
	w := make(chan struct{})
	s.idle.Wait(w)
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
	s.idle.Leave(w)
	s.m.Waited(time.Now())
}

// pause waits the poll interval (or Postgres's backoff while it is away),
// or until ctx ends: after an error, trying again at once would fail again.
func (s *scheduler) pause(ctx context.Context, poll time.Duration) {
	t := time.NewTimer(max(poll, s.db.Wait()))
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
