package jobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/tenants"
)

// lockNamespace is the first key of every conversation advisory lock
// ("ordo"), keeping them apart from River's and an application's own locks.
const lockNamespace = 0x6f72646f

// errLockBusy: another drain holds the conversation.
var errLockBusy = errors.New("conversation is locked by another drain")

// ErrFenced is returned by a write of a drain that lost its conversation: a
// newer drain took over (bumped the fence) and the write was rolled back.
var ErrFenced = errors.New("stale fencing token: another drain owns the conversation")

// IsFenced reports whether err is a write rejected by the fence.
func IsFenced(err error) bool {
	var pgErr *pgconn.PgError
	return errors.Is(err, ErrFenced) || (errors.As(err, &pgErr) && pgErr.Code == ordosql.SQLStateStaleFence)
}

// session is a drain's hold on one conversation: a dedicated connection that
// holds the conversation's session advisory lock, and the fencing token every
// write carries. The connection's idle_session_timeout is the lease: a worker
// that stops talking for that long (stalled, partitioned) has its session
// ended by Postgres, which releases the lock to another worker, and its own
// later writes fail on the dead connection or, through any other, on the fence.
type session struct {
	conn   *pgxpool.Conn
	conv   int64
	fence  int64
	broken bool
	// unlocked: the drain's last write released the lock with its commit.
	unlocked bool
	// lease is the connection's idle_session_timeout; heard is when the
	// drain last sent a statement on the connection. Postgres restarts the
	// idle timer when that statement ends, later than heard, so heard+lease
	// is an early bound of when the session (and the lock) may be gone.
	lease time.Duration
	heard time.Time
}

// leaseMargin is what a drain keeps back from its lease when it bounds an
// external call: the two clocks (this process's, Postgres's) and the
// network between them.
func leaseMargin(lease time.Duration) time.Duration { return lease / 10 }

// touch records that a statement is about to go out on the connection.
func (s *session) touch() { s.heard = time.Now() }

// leaseLeft is how long the drain can still be sure it holds the
// conversation's lock (monotonic clock: a process frozen meanwhile finds
// its lease used up when it wakes).
func (s *session) leaseLeft() time.Duration {
	return time.Until(s.heard.Add(s.lease - leaseMargin(s.lease)))
}

const refreshQuery = `SELECT ordo.check_fence($1, $2)`

// callContext bounds an external call (a send, a handler call) of at most
// timeout by the lease the drain holds: no call outlives the lock that
// makes it this drain's alone. When less than timeout is left, the lease is
// renewed first with a fence check (one round trip), which fails — and no
// call is made — when the drain lost the conversation meanwhile (stalled
// past its lease, its session ended by Postgres, a newer drain in charge).
func (s *session) callContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc, error) {
	if s.leaseLeft() < timeout {
		s.touch()
		if _, err := s.conn.Exec(ctx, refreshQuery, s.conv, s.fence); err != nil {
			return nil, nil, s.written(fmt.Errorf("renew lease: %w", err))
		}
	}
	left := s.leaseLeft()
	if left <= 0 {
		return nil, nil, ErrFenced // the renewal itself took the whole lease
	}
	cctx, cancel := context.WithTimeout(ctx, min(timeout, left))
	return cctx, cancel, nil
}

const unlockQuery = `SELECT pg_advisory_unlock($1::int, ($2 % 2147483647)::int), set_config('idle_session_timeout', '0', false)`

// openQuery takes conv's advisory lock and, when it got it, takes the
// conversation over (bumps the fence under FOR UPDATE) and reads the tenant
// and the stamp of its WhatsApp credential; firstQuery follows it in the same
// round trip: one where there were six (lock, takeover, tenant, credential,
// first message, its start). The new fence is left in the transaction-local
// setting ordo.fence for firstQuery, and only when the lock was taken.
const openQuery = `
WITH lk AS MATERIALIZED (
    SELECT pg_try_advisory_lock($1::int, ($2 % 2147483647)::int) AS ok, set_config('idle_session_timeout', $3, false) AS lease),
l AS (SELECT c.id FROM ordo.conversations c, lk WHERE lk.ok AND c.id = $2 FOR UPDATE OF c),
u AS (
    UPDATE ordo.conversations c SET fence = c.fence + 1 FROM l WHERE c.id = l.id
    RETURNING c.fence, c.head_seq, c.last_seq, c.halted_at IS NOT NULL AS halted, c.tenant_id, c.conversation_id, c.drain_job_id)
SELECT lk.ok, u.fence, u.head_seq, u.last_seq, u.halted, u.tenant_id, u.conversation_id, u.drain_job_id,
       t.slug, t.name, COALESCE(t.handler_url, ''), t.on_dead_letter, t.ambiguous, t.max_attempts,
       t.send_rate, t.pair_gap_ms, t.sending_paused_at, COALESCE(t.sending_paused_reason, ''), t.created_at,
       t.handler_mode, t.handler_timeout_ms, t.reply_deadline_ms, COALESCE(t.events_url, ''), t.weight, t.max_concurrency,
       cr.updated_at,
       CASE WHEN u.fence IS NOT NULL THEN set_config('ordo.fence', u.fence::text, true) END
FROM lk LEFT JOIN u ON true
LEFT JOIN ordo.tenants t ON t.id = u.tenant_id
LEFT JOIN ordo.credentials cr ON cr.tenant_id = u.tenant_id AND cr.name = 'whatsapp'`

// openSession takes conv's advisory lock on a dedicated connection and takes
// the conversation over. found is false when the conversation is gone.
func openSession(ctx context.Context, pool *pgxpool.Pool, conv int64, lease int64, phone *string) (s *session, st convState, found bool, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, st, false, fmt.Errorf("acquire connection: %w", err)
	}
	var (
		locked  bool
		fence   *int64
		head    *int64
		last    *int64
		halted  *bool
		tenant  *int64
		convID  *string
		slug    *string
		name    *string
		handler *string
		onDead  *string
		ambig   *string
		maxAtt  *int
		rate    *int
		gap     *int
		reason  *string
		created *time.Time
		paused  *time.Time
		mode    *string
		hto     *int
		rdl     *int
		events  *string
		weight  *int
		maxConc *int
	)
	b := &pgx.Batch{}
	b.Queue(openQuery, lockNamespace, conv, strconv.FormatInt(lease, 10)).QueryRow(func(row pgx.Row) error {
		return row.Scan(&locked, &fence, &head, &last, &halted, &tenant, &convID, &st.drainJobID,
			&slug, &name, &handler, &onDead, &ambig, &maxAtt, &rate, &gap, &paused, &reason, &created,
			&mode, &hto, &rdl, &events, &weight, &maxConc, &st.credentialAt, nil)
	})
	// The first message is read — and its first step started, when it can —
	// in the same round trip and transaction; it means something only when
	// the lock was taken (and nothing starts otherwise).
	b.Queue(firstQuery, conv, phone).Query(func(rows pgx.Rows) error {
		st.next, st.nextSteps, st.nextErr = scanNext(rows)
		if errors.Is(st.nextErr, pgx.ErrNoRows) {
			return nil
		}
		return st.nextErr
	})
	heard := time.Now()
	err = conn.SendBatch(ctx, b).Close()
	if err != nil {
		c := conn.Hijack() // the lock's state is unknown: drop the session with it
		_ = c.Close(context.WithoutCancel(ctx))
		return nil, st, false, fmt.Errorf("open conversation: %w", err)
	}
	if !locked {
		_, _ = conn.Exec(ctx, "SELECT set_config('idle_session_timeout', '0', false)")
		conn.Release()
		return nil, st, false, errLockBusy
	}
	s = &session{conn: conn, conv: conv, lease: time.Duration(lease) * time.Millisecond, heard: heard}
	if fence == nil {
		return s, st, false, nil // conversation deleted with its tenant
	}
	s.fence = *fence
	st.fence, st.headSeq, st.lastSeq, st.halted, st.tenantID, st.conversationID = *fence, *head, *last, *halted, *tenant, *convID
	if slug != nil {
		st.tenant = tenants.Tenant{ID: *tenant, Slug: *slug, Name: *name, HandlerURL: *handler, OnDeadLetter: *onDead, Ambiguous: *ambig,
			MaxAttempts: *maxAtt, SendRate: *rate, PairGapMS: *gap, SendingPausedAt: paused, SendingPausedReason: *reason, CreatedAt: *created,
			HandlerMode: *mode, HandlerTimeoutMS: *hto, ReplyDeadlineMS: *rdl, EventsURL: *events, Weight: *weight, MaxConcurrency: *maxConc}
	}
	return s, st, true, nil
}

// close releases the lock, or drops the connection (and with it the lock)
// when it cannot be trusted.
func (s *session) close() {
	ctx := context.WithoutCancel(context.Background())
	if s.unlocked && !s.broken {
		s.conn.Release()
		return
	}
	if !s.broken {
		var (
			ok     bool
			ignore string
		)
		if err := s.conn.QueryRow(ctx, unlockQuery, lockNamespace, s.conv).Scan(&ok, &ignore); err == nil && ok {
			s.conn.Release()
			return
		}
	}
	c := s.conn.Hijack()
	_ = c.Close(ctx)
}

// convState is the conversation as a drain sees it on takeover.
type convState struct {
	fence          int64
	headSeq        int64
	lastSeq        int64
	halted         bool
	tenantID       int64
	conversationID string
	drainJobID     *int64
	tenant         tenants.Tenant
	credentialAt   *time.Time // the WhatsApp credential's updated_at; nil: none
	// The message after the head, read with the takeover (nextErr
	// pgx.ErrNoRows: none).
	next      message
	nextSteps []step
	nextErr   error
}

const checkFence = `SELECT ordo.check_fence($1, $2)`

// write runs b's statements atomically (a pgx batch is one implicit
// transaction, one round trip) behind the fence check.
func (s *session) write(ctx context.Context, b *pgx.Batch) error {
	fenced := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+1)}
	fenced.Queue(checkFence, s.conv, s.fence)
	fenced.QueuedQueries = append(fenced.QueuedQueries, b.QueuedQueries...)
	return s.send(ctx, fenced)
}

// queryRow runs one fenced statement (an ordo.*_step call, which checks
// the fence itself) and scans its row.
func (s *session) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	s.touch()
	return s.written(s.conn.QueryRow(ctx, sql, args...).Scan(dest...))
}

// send runs b (statements that check the fence themselves) as one
// implicit transaction in one round trip.
func (s *session) send(ctx context.Context, b *pgx.Batch) error {
	s.touch()
	return s.written(s.conn.SendBatch(ctx, b).Close())
}

// written maps a fenced write's error: ErrFenced when the fence rejected
// it, the error itself otherwise (marking the connection if need be).
func (s *session) written(err error) error {
	if err == nil {
		return nil
	}
	if IsFenced(err) {
		return ErrFenced
	}
	return s.fail(err)
}

// fail marks the connection untrustworthy when err left it in an unknown
// state (anything but a clean server-side error).
func (s *session) fail(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		s.broken = true
	}
	return err
}

// finishQuery ends a drain when the conversation has nothing left: it takes
// the row lock ingest takes, so a message committed meanwhile makes it match
// nothing and the drain goes on.
const finishQuery = `
UPDATE ordo.conversations SET drain_job_id = NULL
WHERE id = $1 AND fence = $2 AND head_seq = last_seq
RETURNING true`

const positionQuery = `SELECT fence, last_seq FROM ordo.conversations WHERE id = $1`

// finish clears the conversation's drain if it is caught up; false means a
// message arrived and the drain must go on.
func (s *session) finish(ctx context.Context) (bool, error) {
	var done bool
	s.touch()
	err := s.conn.QueryRow(ctx, finishQuery, s.conv, s.fence).Scan(&done)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, s.fail(fmt.Errorf("finish drain: %w", err))
	}
	var fence, last int64
	if err := s.conn.QueryRow(ctx, positionQuery, s.conv).Scan(&fence, &last); err != nil {
		return false, s.fail(fmt.Errorf("read conversation: %w", err))
	}
	if fence != s.fence {
		return false, ErrFenced
	}
	return false, nil
}
