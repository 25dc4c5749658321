package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// CodeNotWaiting: replies were posted for a message that does not wait for
// them (409).
const CodeNotWaiting Code = "not_waiting"

// RepliesAccepted is the answer to replies posted by an async handler.
type RepliesAccepted struct {
	MessageID string `json:"message_id"`
	// Replies is how many replies were stored (they are sent in order).
	Replies   int    `json:"replies"`
	Status    string `json:"status"`
	Duplicate bool   `json:"duplicate"`
}

const postRepliesQuery = `SELECT verdict, reason, replies FROM ordo.post_replies($1, $2, $3)`

// PostReplies stores replies (a JSON array of checked WhatsApp messages)
// as the replies of the tenant's inbound message messageID, whose async
// handler was called, and wakes its conversation: the drain sends them in
// order (jobs/replies.go). A repeat of the same replies is a duplicate;
// other replies for a message that has them, or replies for a message that
// waits for none, are refused and store nothing. One transaction,
// lock waits bounded by LockTimeout (ordo.post_replies: conversation, step,
// ready row).
func (e *Engine) PostReplies(ctx context.Context, tenantID int64, messageID string, replies json.RawMessage) (RepliesAccepted, error) {
	out := RepliesAccepted{MessageID: messageID}
	var (
		verdict string
		reason  *string
	)
	err := e.writeTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, postRepliesQuery, tenantID, messageID, replies).Scan(&verdict, &reason, &out.Replies)
	})
	if err != nil {
		return RepliesAccepted{}, translate(err, "post replies")
	}
	switch verdict {
	case "accepted":
		out.Status = "accepted"
		e.logger.InfoContext(ctx, "async replies posted", slog.Int64("tenant_id", tenantID), slog.String("message_id", messageID), slog.Int("replies", out.Replies))
		return out, nil
	case "duplicate":
		out.Status, out.Duplicate = "accepted", true
		return out, nil
	case "not_found":
		return RepliesAccepted{}, Errorf(CodeNotFound, "message %q: not found", messageID)
	case "conflict":
		return RepliesAccepted{}, Errorf(CodeConflict, "message %q: other replies were posted for it already", messageID)
	case "not_waiting":
		msg := "is not waiting for replies"
		if reason != nil {
			msg = *reason
		}
		return RepliesAccepted{}, Errorf(CodeNotWaiting, "message %q %s", messageID, msg)
	}
	return RepliesAccepted{}, &Error{Code: CodeInternal, Message: "internal error", Err: fmt.Errorf("post replies: verdict %q", verdict)}
}
