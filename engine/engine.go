// Package engine is where a message enters ordo and where its state is read
// and steered: ingest (one transaction through ordo.enqueue_message), the
// message and conversation views, and dead-letter replay and skip. The work
// itself — draining conversations, running steps — is package jobs.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"

	ordosql "github.com/ordo-dev/ordo/sql"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs/metrics"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// Engine accepts messages and answers questions about them.
type Engine struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	ingest *batcher // groups concurrent Ingest calls (batch.go)
	// fallbackSem bounds failed batches' messages run on their own at once.
	fallbackSem chan struct{}
	metrics     *metrics.Metrics // nil: nothing recorded
	// statsCompacted is the Unix minute CompactStats last ran in: the
	// overview's refreshes compact at most once a minute per process.
	statsCompacted atomic.Int64
}

// Option configures an Engine.
type Option func(*Engine)

// WithMetrics records accepted and duplicate messages (REST and webhooks)
// and webhook statuses on m.
func WithMetrics(m *metrics.Metrics) Option { return func(e *Engine) { e.metrics = m } }

// New returns an Engine on pool.
func New(pool *pgxpool.Pool, logger *slog.Logger, opts ...Option) *Engine {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{pool: pool, logger: logger, ingest: newBatcher(), fallbackSem: make(chan struct{}, fallbackParallel)}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Querier is what a write runs on: the pool, or a caller's transaction
// (sql.Querier).
type Querier = ordosql.Querier

// NewMessage is a message offered for acceptance.
type NewMessage struct {
	Tenant         string // tenant slug
	ConversationID string
	MessageID      string
	Direction      string // inbound|outbound; empty means outbound
	Payload        json.RawMessage
	// ReuseIsDuplicate answers a repeat of MessageID with another body as a
	// duplicate instead of CodeReused (Meta's webhook redeliveries, which
	// must never be refused).
	ReuseIsDuplicate bool
	// KeyHash is the SHA-256 of the API key the message came with when the
	// request did not look the key up itself (web: a key that authenticated
	// moments ago): the transaction that stores the message checks it
	// first (ordo.check_api_key), and a revoked key is CodeUnauthorized
	// with nothing stored. Nil: nothing to check.
	KeyHash []byte
}

// onReuse is m's on_reuse argument of ordo.enqueue_message.
func (m NewMessage) onReuse() string {
	if m.ReuseIsDuplicate {
		return "duplicate"
	}
	return "error"
}

// Accepted is the answer to an offered message: the original's, for a repeat.
type Accepted struct {
	ID             string `json:"id"`
	MessageID      string `json:"message_id"`
	ConversationID string `json:"conversation_id"`
	Seq            int64  `json:"seq"`
	Status         string `json:"status"`
	Duplicate      bool   `json:"duplicate"`
}

// enqueueQuery stores a message checked (NewMessage.check): the drain does
// not check it again (ordo.enqueue_message's checked).
const enqueueQuery = `SELECT id, seq, duplicate FROM ordo.enqueue_message($1, $2, $3, $4, $5, $6, true)`

// check refuses an outbound message the Cloud API would refuse, naming the
// first wrong field's JSON path (CodeInvalid: REST's 400), before anything
// is stored. It is the one check of a message that enters through Go: the
// message is stored as checked and its send is not checked again. Inbound
// messages are Meta's own events, never sent.
func (m NewMessage) check() error {
	if m.Direction == "inbound" {
		return nil
	}
	if err := whatsapp.ValidateMessage(m.Payload); err != nil {
		return Errorf(CodeInvalid, "%s", err)
	}
	return nil
}

const originalQuery = `
SELECT c.conversation_id, m.status
FROM ordo.messages m JOIN ordo.conversations c ON c.id = m.conversation_pk
WHERE m.id = $1`

// Ingest accepts m once: on the pool it is durable when Ingest returns.
// Concurrent calls share one transaction (batch.go); each returns only after
// the commit holding its message.
func (e *Engine) Ingest(ctx context.Context, m NewMessage) (Accepted, error) {
	if err := m.check(); err != nil {
		return Accepted{}, err
	}
	a, err := e.ingestGrouped(ctx, m)
	switch {
	case err != nil:
	case a.Duplicate:
		e.metrics.Accepted(metrics.SourceREST, m.Direction, 0, 1)
	default:
		e.metrics.Accepted(metrics.SourceREST, m.Direction, 1, 0)
	}
	return a, err
}

// IngestTx accepts m inside q, which may be a caller's transaction: the
// message is durable, and its drain scheduled, when that transaction commits.
func (e *Engine) IngestTx(ctx context.Context, q Querier, m NewMessage) (Accepted, error) {
	if err := m.check(); err != nil {
		return Accepted{}, err
	}
	return e.ingestTx(ctx, q, m)
}

// ingestTx is IngestTx of a message checked already.
func (e *Engine) ingestTx(ctx context.Context, q Querier, m NewMessage) (Accepted, error) {
	var dir *string
	if m.Direction != "" {
		dir = &m.Direction
	}
	var (
		id int64
		a  = Accepted{MessageID: m.MessageID, ConversationID: m.ConversationID, Status: "queued"}
	)
	if m.KeyHash != nil {
		if _, err := q.Exec(ctx, checkKeyQuery, m.KeyHash); err != nil {
			return Accepted{}, translate(err, "check API key")
		}
	}
	err := q.QueryRow(ctx, enqueueQuery, m.Tenant, m.ConversationID, m.MessageID, dir, m.Payload, m.onReuse()).Scan(&id, &a.Seq, &a.Duplicate)
	if err != nil {
		return Accepted{}, translate(err, "enqueue message")
	}
	a.ID = strconv.FormatInt(id, 10)
	if a.Duplicate {
		if err := q.QueryRow(ctx, originalQuery, id).Scan(&a.ConversationID, &a.Status); err != nil {
			return Accepted{}, translate(err, "read original message")
		}
	}
	return a, nil
}

// translate turns store errors into *Error at the boundary: the SQL
// functions' own validation messages are safe to show, everything else is
// internal.
func translate(err error, doing string) error {
	if ErrorCode(err) != CodeInternal {
		return err // told to the user already (a transaction's own *Error)
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InvalidParameterValue:
		return &Error{Code: CodeInvalid, Message: pgErr.Message, Err: err}
	case errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.CharacterNotInRepertoire || pgErr.Code == pgerrcode.UntranslatableCharacter):
		// Postgres text and jsonb cannot hold U+0000: bad input, not a fault.
		return &Error{Code: CodeInvalid, Message: "text must not contain NUL (\\u0000) characters", Err: err}
	case errors.As(err, &pgErr) && pgErr.Code == ordosql.SQLStateMessageIDReused:
		return &Error{Code: CodeReused, Message: pgErr.Message, Err: err}
	case errors.As(err, &pgErr) && pgErr.Code == ordosql.SQLStateOutsideServiceWindow:
		return &Error{Code: CodeOutsideWindow, Message: pgErr.Message, Err: err}
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InvalidAuthorizationSpecification:
		return &Error{Code: CodeUnauthorized, Message: "missing, unknown or revoked API key", Err: err}
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable:
		return &Error{Code: CodeUnavailable, Message: errLocked.Message, Err: err}
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.NoDataFound:
		return &Error{Code: CodeNotFound, Message: pgErr.Message, Err: err}
	case errors.Is(err, pgx.ErrNoRows):
		return &Error{Code: CodeNotFound, Message: "not found", Err: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeUnavailable, Message: "request cancelled", Err: err}
	case ordosql.Unavailable(err):
		return &Error{Code: CodeUnavailable, Message: DatabaseUnavailable, Err: fmt.Errorf("%s: %w", doing, err)}
	}
	return &Error{Code: CodeInternal, Message: "internal error", Err: fmt.Errorf("%s: %w", doing, err)}
}
