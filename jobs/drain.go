package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs/fair"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
)

// Drainer runs conversations: one message at a time, in seq order, each step
// checkpointed behind the conversation's fence.
type Drainer struct {
	cfg      Config
	pool     *pgxpool.Pool
	tenants  *tenants.Store
	vault    *tenants.Vault
	wa       *whatsapp.Client
	handlers http.Client
	logger   *slog.Logger
	stopping atomic.Bool
	hooks    hooks
	creds    credentialCache
	// unknownTypes logs once each message type the schema does not know
	// that a send let through (issue 26: jobs/whatsapp/validate_unknown.go).
	unknownTypes whatsapp.TypeWarnings
	// turns is the runner's scheduler, which decides whether a drain goes
	// on to its next message (fair.Scheduler.DrainGoesOn) and counts what
	// it sends.
	turns turnKeeper
}

// turnKeeper is what a drain asks and tells the scheduler at a message
// boundary.
type turnKeeper interface {
	drainGoesOn(tenant int64, started time.Time, next int, l fair.RunLimits) bool
	sent(tenant int64, n int) // n more messages go out on the drain's worker
}

// hooks let tests force interleavings; nil in production.
type hooks struct {
	beforeFinish func(conv int64)   // a drain found nothing left and is about to finish
	beforeEffect func(stepID int64) // a step's attempt is recorded as running, its call not made yet
	afterEffect  func(stepID int64) // a step's effect happened, its result is not recorded yet
	// awaitingReplies: a drain found an async handle step with no replies
	// yet and is about to park its conversation until the deadline.
	awaitingReplies func(stepID int64)
	// beforeWait: a drain found its tenant's handler, number or sending
	// away and is about to mark its conversation waiting for it.
	beforeWait func(conv int64)
	// beforeExpire: a drain found an async handle step past its deadline
	// with no replies and is about to dead-letter it.
	beforeExpire func(stepID int64)
	// checked: a drain checked an outbound message (by its row's id)
	// against WhatsApp's schema.
	checked func(messagePK int64)
}

func newDrainer(cfg Config, pool *pgxpool.Pool, ts *tenants.Store, vault *tenants.Vault, logger *slog.Logger) *Drainer {
	return &Drainer{
		cfg:     cfg,
		pool:    pool,
		tenants: ts,
		vault:   vault,
		wa:      &whatsapp.Client{BaseURL: cfg.WhatsAppAPIURL, HTTP: whatsapp.NewHTTPClient(cfg.SendTimeout, cfg.Workers)},
		handlers: http.Client{
			Timeout: cfg.HandlerTimeout,
			// Many tenants' handlers are workflows of one n8n: keep a
			// connection per worker to a host, as for sends.
			// Dialled under the outbound address policy (outbound.go).
			Transport: outboundTransport(cfg.Outbound, cfg.Workers),
			// A 3xx is answered as it is (a permanent error naming it): the
			// call is signed for its URL, and a redirect could take the
			// body and its signature anywhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		logger: logger,
	}
}

// message is the part of a message row a drain needs.
type message struct {
	pk        int64
	id        string
	seq       int64
	direction string
	payload   json.RawMessage
}

// ended says how a drain run ended: park, the conversation waits (or
// yields) and is due again after wait; otherwise the run ended it (caught
// up, halted, gone) or failed.
type ended struct {
	park bool
	wait time.Duration
	// parked: the run's last write parked the conversation for wait.
	parked bool
}

// ended is how the run of a message's outcome ends its drain.
func (o outcome) ended() ended {
	switch {
	case o.kind == outcomeWait && o.released:
		return ended{parked: true, wait: o.delay}
	case o.kind == outcomeWait:
		return ended{park: true, wait: o.delay}
	case o.kind == outcomeDone && !o.released:
		return ended{park: true} // the head moved; due again now for what is left
	}
	return ended{}
}

// drain runs the conversation claimed by s (st: its state at the takeover)
// until it has nothing left, yields, must wait (a step's backoff), or halts
// on a dead letter. runner names the runner in the log.
func (d *Drainer) drain(ctx context.Context, s *session, st convState, runner string) (ended, error) {
	started := time.Now()
	defer d.cfg.Metrics.DrainStarted()()
	conv := s.conv
	log := d.logger.With(slog.Int64("conversation", conv), slog.String("runner", runner), slog.Int64("fence", st.fence))
	r := &run{d: d, s: s, tenant: st.tenant, conversationID: st.conversationID, log: log, credentialAt: st.credentialAt}

	head := st.headSeq
	m, steps, err := st.next, st.nextSteps, st.nextErr // read (and maybe started) with the takeover
	r.prefetched = len(steps) > 0 && steps[0].started
	limits := fair.RunLimits{Rounds: d.cfg.MaxMessagesPerRun, Time: d.cfg.MaxRunTime}
	// goesOn: the run goes on to its message number next (past its turn,
	// with another tenant waiting, its worker is promised to that one).
	goesOn := func(next int) bool {
		return !d.stopping.Load() && d.turns.drainGoesOn(st.tenant.ID, started, next, limits)
	}
	for n := 0; ; n++ {
		if !r.prefetched && (d.stopping.Load() || n > 0 && !goesOn(n)) { // a prefetched message may have started: it goes on
			return ended{park: true}, nil // yield the worker; due again now, behind its tenant's others
		}
		if n > 0 && !r.prefetched {
			m, steps, err = r.next(ctx, head)
		}
		r.prefetched = false
		if errors.Is(err, pgx.ErrNoRows) {
			// Nothing after the head: the run ends (ordo.park_conversation
			// takes a conversation caught up out of the ready set, and one a
			// message reached meanwhile is due again at once).
			if d.hooks.beforeFinish != nil {
				d.hooks.beforeFinish(conv)
			}
			return ended{park: true}, nil
		}
		if err != nil {
			return ended{}, err
		}
		if n > 0 {
			d.turns.sent(st.tenant.ID, 1) // its share counts messages, not claims
		}
		// The message's last write reads (and may start) the next one when
		// this run will go on to it, as decided when that write is built:
		// a tenant that became due during the message's send gets this
		// worker at the boundary, not after one more message (its p99 in
		// `make bench` noisy was two provider answers, not one).
		// Past the run's turn, with another tenant waiting, the worker
		// is promised to it (DrainGoesOn) and the write lets the conversation
		// go: due again now, behind its tenant's others.
		r.goOn = func() bool { return goesOn(n + 1) }
		out, merr := r.message(ctx, m, steps)
		if merr != nil {
			return ended{}, r.stop(merr)
		}
		switch out.kind {
		case outcomeDone:
			head = m.seq
			if out.released {
				return ended{}, nil // the message's last write also ended the run
			}
			if out.next != nil {
				m, steps, err = out.next.m, out.next.steps, out.next.err
				r.prefetched = true
			}
		case outcomeWait:
			return out.ended(), nil
		case outcomeHalted:
			log.WarnContext(ctx, "conversation halted on a dead letter", slog.String("message_id", m.id), slog.Int64("seq", m.seq))
			return ended{}, nil
		}
	}
}

// nextQuery reads the conversation's next message after head with its
// steps, if any, in one round trip.
const nextQuery = `
SELECT m.id, m.message_id, m.seq, m.direction, m.payload,
       s.id, s.idx, s.kind, s.status, s.request, s.attempts, clock_timestamp() - s.started_at, s.provider_status, s.provider_message_id, false,
       NULL::text, NULL::interval
FROM (SELECT id, message_id, seq, direction, payload FROM ordo.messages
      WHERE conversation_pk = $1 AND seq > $2 ORDER BY seq LIMIT 1) m
LEFT JOIN ordo.steps s ON s.message_pk = m.id
ORDER BY s.idx`

// nextStepQuery is nextQuery that also starts the next message's first
// step when it is fresh and may start now (ordo.next_step); it rides in the
// round trip of the previous message's last write.
const nextStepQuery = `SELECT * FROM ordo.next_step($1, $2, $3, $4, $5)`

// next returns the message after head and its steps (pgx.ErrNoRows: none).
func (r *run) next(ctx context.Context, head int64) (message, []step, error) {
	r.s.touch()
	rows, err := r.s.conn.Query(ctx, nextQuery, r.s.conv, head)
	if err != nil {
		return message{}, nil, r.s.fail(fmt.Errorf("read next message: %w", err))
	}
	m, steps, err := scanNext(rows)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return message{}, nil, r.s.fail(err)
	}
	return m, steps, err
}

// scanNext reads nextQuery's rows: a message and its steps, or
// pgx.ErrNoRows when there is no next message.
func scanNext(rows pgx.Rows) (message, []step, error) {
	defer rows.Close()
	var (
		m     message
		steps []step
		last  *messageRow
	)
	for rows.Next() {
		last = &messageRow{}
		if err := rows.Scan(last.dest()...); err != nil {
			return message{}, nil, fmt.Errorf("read next message: %w", err)
		}
		last.collect(&m, &steps)
	}
	if err := rows.Err(); err != nil {
		return message{}, nil, fmt.Errorf("read next message: %w", err)
	}
	if last == nil {
		return message{}, nil, pgx.ErrNoRows
	}
	steps = firstSteps(m, steps)
	toldFirst(steps, last.told, last.toldWait)
	return m, steps, nil
}

// messageRow is a row of a message and one of its steps, as nextQuery,
// ordo.next_step and ordo.claim return them: the step's columns NULL when
// it has none yet, the message's (from ordo.claim) when there is none.
// told is the message's own: the same on each of its rows.
type messageRow struct {
	pk, seq, stepID       *int64
	id, dir, kind, status *string
	idx, attempts         *int
	payload               []byte
	st                    step
	started               *bool
	told                  *string
	toldWait              *time.Duration
}

// dest is the row's columns, for Scan (after the caller's own).
func (r *messageRow) dest(before ...any) []any {
	return append(before, &r.pk, &r.id, &r.seq, &r.dir, &r.payload,
		&r.stepID, &r.idx, &r.kind, &r.status, &r.st.request, &r.attempts, &r.st.sinceStart, &r.st.providerStatus, &r.st.providerID, &r.started,
		&r.told, &r.toldWait)
}

// collect sets m from the row and adds its step to steps; false when the
// row holds no message.
func (r *messageRow) collect(m *message, steps *[]step) bool {
	if r.pk == nil {
		return false
	}
	*m = message{pk: *r.pk, id: *r.id, seq: *r.seq, direction: *r.dir, payload: r.payload}
	if r.stepID != nil {
		st := r.st
		st.id, st.idx, st.kind, st.status, st.attempts = *r.stepID, *r.idx, *r.kind, *r.status, *r.attempts
		st.started = r.started != nil && *r.started
		*steps = append(*steps, st)
	}
	return true
}

// stop ends a drain on err; a fenced write means another drain owns the
// conversation now, which is not a failure of this job.
func (r *run) stop(err error) error {
	if errors.Is(err, ErrFenced) {
		r.log.Warn("drain lost its conversation to a newer drain; stopping without writing")
		return nil
	}
	return err
}
