package engine

// The sandbox is ordo dev's stand-in for the WhatsApp Cloud API: every send
// it takes is recorded in ordo.sandbox_sends so a first user sees what would
// have reached WhatsApp (on the admin page and at GET /sandbox/sends).

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// SandboxWAMIDPrefix starts every message id the sandbox answers with, and
// no id WhatsApp gives: a step's provider_message_id says where it went.
const SandboxWAMIDPrefix = "wamid.sandbox."

const insertSandboxSend = `
INSERT INTO ordo.sandbox_sends (phone_number_id, wamid, body)
VALUES ($1, 'wamid.sandbox.' || md5(random()::text), $2)
RETURNING wamid`

// IsSandboxWAMID reports whether a provider message id is the sandbox's.
func IsSandboxWAMID(id string) bool { return strings.HasPrefix(id, SandboxWAMIDPrefix) }

const listSandboxSends = `
SELECT id, phone_number_id, wamid, body, created_at FROM ordo.sandbox_sends ORDER BY id DESC LIMIT 100`

// SandboxSend is one message the sandbox channel was asked to send.
type SandboxSend struct {
	ID            int64           `json:"id"`
	PhoneNumberID string          `json:"phone_number_id"`
	WAMID         string          `json:"wamid"`
	Body          json.RawMessage `json:"body"`
	CreatedAt     time.Time       `json:"created_at"`
}

// RecordSandboxSend stores a send the sandbox accepted and returns the wamid
// it answers with.
func (e *Engine) RecordSandboxSend(ctx context.Context, phoneNumberID string, body []byte) (string, error) {
	var wamid string
	if err := e.pool.QueryRow(ctx, insertSandboxSend, phoneNumberID, body).Scan(&wamid); err != nil {
		return "", translate(err, "record sandbox send")
	}
	return wamid, nil
}

// SandboxSends returns the sandbox's 100 most recent sends, newest first.
func (e *Engine) SandboxSends(ctx context.Context) ([]SandboxSend, error) {
	rows, _ := e.pool.Query(ctx, listSandboxSends)
	sends, err := pgx.CollectRows(rows, pgx.RowToStructByPos[SandboxSend])
	if err != nil {
		return nil, &Error{Code: CodeInternal, Message: "internal error", Err: err}
	}
	return sends, nil
}
