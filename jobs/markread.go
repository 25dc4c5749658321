package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// Read receipts (--mark-read, issue 26). The webhook marks a new inbound
// message's read receipt 'pending' when its tenant has mark_read
// (engine.noteInbound); right before its handler is called, the drain
// claims it ('pending' → 'sent', one statement) and posts the read receipt
// with a typing indicator while the handler works, and waits for that post
// before the handler's answer is recorded — so it reaches Meta before any
// reply is sent.
//
// Checkpointing: the claim is the record, and it comes before the post,
// so the receipt is sent at most once whatever happens — a retried handler
// call, a takeover, a crash mid-post (which loses that one receipt: a
// cosmetic loss, where a repeat after a crash would show the user a second
// typing indicator). It needs no fence: the claim is one atomic update of
// the message row, which a stale drain can win at most instead of, never
// besides, the current one. A failed post is recorded 'failed' and never
// retried; it never blocks the handler or its replies.

// ReadReceiptTimeout bounds the read receipt's post.
const ReadReceiptTimeout = 10 * time.Second

// claimReadReceipt takes message $1's pending read receipt.
const claimReadReceipt = `UPDATE ordo.messages SET read_receipt = 'sent' WHERE id = $1 AND read_receipt = 'pending' RETURNING true`

// readReceiptFailed records that the claimed read receipt's post failed.
const readReceiptFailed = `UPDATE ordo.messages SET read_receipt = 'failed' WHERE id = $1 AND read_receipt = 'sent'`

// startReadReceipt posts m's read receipt, if it has one pending, in the
// background, and returns a function that waits for the post to end (and
// records a failure). Called right before the handler.
func (r *run) startReadReceipt(ctx context.Context, m message) (wait func()) {
	none := func() {}
	if m.direction != "inbound" {
		return none
	}
	var claimed bool
	err := r.s.queryRow(ctx, claimReadReceipt, []any{m.pk}, &claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return none // none pending: the common case, one primary-key probe
	}
	if err != nil {
		r.log.WarnContext(ctx, "read receipt not sent: claim failed", slog.String("message_id", m.id), slog.String("error", err.Error()))
		return none
	}
	cred, ok := r.readReceiptCredential(ctx)
	if !ok {
		r.readReceiptFailed(ctx, m, "tenant has no usable whatsapp credential")
		return none
	}
	done := make(chan error, 1)
	postCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReadReceiptTimeout)
	go func() {
		defer cancel()
		done <- r.d.wa.MarkRead(postCtx, cred, m.id)
	}()
	return func() {
		if err := <-done; err != nil {
			r.readReceiptFailed(ctx, m, err.Error())
		}
	}
}

// readReceiptFailed records and logs a read receipt that was not sent.
func (r *run) readReceiptFailed(ctx context.Context, m message, reason string) {
	r.log.InfoContext(ctx, "read receipt not sent; the replies go on", slog.String("message_id", m.id), slog.String("error", reason))
	r.s.touch()
	if _, err := r.s.conn.Exec(context.WithoutCancel(ctx), readReceiptFailed, m.pk); err != nil {
		_ = r.s.fail(err)
	}
}

// readReceiptCredential is the tenant's WhatsApp credential for a read
// receipt: the drain's, else the cache's, else the vault's. A missing or
// broken one only skips the receipt (the sends, later, pause the tenant).
func (r *run) readReceiptCredential(ctx context.Context) (whatsapp.Credential, bool) {
	if r.cred != nil {
		return *r.cred, true
	}
	if c, ok := r.d.creds.get(r.tenant.ID, r.credentialAt); ok {
		return c, true
	}
	cred, problem, err := r.loadCredential(ctx)
	if err != nil || problem != "" {
		return whatsapp.Credential{}, false
	}
	return cred, true
}
