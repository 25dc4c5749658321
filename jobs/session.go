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

	"github.com/ordo-dev/ordo/jobs/fair"
	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/tenants"
)

// lockNamespace is the first key of every conversation advisory lock
// ("ordo"), keeping them apart from River's and an application's own locks.
const lockNamespace = 0x6f72646f

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
	// slot is the tenant's concurrency slot this drain holds (nil: none).
	slot *slotHold
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

// stretchQuery lengthens the drain's lease for one external call longer
// than a lease (a tenant's handler_timeout_ms may be up to 10 minutes): the
// session's idle_session_timeout, and the ready row's due time, so the
// scheduler neither retries the held conversation meanwhile nor — the
// worker dead — claims it before the call could have ended. Conversation
// row (the fence) first, then the ready row: sql/LOCKING.md.
const (
	stretchQuery      = `SELECT ordo.check_fence($1, $2), set_config('idle_session_timeout', $3, false)`
	stretchReadyQuery = `UPDATE ordo.ready SET due_at = greatest(due_at, now() + make_interval(secs => $2::float8 / 1000)) WHERE conversation_pk = $1`
)

// leaseFor is the lease that leaves timeout after leaseMargin.
func leaseFor(timeout time.Duration) time.Duration { return timeout + timeout/9 + time.Second }

// callContext bounds an external call (a send, a handler call) of at most
// timeout by the lease the drain holds: no call outlives the lock that
// makes it this drain's alone. When less than timeout is left, the lease is
// renewed first with a fence check (one round trip), and lengthened for the
// call when timeout is longer than a lease; that fails — and no call is
// made — when the drain lost the conversation meanwhile (stalled past its
// lease, its session ended by Postgres, a newer drain in charge).
func (s *session) callContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc, error) {
	if s.leaseLeft() < timeout {
		if need := leaseFor(timeout); need > s.lease {
			b := &pgx.Batch{}
			b.Queue(stretchQuery, s.conv, s.fence, strconv.FormatInt(need.Milliseconds(), 10))
			b.Queue(stretchReadyQuery, s.conv, need.Milliseconds())
			if err := s.send(ctx, b); err != nil {
				return nil, nil, fmt.Errorf("lengthen lease: %w", err)
			}
			s.lease = need
		} else {
			s.touch()
			if _, err := s.conn.Exec(ctx, refreshQuery, s.conv, s.fence); err != nil {
				return nil, nil, s.written(fmt.Errorf("renew lease: %w", err))
			}
		}
	}
	left := s.leaseLeft()
	if left <= 0 {
		return nil, nil, ErrFenced // the renewal itself took the whole lease
	}
	cctx, cancel := context.WithTimeout(ctx, min(timeout, left))
	return cctx, cancel, nil
}

const unlockQuery = `SELECT pg_advisory_unlock($1::int, ($2 % 2147483647)::int), set_config('idle_session_timeout', coalesce(nullif(current_setting('ordo.batch_lease', true), ''), '0'), false)`

// claimQuery claims the due conversation of a tenant that has waited longest
// (ordo.claim_conversation: the conversation's lock, and a concurrency slot
// when the tenant has a cap), releasing the slot of the runner's previous
// drain first; openQuery and firstQuery follow in the same round trip and
// transaction. The claimed conversation reaches them through the
// transaction-local setting ordo.claimed.
const claimQuery = `SELECT conv, slot, more FROM ordo.claim_conversation($1, $2, $3, $4, $5, $6)`

// openQuery takes the claimed conversation over — bumps the fence under FOR
// UPDATE, marks its ready row running and due again after the lease (a drain
// that dies is claimed again then) — and reads the tenant and the stamp of
// its WhatsApp credential; firstQuery follows in the same round trip: one
// where there were seven (claim, lock, takeover, tenant, credential, first
// message, its start). The new fence is left in the transaction-local
// setting ordo.fence for firstQuery. Row locks in the order of
// sql/LOCKING.md: conversation, then ready row.
const openQuery = `
WITH cv AS MATERIALIZED (SELECT nullif(current_setting('ordo.claimed', true), '')::bigint AS id),
l AS (SELECT c.id FROM ordo.conversations c, cv WHERE c.id = cv.id FOR UPDATE OF c),
u AS (
    UPDATE ordo.conversations c SET fence = c.fence + 1 FROM l WHERE c.id = l.id
    RETURNING c.id, c.fence, c.head_seq, c.last_seq, c.halted_at IS NOT NULL AS halted, c.tenant_id, c.conversation_id),
rd AS (
    UPDATE ordo.ready r SET due_at = now() + make_interval(secs => $1::float8 / 1000), running = true, woken = false
    FROM u WHERE r.conversation_pk = u.id)
SELECT u.fence, u.head_seq, u.last_seq, u.halted, u.tenant_id, u.conversation_id,
       t.slug, t.name, COALESCE(t.handler_url, ''), t.on_dead_letter, t.ambiguous, t.max_attempts,
       t.send_rate, t.pair_gap_ms, t.sending_paused_at, COALESCE(t.sending_paused_reason, ''), t.created_at,
       t.handler_mode, t.handler_timeout_ms, t.reply_deadline_ms, COALESCE(t.events_url, ''), t.weight, t.max_concurrency,
       t.handler_down_since, t.handler_outage_limit_ms, t.number_down_since,
       cr.updated_at,
       CASE WHEN u.fence IS NOT NULL THEN set_config('ordo.fence', u.fence::text, true) END
FROM (SELECT 1) one LEFT JOIN u ON true
LEFT JOIN ordo.tenants t ON t.id = u.tenant_id
LEFT JOIN ordo.credentials cr ON cr.tenant_id = u.tenant_id AND cr.name = 'whatsapp'`

// slotHold is a tenant concurrency slot a runner holds (ordo.claim_conversation).
type slotHold struct {
	tenant int64
	slot   int
}

// claimAndOpen claims tenant t's next due conversation on conn and takes it
// over, in one round trip; release (may be nil) is the slot of the runner's
// previous drain, given back first. It returns a nil session when there was
// nothing to claim. A session whose conversation is gone (deleted with its
// tenant, or purged) comes back with found false: close it. With bt, a
// batch of quiet conversations is claimed first (batch.go); when bt.convs
// comes back non-empty, no session does.
func claimAndOpen(ctx context.Context, conn *pgxpool.Conn, t fair.Turn, lease int64, phone *string, release *slotHold, bt *batch) (s *session, st convState, found bool, err error) {
	var (
		conv    *int64
		slot    *int
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
		hDown   *time.Time
		hLimit  *int64
		nDown   *time.Time
	)
	var relTenant *int64
	var relSlot *int
	if release != nil {
		relTenant, relSlot = &release.tenant, &release.slot
	}
	b := &pgx.Batch{}
	if bt != nil {
		bt.queue(b, lease, phone)
	}
	b.Queue(claimQuery, lockNamespace, t.Tenant, t.Cap, lease, relTenant, relSlot).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		for rows.Next() {
			if err := rows.Scan(&conv, &slot, &st.more); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	b.Queue(openQuery, lease).QueryRow(func(row pgx.Row) error {
		return row.Scan(&fence, &head, &last, &halted, &tenant, &convID,
			&slug, &name, &handler, &onDead, &ambig, &maxAtt, &rate, &gap, &paused, &reason, &created,
			&mode, &hto, &rdl, &events, &weight, &maxConc, &hDown, &hLimit, &nDown, &st.credentialAt, nil)
	})
	// The first message is read — and its first step started, when it can —
	// in the same round trip and transaction.
	b.Queue(firstQuery, phone).Query(func(rows pgx.Rows) error {
		st.next, st.nextSteps, st.nextErr = scanNext(rows)
		if errors.Is(st.nextErr, pgx.ErrNoRows) {
			return nil
		}
		return st.nextErr
	})
	heard := time.Now()
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, st, false, fmt.Errorf("claim conversation: %w", err)
	}
	if conv == nil {
		return nil, st, false, nil
	}
	s = &session{conn: conn, conv: *conv, lease: time.Duration(lease) * time.Millisecond, heard: heard}
	if slot != nil {
		s.slot = &slotHold{tenant: t.Tenant, slot: *slot}
	}
	if fence == nil {
		return s, st, false, nil // conversation deleted meanwhile
	}
	s.fence = *fence
	st.fence, st.headSeq, st.lastSeq, st.halted, st.tenantID, st.conversationID = *fence, *head, *last, *halted, *tenant, *convID
	if slug != nil {
		st.tenant = tenants.Tenant{ID: *tenant, Slug: *slug, Name: *name, HandlerURL: *handler, OnDeadLetter: *onDead, Ambiguous: *ambig,
			MaxAttempts: *maxAtt, SendRate: *rate, PairGapMS: *gap, SendingPausedAt: paused, SendingPausedReason: *reason, CreatedAt: *created,
			HandlerMode: *mode, HandlerTimeoutMS: *hto, ReplyDeadlineMS: *rdl, EventsURL: *events, Weight: *weight, MaxConcurrency: *maxConc,
			HandlerDownSince: hDown, HandlerOutageLimitMS: *hLimit, NumberDownSince: nDown}
	}
	return s, st, true, nil
}

// close releases the conversation's lock unless the drain's last write did,
// and says whether the connection can be used again; a connection in an
// unknown state must be dropped (and with it every lock it held).
func (s *session) close() (usable bool) {
	if s.broken {
		return false
	}
	if s.unlocked {
		return true
	}
	ctx := context.WithoutCancel(context.Background())
	var (
		ok     bool
		ignore string
	)
	// ok false: the lock was not held (a fenced drain whose session Postgres
	// ended, so this is a new connection, or a purged conversation).
	return s.conn.QueryRow(ctx, unlockQuery, lockNamespace, s.conv).Scan(&ok, &ignore) == nil
}

const parkQuery = `SELECT ordo.park_conversation($1, $2, $3, make_interval(secs => $4::float8 / 1000))`

// park ends the run without catching the conversation up: it is due again
// after delay (or at once, if woken meanwhile), and its lock is released
// with the same call.
func (s *session) park(ctx context.Context, delay time.Duration) error {
	var ok bool
	if err := s.queryRow(ctx, parkQuery, []any{s.conv, s.fence, lockNamespace, delay.Milliseconds()}, &ok); err != nil {
		return fmt.Errorf("park conversation: %w", err)
	}
	s.unlocked = true
	return nil
}

// convState is the conversation as a drain sees it on takeover.
type convState struct {
	fence          int64
	headSeq        int64
	lastSeq        int64
	halted         bool
	tenantID       int64
	conversationID string
	tenant         tenants.Tenant
	credentialAt   *time.Time // the WhatsApp credential's updated_at; nil: none
	// more: another of the tenant's conversations was due behind this one
	// at the claim.
	more bool
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

// finishQuery ends a drain when the conversation has nothing left: under
// the row lock ingest takes, the conversation leaves the ready set (a message
// committed meanwhile makes it match nothing, and the drain goes on) and the
// drain's lock is released; the next drain's takeover waits for this row
// lock, so it sees every write of this one.
const finishQuery = `
WITH c AS (
    SELECT id FROM ordo.conversations WHERE id = $1 AND fence = $2 AND head_seq = last_seq FOR NO KEY UPDATE),
d AS (DELETE FROM ordo.ready r USING c WHERE r.conversation_pk = c.id)
SELECT pg_advisory_unlock($3::int, (c.id % 2147483647)::int), set_config('idle_session_timeout', coalesce(nullif(current_setting('ordo.batch_lease', true), ''), '0'), false) FROM c`

const positionQuery = `SELECT fence, last_seq FROM ordo.conversations WHERE id = $1`

// finish ends the drain if the conversation is caught up; false means a
// message arrived and the drain must go on.
func (s *session) finish(ctx context.Context) (bool, error) {
	var (
		unlocked bool
		ignore   string
	)
	s.touch()
	err := s.conn.QueryRow(ctx, finishQuery, s.conv, s.fence, lockNamespace).Scan(&unlocked, &ignore)
	if err == nil {
		s.unlocked = unlocked
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
