package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/jobstest"
)

// The audit log is append-only: UPDATE, DELETE and TRUNCATE are refused,
// also of an old entry outside the pruning function;
// ordo.prune_audit removes only entries older than the audit's minimum
// retention. (main: the database role could rewrite or delete any entry.)
func TestAuditLogAppendOnly(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	ctx := context.Background()
	if err := engine.Audit(ctx, b.Pool, engine.AuditEntry{Actor: "cli", Action: "tenant.update", Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(ctx, `INSERT INTO ordo.audit_log (at, actor, action, tenant) VALUES (now() - interval '100 days', 'cli', 'tenant.create', 'acme')`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE ordo.audit_log SET actor = 'someone-else'`,
		`UPDATE ordo.audit_log SET conversation_id = NULL`, // even a redaction, outside ordo.redact_audit
		`DELETE FROM ordo.audit_log`,
		`TRUNCATE ordo.audit_log`,
	} {
		_, err := b.Pool.Exec(ctx, q)
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused as append-only", q, err)
		}
	}
	// Outside ordo.prune_audit not even an old entry goes, from a plain
	// statement or from code of one's own.
	for _, q := range []string{
		`DELETE FROM ordo.audit_log WHERE at < now() - interval '99 days'`,
		`DO $$ BEGIN DELETE FROM ordo.audit_log WHERE at < now() - interval '99 days'; END $$`,
	} {
		if _, err := b.Pool.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused as append-only", q, err)
		}
	}
	// A role whose search_path names ordo (the guard reads the function's
	// name from the call stack) prunes too.
	var pruned int
	err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL search_path = ordo, public`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT prune_audit(now())`).Scan(&pruned)
	})
	if err != nil {
		t.Fatal(err)
	}
	if pruned != 1 || b.Count(`SELECT count(*) FROM ordo.audit_log`) != 1 || b.Count(`SELECT count(*) FROM ordo.audit_log WHERE action = 'tenant.update'`) != 1 {
		t.Fatalf("prune_audit removed %d, left %d entries; want the 100-day-old one gone, the recent one kept", pruned, b.Count(`SELECT count(*) FROM ordo.audit_log`))
	}
	// Its leave does not outlive the function: the same transaction cannot
	// go on deleting.
	err = pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT ordo.prune_audit(now())`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO ordo.audit_log (at, actor, action) VALUES (now() - interval '200 days', 'cli', 'x')`)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM ordo.audit_log WHERE action = 'x'`)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("a delete after prune_audit in its transaction: %v, want refused", err)
	}
}

// `ordo purge --all` erases the conversation and message ids from the
// tenant's audit entries about the conversations it deletes, keeping the
// fact of each action; entries about conversations it keeps, and other
// tenants' entries, are untouched. (main: the ids stayed.)
func TestPurgeAllRedactsAudit(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	ctx := context.Background()
	b.Ingest("16505550001", "gone-1", "hello")
	dl := int64(42)
	for _, a := range []engine.AuditEntry{
		{Actor: "admin:ann", Action: "dead_letter.replay", Tenant: "acme", ConversationID: "16505550001", MessageID: "gone-1", DeadLetterID: &dl},
		{Actor: "admin:ann", Action: "dead_letter.skip", Tenant: "other", ConversationID: "16505550001", MessageID: "theirs"},
	} {
		if err := engine.Audit(ctx, b.Pool, a); err != nil {
			t.Fatal(err)
		}
	}
	cutoff := time.Now().Add(time.Second)
	b.Ingest("16505550002", "kept-1", "later") // made newer than the cutoff below: kept
	if _, err := b.Pool.Exec(ctx, `UPDATE ordo.messages SET created_at = now() + interval '1 hour' WHERE message_id = 'kept-1'`); err != nil {
		t.Fatal(err)
	}
	if err := engine.Audit(ctx, b.Pool, engine.AuditEntry{Actor: "cli", Action: "dead_letter.skip", Tenant: "acme", ConversationID: "16505550002", MessageID: "kept-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engine.Purge(ctx, "acme", cutoff, true); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	rows, _ := b.Pool.Query(ctx, `SELECT tenant || '/' || action, coalesce(conversation_id, '-') || ' ' || coalesce(message_id, '-') || ' ' ||
	        coalesce(dead_letter_id::text, '-') || ' ' || actor || ' ' || details::text FROM ordo.audit_log`)
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		got[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"acme/dead_letter.replay": `- - 42 admin:ann {"redacted": true}`,
		"other/dead_letter.skip":  `16505550001 theirs - admin:ann {}`,
		"acme/dead_letter.skip":   `16505550002 kept-1 - cli {}`,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("audit entry %s after purge --all: %q, want %q", k, got[k], v)
		}
	}
	if b.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'gone-1'`) != 0 {
		t.Fatalf("the purged conversation's message is still there")
	}
}
