package engine

// The audit log: who did what to which tenant, conversation, message or
// dead letter, and when. An entry is written by the action's own
// transaction (Audit on its tx), so the log and the data never disagree.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
)

// Actors that are not an admin user.
const (
	// ActorCLI is the ordo command line.
	ActorCLI = "cli"
)

// AdminActor names a console operator (a logged-in name: an operator of
// ordo.operators, or "admin" for the break-glass account).
func AdminActor(user string) string {
	user = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, strings.TrimSpace(user))
	if r := []rune(user); len(r) > 64 {
		user = string(r[:64])
	}
	if user == "" {
		user = "admin"
	}
	return "admin:" + user
}

// APIActor names a tenant acting through its API key.
func APIActor(tenant string) string { return "api:" + tenant }

// AuditEntry is one operator action.
type AuditEntry struct {
	ID             int64           `json:"id"`
	At             time.Time       `json:"at"`
	Actor          string          `json:"actor"`
	Action         string          `json:"action"`
	Tenant         string          `json:"tenant,omitempty"`
	ConversationID string          `json:"conversation_id,omitempty"`
	MessageID      string          `json:"message_id,omitempty"`
	DeadLetterID   *int64          `json:"dead_letter_id,omitempty"`
	Details        json.RawMessage `json:"details"`
}

const insertAudit = `
INSERT INTO ordo.audit_log (actor, action, tenant, conversation_id, message_id, dead_letter_id, details)
VALUES ($1, $2, NULLIF($3, ''), NULLIF($4, ''), NULLIF($5, ''), $6, coalesce($7::jsonb, '{}'))`

// Audit records a on q, the action's own transaction. Details must hold no
// secret: callers pass what was changed, never a credential or key.
func Audit(ctx context.Context, q Querier, a AuditEntry) error {
	if a.Actor == "" || a.Action == "" {
		return fmt.Errorf("audit: actor and action required")
	}
	var details any
	if len(a.Details) > 0 {
		details = string(a.Details)
	}
	if _, err := q.Exec(ctx, insertAudit, a.Actor, a.Action, a.Tenant, a.ConversationID, a.MessageID, a.DeadLetterID, details); err != nil {
		return fmt.Errorf("audit %s: %w", a.Action, err)
	}
	return nil
}

// AuditFilter narrows the audit listing; the page pages with Before.
type AuditFilter struct {
	Tenant string // empty: every tenant
	Actor  string // "admin:<operator>", "cli", …; empty: anyone
	Action string // tenant.create, dead_letter.replay, …; empty: any
	Before int64  // ids below this; 0: from the newest
	Limit  int    // 1..500; 0 means AuditLimitDefault
}

// AuditLimitDefault is the page size of AuditLog when none is asked for.
const AuditLimitDefault = 100

const auditQuery = `
SELECT id, at, actor, action, coalesce(tenant, ''), coalesce(conversation_id, ''), coalesce(message_id, ''),
       dead_letter_id, details
FROM ordo.audit_log
WHERE ($1 = '' OR tenant = $1) AND ($2 = 0 OR id < $2) AND ($4 = '' OR actor = $4) AND ($5 = '' OR action = $5)
ORDER BY id DESC LIMIT $3`

// AuditLog lists entries newest first.
func (e *Engine) AuditLog(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	f.Limit = cmp.Or(f.Limit, AuditLimitDefault)
	if len(f.Actor) > 200 || len(f.Action) > 200 {
		return nil, Errorf(CodeInvalid, "actor and action: must be at most 200 bytes")
	}
	if f.Limit < 1 || f.Limit > 500 {
		return nil, Errorf(CodeInvalid, "limit: must be 1 to 500")
	}
	rows, _ := e.pool.Query(ctx, auditQuery, f.Tenant, f.Before, f.Limit, f.Actor, f.Action)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[AuditEntry])
	if err != nil {
		return nil, translate(err, "list audit log")
	}
	return out, nil
}

// Tx runs f in one transaction on the engine's pool: an endpoint that
// changes something and audits it does both in f.
func (e *Engine) Tx(ctx context.Context, f func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, e.pool, f)
}
