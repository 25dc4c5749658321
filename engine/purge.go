package engine

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// PurgeLockTimeout bounds how long one purge transaction waits for a row
// (a conversation an ingest or a drain's write holds); the batch is retried.
const PurgeLockTimeout = 5 * time.Second

// Purged is what a purge removed, and what it had to keep.
type Purged struct {
	Tenant string    `json:"tenant"`
	Before time.Time `json:"before"`
	All    bool      `json:"all"`
	// Conversations and DedupeRecords were deleted whole (--all only).
	Conversations int `json:"conversations_deleted"`
	DedupeRecords int `json:"dedupe_records_deleted"`
	// ContentRemoved counts messages whose content (payload, steps) went
	// and whose dedupe record stays.
	ContentRemoved int `json:"messages_content_removed"`
	Steps          int `json:"steps_deleted"`
	DeadLetters    int `json:"dead_letters_deleted"`
	SandboxSends   int `json:"sandbox_sends_deleted"`
	// KeptUnfinished are messages before the cutoff still queued or running
	// (or behind a halted conversation's head), content kept: they are work
	// in flight. KeptOpenDeadLetters are messages with an open dead letter,
	// kept until an operator replays or skips them. Both are 0 after --all
	// unless the conversation has messages after the cutoff.
	KeptUnfinished      int `json:"kept_unfinished"`
	KeptOpenDeadLetters int `json:"kept_open_dead_letters"`
}

const purgeConversations = `SELECT conversations, messages, steps, dead_letters, sandbox_sends, more FROM ordo.purge_conversations($1, $2)`

const pruneBefore = `SELECT messages, steps, dead_letters, sandbox_sends, more FROM ordo.prune_messages($1, $2, 'infinity')`

const purgeLeft = `
SELECT count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM ordo.dead_letters d WHERE d.message_pk = m.id AND d.resolved_at IS NULL)),
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM ordo.dead_letters d WHERE d.message_pk = m.id AND d.resolved_at IS NULL))
FROM ordo.messages m WHERE m.tenant_id = $1 AND m.payload IS NOT NULL AND m.created_at < $2`

const tenantIDBySlug = `SELECT id FROM ordo.tenants WHERE slug = $1`

// Purge erases tenant's content from before the cutoff (a right-to-erasure
// request), in small transactions that take the engine's locks in its order.
//
// Without all it removes what retention would: the payload, steps and
// resolved dead letters of finished messages, keeping their dedupe records;
// unfinished messages and open dead letters are kept and counted (finish,
// replay or skip them, then purge again, or use all).
//
// With all it also deletes whole conversations in which nothing was accepted
// at or after before — dedupe records, open dead letters and work in flight
// included (a drain at work on one is fenced: its next write finds no
// conversation) — so a repeat of one of those message ids is accepted as new.
// A conversation with newer messages keeps its older dedupe records (the
// order of what follows depends on its seqs) and loses their content.
func (e *Engine) Purge(ctx context.Context, tenant string, before time.Time, all bool) (Purged, error) {
	out := Purged{Tenant: tenant, Before: before, All: all}
	var tid int64
	if err := e.pool.QueryRow(ctx, tenantIDBySlug, tenant).Scan(&tid); err != nil {
		return out, translate(err, "read tenant")
	}
	if all {
		for {
			var more bool
			var conv, msgs, steps, dls, sends int
			err := e.batch(ctx, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, purgeConversations, tid, before).Scan(&conv, &msgs, &steps, &dls, &sends, &more)
			})
			if err != nil {
				return out, translate(err, "purge conversations")
			}
			out.Conversations += conv
			out.DedupeRecords += msgs
			out.Steps += steps
			out.DeadLetters += dls
			out.SandboxSends += sends
			if !more {
				break
			}
		}
	}
	for {
		var more bool
		var msgs, steps, dls, sends int
		err := e.batch(ctx, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, pruneBefore, tid, before).Scan(&msgs, &steps, &dls, &sends, &more)
		})
		if err != nil {
			return out, translate(err, "purge message content")
		}
		out.ContentRemoved += msgs
		out.Steps += steps
		out.DeadLetters += dls
		out.SandboxSends += sends
		if !more {
			break
		}
	}
	if err := e.pool.QueryRow(ctx, purgeLeft, tid, before).Scan(&out.KeptUnfinished, &out.KeptOpenDeadLetters); err != nil {
		return out, translate(err, "count what purge kept")
	}
	return out, nil
}

// batch runs f in a transaction whose lock waits are bounded, retrying it
// when a wait ran out (a conversation busy for that long).
func (e *Engine) batch(ctx context.Context, f func(pgx.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, setPurgeLockTimeout, strconv.FormatInt(PurgeLockTimeout.Milliseconds(), 10)); err != nil {
				return err
			}
			return f(tx)
		})
		if err == nil || !isLockTimeout(err) || attempt >= 10 {
			return err
		}
	}
}

const setPurgeLockTimeout = `SELECT set_config('lock_timeout', $1, true)`
