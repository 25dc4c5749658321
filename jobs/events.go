package jobs

// Tenant events: a tenant with an events_url is told
// what happened to its messages and conversations — message.sent,
// message.delivered|read|failed, message.dead_lettered, conversation.halted,
// tenant.sending_paused|resumed — signed and authenticated (handler_auth)
// like handler calls, at least once,
// in order per conversation, each with a stable id.
//
//   - The facts write their events into ordo.events in their own
//     transactions (triggers, sql/functions/event_on_*.sql): an event exists
//     if and only if its fact committed.
//   - A stream is a conversation's events, or the tenant's own (pauses). One
//     River job (EventsArgs) at a time delivers a stream: it holds the
//     stream's advisory lock (one bigint key: the conversation's id, or
//     minus the tenant's; ordo's other advisory locks use two int keys, a
//     separate space), POSTs the stream's events in id order and deletes
//     each once answered 2xx. A failure stops the stream there, its head
//     retried with backoff; nothing behind it overtakes it.
//   - A periodic River job (DispatchEventsArgs, maintenance.go: inserted by
//     River's leader every EventsConfig.PollInterval, worked by any process)
//     inserts a job for every stream whose head is due and whose lock
//     nobody holds, unique per stream and poll period. A worker killed
//     mid-delivery loses its session and with it the lock: the next job
//     delivers the event again (at least once; the event id tells a
//     repeat).

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ordo-dev/ordo/tenants"
)

// Defaults of EventsConfig's fields.
const (
	EventsPollIntervalDefault = time.Second
	EventsTimeoutDefault      = 10 * time.Second
	EventsRetryBaseDefault    = time.Second
	EventsRetryMaxDefault     = 10 * time.Minute
	// EventsPerJob bounds the events one job delivers before it makes room
	// for other streams (the dispatcher gives the stream a new job).
	EventsPerJob = 100
)

// EventsConfig tunes event delivery. Zero fields take the defaults.
type EventsConfig struct {
	// PollInterval is how often streams with due events are looked for
	// (one periodic job for all processes, at least PeriodMin): the delay
	// of an event after its fact. Default EventsPollIntervalDefault.
	PollInterval time.Duration
	// Timeout bounds one POST to a tenant's events_url. Default
	// EventsTimeoutDefault.
	Timeout time.Duration
	// RetryBase and RetryMax shape the backoff of an event its endpoint did
	// not take: RetryBase·2^(attempts-1), at most RetryMax, for ever (an
	// endpoint that is down keeps its events until it is back, or until the
	// tenant's events_url is removed). Defaults EventsRetryBaseDefault and
	// EventsRetryMaxDefault.
	RetryBase, RetryMax time.Duration
}

// WithDefaults returns c with zero fields set to their defaults.
func (c EventsConfig) WithDefaults() EventsConfig {
	c.PollInterval = cmp.Or(c.PollInterval, EventsPollIntervalDefault)
	c.Timeout = cmp.Or(c.Timeout, EventsTimeoutDefault)
	c.RetryBase = cmp.Or(c.RetryBase, EventsRetryBaseDefault)
	c.RetryMax = cmp.Or(c.RetryMax, EventsRetryMaxDefault)
	return c
}

// EventsArgs is the River job that delivers one stream's events: a
// conversation's (Conversation, its id) or the tenant's own (Conversation 0).
type EventsArgs struct {
	Tenant       int64 `json:"tenant" river:"unique"`
	Conversation int64 `json:"conversation" river:"unique"`
}

// Kind is the River job kind of an event delivery.
func (EventsArgs) Kind() string { return "ordo_events" }

// Event is what a tenant's events_url receives, one per POST: one flat
// JSON object, {"id","type","tenant","at"} and the event's own fields
// (conversation_id, message_id, seq, reason, …), so an n8n expression reads
// $json.body.message_id.
type Event struct {
	// ID is stable: every delivery of one event carries the same.
	ID     string
	Type   string
	Tenant string
	// At is when the fact happened.
	At time.Time
	// ConversationID is empty for the tenant's own events.
	ConversationID string
	// Data holds the event's own fields, a JSON object (as written by the
	// trigger that recorded the fact).
	Data json.RawMessage
}

// MarshalJSON writes e flat: Data's fields beside id, type, tenant and at.
func (e Event) MarshalJSON() ([]byte, error) {
	fields := map[string]json.RawMessage{}
	if len(e.Data) > 0 {
		if err := json.Unmarshal(e.Data, &fields); err != nil {
			return nil, fmt.Errorf("event %s data: %w", e.ID, err)
		}
	}
	for k, v := range map[string]any{"id": e.ID, "type": e.Type, "tenant": e.Tenant, "at": e.At} {
		fields[k], _ = json.Marshal(v)
	}
	if e.ConversationID != "" {
		fields["conversation_id"], _ = json.Marshal(e.ConversationID)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// UnmarshalJSON reads a flat event (a receiver written in Go, tests).
func (e *Event) UnmarshalJSON(b []byte) error {
	var head struct {
		ID             string    `json:"id"`
		Type           string    `json:"type"`
		Tenant         string    `json:"tenant"`
		At             time.Time `json:"at"`
		ConversationID string    `json:"conversation_id"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	*e = Event{ID: head.ID, Type: head.Type, Tenant: head.Tenant, At: head.At, ConversationID: head.ConversationID, Data: append(json.RawMessage(nil), b...)}
	return nil
}

// streamKey is the stream's advisory lock key.
func streamKey(a EventsArgs) int64 {
	if a.Conversation != 0 {
		return a.Conversation
	}
	return -a.Tenant
}

const (
	// dueStreamsQuery lists the streams whose head event is due and whose
	// lock no session holds (a live delivery): a loose index scan of
	// events_stream_idx, one probe per stream with events, then its head.
	dueStreamsQuery = `
WITH RECURSIVE s AS (
    (SELECT e.tenant_id AS t, coalesce(e.conversation_pk, 0) AS c FROM ordo.events e
     ORDER BY e.tenant_id, coalesce(e.conversation_pk, 0) LIMIT 1)
    UNION ALL
    SELECT n.t, n.c FROM s, LATERAL (
        SELECT e.tenant_id AS t, coalesce(e.conversation_pk, 0) AS c FROM ordo.events e
        WHERE (e.tenant_id, coalesce(e.conversation_pk, 0)) > (s.t, s.c)
        ORDER BY e.tenant_id, coalesce(e.conversation_pk, 0) LIMIT 1) n
)
SELECT s.t, s.c FROM s
CROSS JOIN LATERAL (
    SELECT e.next_attempt_at FROM ordo.events e
    WHERE e.tenant_id = s.t AND coalesce(e.conversation_pk, 0) = s.c
    ORDER BY e.id LIMIT 1) h
WHERE h.next_attempt_at <= now()
  AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
                  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND ((l.classid::bigint << 32) | l.objid::bigint) = CASE WHEN s.c = 0 THEN -s.t ELSE s.c END)`

	lockStream   = `SELECT pg_try_advisory_lock($1::bigint)`
	unlockStream = `SELECT pg_advisory_unlock($1::bigint)`

	// headEventQuery reads a stream's next event and whether it is due.
	headEventQuery = `
SELECT e.id, e.type, e.data, e.created_at, e.attempts, e.next_attempt_at <= now()
FROM ordo.events e
WHERE e.tenant_id = $1 AND coalesce(e.conversation_pk, 0) = $2
ORDER BY e.id LIMIT 1`

	deleteEvent = `DELETE FROM ordo.events WHERE id = $1`
	failEvent   = `UPDATE ordo.events SET attempts = attempts + 1, last_error = $2,
    next_attempt_at = now() + $3::float8 * interval '1 millisecond' WHERE id = $1`
	// dropStream empties a stream whose tenant has no events_url (any more).
	dropStream = `DELETE FROM ordo.events e WHERE e.tenant_id = $1 AND coalesce(e.conversation_pk, 0) = $2`
)

// eventsWorker delivers streams (EventsArgs).
type eventsWorker struct {
	river.WorkerDefaults[EventsArgs]
	cfg     EventsConfig
	pool    *pgxpool.Pool
	tenants *tenants.Store
	http    *http.Client
	logger  *slog.Logger
	// stopping reports a graceful stop under way: the job ends after the
	// event in flight (the next process goes on with the rest).
	stopping func() bool
}

func newEventsWorker(cfg EventsConfig, outbound tenants.OutboundPolicy, pool *pgxpool.Pool, ts *tenants.Store, logger *slog.Logger) *eventsWorker {
	return &eventsWorker{cfg: cfg, pool: pool, tenants: ts, logger: logger, http: &http.Client{
		Timeout: cfg.Timeout,
		// Dialled under the outbound address policy (outbound.go).
		Transport: outboundTransport(outbound, 2),
		// Signed for its URL: a redirect could take the body and its
		// signature anywhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Timeout bounds a job: its events' POSTs, each bounded by cfg.Timeout.
func (w *eventsWorker) Timeout(*river.Job[EventsArgs]) time.Duration {
	return EventsPerJob*w.cfg.Timeout + time.Minute
}

func (w *eventsWorker) Work(ctx context.Context, job *river.Job[EventsArgs]) error {
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("events: acquire connection: %w", err)
	}
	key := streamKey(job.Args)
	var locked bool
	if err := conn.QueryRow(ctx, lockStream, key).Scan(&locked); err != nil {
		conn.Release()
		return fmt.Errorf("events: lock stream: %w", err)
	}
	if !locked {
		conn.Release() // another job delivers this stream now
		return nil
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), unlockStream, key); err != nil {
			// The lock must not outlive this job on a pooled connection.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
	}()
	return w.deliver(ctx, conn, job.Args)
}

// deliver POSTs the stream's events in order until it is empty, its head
// is not due, or one fails.
func (w *eventsWorker) deliver(ctx context.Context, conn *pgxpool.Conn, a EventsArgs) error {
	t, err := w.tenants.ByID(ctx, a.Tenant)
	if errors.Is(err, tenants.ErrNotFound) {
		_, err = conn.Exec(ctx, dropStream, a.Tenant, a.Conversation)
		return err
	}
	if err != nil {
		return fmt.Errorf("events: load tenant: %w", err)
	}
	if t.EventsURL == "" {
		_, err = conn.Exec(ctx, dropStream, a.Tenant, a.Conversation)
		return err
	}
	secret, err := w.tenants.HandlerSecret(ctx, a.Tenant)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	// Authenticated like handler calls: an n8n Webhook node with Header or
	// Basic Auth takes the tenant's handler_auth (nil: none).
	auth, err := w.tenants.HandlerAuth(ctx, a.Tenant)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	for range EventsPerJob {
		if w.stopping != nil && w.stopping() {
			return nil
		}
		var (
			e        Event
			id       int64
			attempts int
			due      bool
		)
		err := conn.QueryRow(ctx, headEventQuery, a.Tenant, a.Conversation).Scan(&id, &e.Type, &e.Data, &e.At, &attempts, &due)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !due) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("events: read: %w", err)
		}
		e.ID, e.Tenant = strconv.FormatInt(id, 10), t.Slug
		var d struct {
			ConversationID string `json:"conversation_id"`
		}
		_ = json.Unmarshal(e.Data, &d)
		e.ConversationID = d.ConversationID
		if err := w.post(ctx, t, secret, auth, e); err != nil {
			if ctx.Err() != nil {
				return ctx.Err() // stopped: the next job sends it again
			}
			backoff := min(w.cfg.RetryBase<<min(attempts, 20), w.cfg.RetryMax)
			w.logger.WarnContext(ctx, "event not delivered; retrying", slog.String("tenant", t.Slug),
				slog.String("event_id", e.ID), slog.String("type", e.Type), slog.Int("attempt", attempts+1),
				slog.Duration("retry_in", backoff), slog.String("error", err.Error()))
			if _, err2 := conn.Exec(ctx, failEvent, id, err.Error(), float64(backoff.Milliseconds())); err2 != nil {
				return fmt.Errorf("events: record failure: %w", err2)
			}
			return nil
		}
		if _, err := conn.Exec(ctx, deleteEvent, id); err != nil {
			return fmt.Errorf("events: record delivery: %w", err)
		}
	}
	return nil
}

// post sends one event, signed like a handler call; nil only for a 2xx.
func (w *eventsWorker) post(ctx context.Context, t tenants.Tenant, secret []byte, auth *tenants.HandlerAuth, e Event) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // as handler calls: what n8n's JSON.stringify gives
	if err := enc.Encode(e); err != nil {
		return err
	}
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.EventsURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("events_url: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ordo")
	req.Header.Set("X-Ordo-Signature", Sign(secret, body))
	req.Header.Set("X-Ordo-Event", e.Type)
	req.Header.Set("Idempotency-Key", t.Slug+":event:"+e.ID)
	if auth != nil {
		auth.Apply(req)
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return fmt.Errorf("events_url unreachable: %s", redactURL(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("events_url answered %d", resp.StatusCode)
	}
	return nil
}

// eventsDispatcher gives every due stream a delivery job: the work of the
// periodic DispatchEventsArgs job (maintenance.go).
type eventsDispatcher struct {
	cfg    EventsConfig
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
}

// eventsUniquePeriod is the period of an events job's uniqueness (River's
// least): a job left "running" by a killed worker blocks its stream's next
// job for at most this long.
const eventsUniquePeriod = time.Second

// eventsUniqueStates: a job is unique among the stream's unfinished jobs
// (River's required states); a finished one does not hold back the next.
var eventsUniqueStates = unfinishedStates

// dispatch inserts a job per due stream, unique per stream among the
// unfinished ones and per eventsUniquePeriod, so two dispatches (a new
// River leader's first beside the old one's last) add one between them.
func (d *eventsDispatcher) dispatch(ctx context.Context) error {
	rows, err := d.pool.Query(ctx, dueStreamsQuery)
	if err != nil {
		return err
	}
	var params []river.InsertManyParams
	var a EventsArgs
	_, err = pgx.ForEachRow(rows, []any{&a.Tenant, &a.Conversation}, func() error {
		params = append(params, river.InsertManyParams{Args: a, InsertOpts: &river.InsertOpts{
			Queue: Queue, MaxAttempts: 1,
			UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: eventsUniquePeriod, ByState: eventsUniqueStates},
		}})
		return nil
	})
	if err != nil || len(params) == 0 {
		return err
	}
	_, err = d.client.InsertMany(ctx, params)
	return err
}
