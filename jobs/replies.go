package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	ordosql "github.com/ordo-dev/ordo/sql"
)

// An async handler (handler_mode async, or a 202 in sync mode) answers at
// once and posts the message's replies later to
// POST /v1/messages/{message_id}/replies (ordo.post_replies), which leaves
// them on the handle step and wakes the conversation. Meanwhile the handle
// step is 'waiting' until replies_due_at (the call's start plus the
// tenant's reply_deadline_ms) and the conversation is parked in the ready
// set until then, holding no worker: its next message waits, and the
// handler is not called again. The drain that finds the replies turns them
// into the message's send steps (ordo.finish); one that finds the
// deadline passed with none applies the dead-letter policy, unless replies
// were posted while it did (ordo.check_no_replies rolls the dead letter
// back).

// markWaiting records that the handler will post the replies: the handle
// step waits until its deadline, counted from the call's start.
const markWaiting = `
UPDATE ordo.steps SET status = 'waiting', finished_at = NULL,
    replies_due_at = coalesce(started_at, now()) + make_interval(secs => $2::float8 / 1000)
WHERE id = $1`

// repliesQuery reads what a handle step's posted replies are, and how long
// it still waits for them (NULL: it does not wait; negative: past due).
const repliesQuery = `
SELECT replies, (extract(epoch FROM replies_due_at - clock_timestamp()) * 1000)::bigint
FROM ordo.steps WHERE id = $1`

const checkNoReplies = `SELECT ordo.check_no_replies($1)`

// waitReplies records that the handler answered "the replies will be
// posted" and goes on as awaitReplies does (replies may have come while the
// call was in flight).
func (r *run) waitReplies(ctx context.Context, m message, st *step, last bool) (outcome, error) {
	b := &pgx.Batch{}
	b.Queue(markWaiting, st.id, r.tenant.ReplyDeadlineMS)
	if err := r.s.write(ctx, b); err != nil {
		return outcome{}, err
	}
	st.status = "waiting"
	r.log.InfoContext(ctx, "handler will post the replies; the conversation waits for them",
		slog.String("message_id", m.id), slog.Int64("seq", m.seq), slog.Int64("step_id", st.id),
		slog.Duration("deadline", time.Duration(r.tenant.ReplyDeadlineMS)*time.Millisecond))
	out, _, err := r.awaitReplies(ctx, m, st, last)
	return out, err
}

// awaitReplies deals with a handle step that was started before: replies
// posted for it are stored as the message's send steps (the handler is not
// called again); a waiting step with none waits until its deadline, after
// which the message is dead-lettered. handled false: the step is not
// waiting and has no replies, so its handler is called.
func (r *run) awaitReplies(ctx context.Context, m message, st *step, last bool) (out outcome, handled bool, err error) {
	for {
		var (
			replies json.RawMessage
			left    *int64
		)
		if err := r.s.queryRow(ctx, repliesQuery, []any{st.id}, &replies, &left); err != nil {
			return outcome{}, true, fmt.Errorf("read posted replies: %w", err)
		}
		switch {
		case replies != nil:
			var sends json.RawMessage
			if len(replies) > 2 {
				sends = replies
			}
			out, err := r.finish(ctx, m, st, nil, last && sends == nil, sends)
			if err == nil {
				r.log.InfoContext(ctx, "posted replies taken", slog.String("message_id", m.id), slog.Int64("seq", m.seq), slog.Int64("step_id", st.id))
			}
			return out, true, err
		case st.status != "waiting":
			return outcome{}, false, nil
		case left != nil && *left > 0:
			if r.d.hooks.awaitingReplies != nil {
				r.d.hooks.awaitingReplies(st.id)
			}
			return outcome{kind: outcomeWait, delay: time.Duration(*left) * time.Millisecond}, true, nil
		}
		deadline := time.Duration(r.tenant.ReplyDeadlineMS) * time.Millisecond
		reason := fmt.Sprintf("the handler answered that it would post the replies, and posted none within the reply deadline (%s): "+
			"does the n8n workflow end with an HTTP Request to POST /v1/messages/%s/replies?", deadline, m.id)
		if r.d.hooks.beforeExpire != nil {
			r.d.hooks.beforeExpire(st.id)
		}
		out, err := r.deadLetterGuarded(ctx, m, st, reason)
		if isRepliesArrived(err) {
			continue // posted just now: send them
		}
		return out, true, err
	}
}

// deadLetterGuarded is deadLetter behind ordo.check_no_replies.
func (r *run) deadLetterGuarded(ctx context.Context, m message, st *step, reason string) (outcome, error) {
	entry := errorEntry(st.attempts, reason, "")
	return r.deadLetterWith(ctx, m, st, reason, entry, func(b *pgx.Batch) { b.Queue(checkNoReplies, st.id) })
}

func isRepliesArrived(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == ordosql.SQLStateRepliesArrived
}
