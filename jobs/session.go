package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs/fair"
	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/tenants"
)

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
	// after is the lease the session keeps when this drain lets its
	// conversation go (milliseconds): 0 alone, the batch's while the
	// connection still holds others of a batch (batch.go).
	after int64
	lease
}

// lease is how long the locks a connection holds are the drain's: length
// is the connection's idle_session_timeout, heard when the drain last sent
// a statement on it. Postgres restarts the idle timer when that statement
// ends, later than heard, so heard+length is an early bound of when the session
// (and its locks) may be gone. A drain alone and a batch keep theirs alike.
type lease struct {
	length time.Duration
	heard  time.Time
}

// leaseMargin is what a drain keeps back from its lease when it bounds an
// external call: the two clocks (this process's, Postgres's) and the
// network between them.
func leaseMargin(lease time.Duration) time.Duration { return lease / 10 }

// touch records that a statement is about to go out on the connection.
func (l *lease) touch() { l.heard = time.Now() }

// left is how long the drain can still be sure it holds its locks
// (monotonic clock: a process frozen meanwhile finds its lease used up
// when it wakes).
func (l *lease) left() time.Duration {
	return time.Until(l.heard.Add(l.length - leaseMargin(l.length)))
}

// checkFence renews the lease (the statement restarts the session's idle
// timer) and fails when another drain took the conversation over.
const checkFence = `SELECT ordo.check_fence($1, $2)`

// stretchQuery lengthens the drain's lease for one external call longer
// than a lease (a tenant's handler_timeout_ms may be up to 10 minutes): the
// session's idle_session_timeout, and the ready row's due time, so the
// scheduler neither retries the held conversation meanwhile nor — the
// worker dead — claims it before the call could have ended. Conversation
// row (the fence) first, then the ready row: sql/LOCKING.md.
const (
	stretchQuery      = `SELECT ordo.check_fence($1, $2), ordo.drain_lease($3)`
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
	if s.left() < timeout {
		if need := leaseFor(timeout); need > s.length {
			b := &pgx.Batch{}
			b.Queue(stretchQuery, s.conv, s.fence, need.Milliseconds())
			b.Queue(stretchReadyQuery, s.conv, need.Milliseconds())
			if err := s.send(ctx, b); err != nil {
				return nil, nil, fmt.Errorf("lengthen lease: %w", err)
			}
			s.length = need
		} else {
			s.touch()
			if _, err := s.conn.Exec(ctx, checkFence, s.conv, s.fence); err != nil {
				return nil, nil, s.written(fmt.Errorf("renew lease: %w", err))
			}
		}
	}
	left := s.left()
	if left <= 0 {
		return nil, nil, ErrFenced // the renewal itself took the whole lease
	}
	cctx, cancel := context.WithTimeout(ctx, min(timeout, left))
	return cctx, cancel, nil
}

const unlockQuery = `SELECT ordo.drain_unlock($1, $2)`

// claimQuery is the one claim (ordo.claim): tenant t's due conversations,
// taken over — a batch whose next messages are sends it started, or one
// conversation alone with its next message read and its first step started
// when it may start — releasing the slot of the runner's previous drain
// first. The tenant's settings, for a drain alone, follow in the same round
// trip (tenants.QueueByID). One round trip where there were seven (claim,
// lock, takeover, tenant, credential, first message, its start).
const claimQuery = `
SELECT conv, fence, conversation_id, head_seq, last_seq, slot, more, batched, credential_at,
       message_pk, message_id, seq, direction, payload,
       step_id, step_idx, step_kind, step_status, step_request, step_attempts, since_start, provider_status, provider_message_id, started,
       told, told_wait
FROM ordo.claim($1, $2, $3, $4, $5, $6, $7, $8)`

// slotHold is a tenant concurrency slot a runner holds (ordo.claim).
type slotHold struct {
	tenant int64
	slot   int
}

// claimAndOpen claims tenant t's next due conversations on conn and takes
// them over, in one round trip (ordo.claim); release (may be nil) is the
// slot of the runner's previous drain, given back first. With bt, a batch
// of up to bt.max is claimed when the tenant's next conversations qualify
// (batch.go): it comes back in bt.convs, and no session does. Otherwise,
// with alone, a session of one conversation, or nil when there was nothing
// to claim.
func claimAndOpen(ctx context.Context, conn *pgxpool.Conn, t fair.Turn, leaseMS int64, phone *string, release *slotHold, bt *batch, alone bool) (s *session, st convState, err error) {
	var relTenant *int64
	var relSlot *int
	if release != nil {
		relTenant, relSlot = &release.tenant, &release.slot
	}
	most := 0
	if bt != nil {
		most = bt.max
	}
	var (
		conv, fence int64
		slot        *int
		batched     bool
		tenantFound bool
		m           message
		steps       []step
		last        *messageRow // of the conversation alone
	)
	b := &pgx.Batch{}
	b.Queue(claimQuery, t.Tenant, t.Cap, most, alone, leaseMS, phone, relTenant, relSlot).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		for rows.Next() {
			var (
				r struct {
					conv, fence, head, last int64
					convID                  string
					more, batched           bool
					slot                    *int
					credAt                  *time.Time
				}
				mr messageRow
			)
			if err := rows.Scan(mr.dest(&r.conv, &r.fence, &r.convID, &r.head, &r.last, &r.slot, &r.more, &r.batched, &r.credAt)...); err != nil {
				return err
			}
			if r.batched {
				var (
					bm  message
					bst []step
				)
				mr.collect(&bm, &bst)
				batched = true
				bt.credentialAt, bt.more = r.credAt, r.more
				bt.convs = append(bt.convs, startedSend(r.conv, r.fence, r.convID, bm, bst[0].id))
				continue
			}
			// One conversation alone: a row per step of its next message.
			conv, fence, slot = r.conv, r.fence, r.slot
			st.fence, st.headSeq, st.lastSeq, st.conversationID = r.fence, r.head, r.last, r.convID
			st.more, st.credentialAt = r.more, r.credAt
			if mr.collect(&m, &steps) {
				last = &mr
			}
		}
		return rows.Err()
	})
	var tt tenants.Tenant
	if alone {
		tenants.QueueByID(b, t.Tenant, &tt, &tenantFound)
	}
	heard := time.Now()
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, st, fmt.Errorf("claim conversation: %w", err)
	}
	if batched || conv == 0 {
		return nil, st, nil
	}
	s = &session{conn: conn, conv: conv, fence: fence, lease: lease{length: time.Duration(leaseMS) * time.Millisecond, heard: heard}}
	if slot != nil {
		s.slot = &slotHold{tenant: t.Tenant, slot: *slot}
	}
	st.tenantID = t.Tenant
	if tenantFound {
		st.tenant = tt
	}
	st.nextErr = pgx.ErrNoRows
	if last != nil {
		st.next, st.nextSteps, st.nextErr = m, firstSteps(m, steps), nil
		toldFirst(st.nextSteps, last.told, last.toldWait)
	}
	return s, st, nil
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
	var ok bool
	// ok false: the lock was not held (a fenced drain whose session Postgres
	// ended, so this is a new connection, or a purged conversation).
	return s.conn.QueryRow(ctx, unlockQuery, s.conv, s.after).Scan(&ok) == nil
}

const parkQuery = `SELECT ordo.park_conversation($1, $2, make_interval(secs => $3::float8 / 1000), $4)`

// park ends the run without catching the conversation up: it is due again
// after delay (or at once, if woken meanwhile), and its lock is released
// with the same call.
func (s *session) park(ctx context.Context, delay time.Duration) error {
	var ok bool
	if err := s.queryRow(ctx, parkQuery, []any{s.conv, s.fence, delay.Milliseconds(), s.after}, &ok); err != nil {
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

// write runs b's statements atomically (a pgx batch is one implicit
// transaction, one round trip) behind the fence check.
func (s *session) write(ctx context.Context, b *pgx.Batch) error {
	fenced := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+1)}
	fenced.Queue(checkFence, s.conv, s.fence)
	fenced.QueuedQueries = append(fenced.QueuedQueries, b.QueuedQueries...)
	return s.send(ctx, fenced)
}

// queryRow runs one statement on the drain's connection (a read, or a
// write that checks the fence itself) and scans its row.
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
// state (anything but a clean server-side error, or a row that was not
// there).
func (s *session) fail(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) && !errors.Is(err, pgx.ErrNoRows) {
		s.broken = true
	}
	return err
}
