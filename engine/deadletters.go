package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeadLetter is a message whose step kept failing (or failed permanently),
// with every attempt's error.
type DeadLetter struct {
	ID             string          `json:"id"`
	Tenant         string          `json:"tenant"`
	MessageID      string          `json:"message_id"`
	ConversationID string          `json:"conversation_id"`
	Seq            int64           `json:"seq"`
	Reason         string          `json:"reason"`
	Errors         json.RawMessage `json:"errors"`
	Payload        json.RawMessage `json:"payload"`
	CreatedAt      time.Time       `json:"created_at"`
	ResolvedAt     *time.Time      `json:"resolved_at,omitempty"`
	Resolution     string          `json:"resolution,omitempty"`
}

// DeadLetterFilter narrows a dead-letter listing.
type DeadLetterFilter struct {
	TenantID       int64  // 0: every tenant (operators' command line)
	ConversationID string // empty: any
	State          string // open|resolved|all; empty means open
	After          int64  // list ids greater than this (paging)
	Limit          int    // 1..500; 0 means 100
}

const deadLetterColumns = `
SELECT d.id::text, t.slug, m.message_id, c.conversation_id, m.seq, d.reason, d.errors, m.payload,
       d.created_at, d.resolved_at, coalesce(d.resolution, '')
FROM ordo.dead_letters d
JOIN ordo.tenants t ON t.id = d.tenant_id
JOIN ordo.messages m ON m.id = d.message_pk
JOIN ordo.conversations c ON c.id = m.conversation_pk`

const deadLettersQuery = deadLetterColumns + `
WHERE ($1 = 0 OR d.tenant_id = $1)
  AND ($2 = '' OR c.conversation_id = $2)
  AND ($3 = 'all' OR ($3 = 'open') = (d.resolved_at IS NULL))
  AND d.id > $4
ORDER BY d.id LIMIT $5`

const deadLetterQuery = deadLetterColumns + ` WHERE d.id = $1 AND ($2 = 0 OR d.tenant_id = $2)`

func scanDeadLetter(r pgx.CollectableRow) (DeadLetter, error) {
	var d DeadLetter
	err := r.Scan(&d.ID, &d.Tenant, &d.MessageID, &d.ConversationID, &d.Seq, &d.Reason, &d.Errors, &d.Payload,
		&d.CreatedAt, &d.ResolvedAt, &d.Resolution)
	return d, err
}

// DeadLetters lists dead letters oldest first.
func (e *Engine) DeadLetters(ctx context.Context, f DeadLetterFilter) ([]DeadLetter, error) {
	if f.State == "" {
		f.State = "open"
	}
	if f.State != "open" && f.State != "resolved" && f.State != "all" {
		return nil, Errorf(CodeInvalid, "state: must be open, resolved or all")
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 1 || f.Limit > 500 {
		return nil, Errorf(CodeInvalid, "limit: must be 1 to 500")
	}
	rows, _ := e.pool.Query(ctx, deadLettersQuery, f.TenantID, f.ConversationID, f.State, f.After, f.Limit)
	out, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, translate(err, "list dead letters")
	}
	return out, nil
}

// DeadLetter returns one dead letter; tenantID 0 means any tenant.
func (e *Engine) DeadLetter(ctx context.Context, tenantID int64, id string) (DeadLetter, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return DeadLetter{}, Errorf(CodeNotFound, "dead letter not found")
	}
	rows, _ := e.pool.Query(ctx, deadLetterQuery, n, tenantID)
	d, err := pgx.CollectExactlyOneRow(rows, scanDeadLetter)
	if err != nil {
		return DeadLetter{}, translate(err, "read dead letter")
	}
	return d, nil
}

// resolveQuery replays or skips a dead letter (ordo.resolve_dead_letter):
// no row when it is not the tenant's, unknown or resolved already.
const resolveQuery = `SELECT slug, conversation_id, message_id FROM ordo.resolve_dead_letter($1, $2, $3)`

// Replay runs a dead-lettered message again, in its conversation's order.
// actor (AdminActor, ActorCLI, APIActor) is recorded in the audit log by
// the same transaction.
func (e *Engine) Replay(ctx context.Context, tenantID int64, id, actor string) (DeadLetter, error) {
	return e.resolve(ctx, tenantID, id, "replayed", actor, nil)
}

// Skip gives up on a dead-lettered message and lets its conversation go on;
// actor is audited as for Replay.
func (e *Engine) Skip(ctx context.Context, tenantID int64, id, actor string) (DeadLetter, error) {
	return e.resolve(ctx, tenantID, id, "skipped", actor, nil)
}

// resolve replays or skips one dead letter in one transaction, audited
// there with details (nil: none).
func (e *Engine) resolve(ctx context.Context, tenantID int64, id, resolution, actor string, details json.RawMessage) (DeadLetter, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return DeadLetter{}, Errorf(CodeNotFound, "dead letter not found")
	}
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var slug, convID, messageID string
		err := tx.QueryRow(ctx, resolveQuery, n, tenantID, resolution).Scan(&slug, &convID, &messageID)
		if err == pgx.ErrNoRows {
			// Either not this tenant's, unknown, or already resolved.
			if _, gerr := e.DeadLetter(ctx, tenantID, id); gerr == nil {
				return Errorf(CodeConflict, "dead letter already resolved")
			}
		}
		if err != nil {
			return err
		}
		action := map[string]string{"replayed": "dead_letter.replay", "skipped": "dead_letter.skip"}[resolution]
		return Audit(ctx, tx, AuditEntry{Actor: actor, Action: action, Tenant: slug, ConversationID: convID,
			MessageID: messageID, DeadLetterID: &n, Details: details})
	})
	if err != nil {
		return DeadLetter{}, translate(err, "resolve dead letter")
	}
	e.logger.InfoContext(ctx, "dead letter resolved", slog.String("dead_letter_id", id), slog.String("resolution", resolution))
	return e.DeadLetter(ctx, tenantID, id)
}
