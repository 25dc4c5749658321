package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
)

type outcomeKind int

const (
	outcomeDone   outcomeKind = iota // the message is finished (done, or dead under skip)
	outcomeWait                      // a step must be retried later; the head stays
	outcomeHalted                    // dead letter under halt: the conversation waits for an operator
)

type outcome struct {
	kind  outcomeKind
	delay time.Duration
}

// run is one drain run's context: the session, the tenant, and what it lazily
// loaded from the vault.
type run struct {
	d              *Drainer
	s              *session
	tenant         tenants.Tenant
	conversationID string
	log            *slog.Logger
	cred           *whatsapp.Credential
	secret         []byte
}

// step is a step row as a drain needs it. id is 0 until the step exists.
type step struct {
	id             int64
	idx            int
	kind           string
	status         string
	request        json.RawMessage
	attempts       int
	startedAt      *time.Time
	providerStatus *string
	providerID     *string
}

const stepsQuery = `
SELECT id, idx, kind, status, request, attempts, started_at, provider_status, provider_message_id
FROM ordo.steps WHERE message_pk = $1 ORDER BY idx`

func (r *run) loadSteps(ctx context.Context, m message) ([]step, error) {
	rows, _ := r.s.conn.Query(ctx, stepsQuery, m.pk)
	steps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (step, error) {
		var st step
		err := row.Scan(&st.id, &st.idx, &st.kind, &st.status, &st.request, &st.attempts, &st.startedAt, &st.providerStatus, &st.providerID)
		return st, err
	})
	if err != nil {
		return nil, r.s.fail(fmt.Errorf("load steps: %w", err))
	}
	if len(steps) == 0 {
		// First time at this message: its first step, created by its first attempt.
		first := step{idx: 0, kind: "handle", status: "pending"}
		if m.direction == "outbound" {
			first = step{idx: 0, kind: "send", status: "pending", request: m.payload}
		}
		steps = []step{first}
	}
	return steps, nil
}

// message runs m's unfinished steps in order. Finished steps are never run
// again; the last step's completion finishes the message and moves the head
// in the same write.
func (r *run) message(ctx context.Context, m message) (outcome, error) {
	steps, err := r.loadSteps(ctx, m)
	if err != nil {
		return outcome{}, err
	}
	for i := 0; i < len(steps); i++ {
		if steps[i].status == "done" {
			continue
		}
		out, err := r.step(ctx, m, &steps[i], i == len(steps)-1)
		if err != nil || out.kind != outcomeDone {
			return out, err
		}
		if steps[i].kind == "handle" {
			// The handler's replies are steps now.
			if steps, err = r.loadSteps(ctx, m); err != nil {
				return outcome{}, err
			}
		}
	}
	return outcome{kind: outcomeDone}, nil
}

// failure is a step attempt's error, classified.
type failure struct {
	msg        string
	permanent  bool // dead-letter now
	ambiguous  bool // the effect may have happened (a send that may have gone out)
	retryAfter time.Duration
}

func (f *failure) Error() string { return f.msg }

const startStep = `
INSERT INTO ordo.steps AS s (message_pk, idx, kind, request, status, attempts, started_at)
VALUES ($1, $2, $3, $4, 'running', 1, now())
ON CONFLICT (message_pk, idx) DO UPDATE SET status = 'running', attempts = s.attempts + 1, started_at = now()
RETURNING s.id, s.attempts`

const markMessageRunning = `UPDATE ordo.messages SET status = 'running' WHERE id = $1 AND status = 'queued'`

const markUnknown = `
UPDATE ordo.steps SET status = 'unknown', ambiguous_count = ambiguous_count + 1
WHERE id = $1 AND status = 'running'`

const stepDone = `
UPDATE ordo.steps SET status = 'done', provider_message_id = coalesce($2, provider_message_id), finished_at = now()
WHERE id = $1`

const messageDone = `UPDATE ordo.messages SET status = 'done', finished_at = now() WHERE id = $1`

const moveHead = `UPDATE ordo.conversations SET head_seq = $2 WHERE id = $1`

const insertReplies = `
INSERT INTO ordo.steps (message_pk, idx, kind, request)
SELECT $1, r.ord, 'send', r.reply FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS r(reply, ord)
ON CONFLICT (message_pk, idx) DO NOTHING`

// step runs one attempt of st, after settling an earlier attempt whose outcome
// was never recorded.
func (r *run) step(ctx context.Context, m message, st *step, last bool) (outcome, error) {
	if st.kind == "send" && (st.status == "running" || st.status == "unknown") {
		out, settled, err := r.settleAmbiguous(ctx, m, st, last)
		if err != nil || settled {
			return out, err
		}
	}

	b := &pgx.Batch{}
	b.Queue(startStep, m.pk, st.idx, st.kind, st.request).QueryRow(func(row pgx.Row) error {
		return row.Scan(&st.id, &st.attempts)
	})
	b.Queue(markMessageRunning, m.pk)
	if err := r.s.write(ctx, b); err != nil {
		return outcome{}, err
	}

	var (
		providerID *string
		replies    json.RawMessage
		err        error
	)
	switch st.kind {
	case "handle":
		replies, err = r.callHandler(ctx, m)
	case "send":
		var id string
		id, err = r.send(ctx, st)
		providerID = &id
	}
	if r.d.hooks.afterEffect != nil {
		r.d.hooks.afterEffect(st.id)
	}
	if err != nil {
		var f *failure
		if !errors.As(err, &f) {
			f = &failure{msg: err.Error()}
		}
		return r.failed(ctx, m, st, f)
	}

	b = &pgx.Batch{}
	b.Queue(stepDone, st.id, providerID)
	hasReplies := len(replies) > 2 // not "[]"
	if hasReplies {
		b.Queue(insertReplies, m.pk, replies)
	}
	if last && !hasReplies {
		b.Queue(messageDone, m.pk)
		b.Queue(moveHead, r.s.conv, m.seq)
	}
	if err := r.s.write(ctx, b); err != nil {
		return outcome{}, err
	}
	st.status = "done"
	return outcome{kind: outcomeDone}, nil
}

// settleAmbiguous deals with a send whose earlier attempt never recorded its
// outcome (the worker died or timed out after the request may have left).
// Meta has no idempotency key, so: if a status webhook showed the message
// went out, it is done; under the tenant's reconcile policy, wait a bounded
// time for one; then resend. settled is false when the caller should resend.
func (r *run) settleAmbiguous(ctx context.Context, m message, st *step, last bool) (out outcome, settled bool, err error) {
	if st.status == "running" {
		b := &pgx.Batch{}
		b.Queue(markUnknown, st.id)
		if err := r.s.write(ctx, b); err != nil {
			return outcome{}, true, err
		}
		st.status = "unknown"
		r.log.WarnContext(ctx, "send outcome unknown", slog.Int64("step_id", st.id), slog.Int64("seq", m.seq))
	}
	if st.providerStatus != nil || st.providerID != nil {
		b := &pgx.Batch{}
		b.Queue(stepDone, st.id, st.providerID)
		if last {
			b.Queue(messageDone, m.pk)
			b.Queue(moveHead, r.s.conv, m.seq)
		}
		if err := r.s.write(ctx, b); err != nil {
			return outcome{}, true, err
		}
		st.status = "done"
		return outcome{kind: outcomeDone}, true, nil
	}
	if r.tenant.Ambiguous == "reconcile" && st.startedAt != nil {
		if wait := time.Until(st.startedAt.Add(r.d.cfg.ReconcileWait)); wait > 0 {
			return outcome{kind: outcomeWait, delay: min(wait, time.Second)}, true, nil
		}
	}
	return outcome{}, false, nil
}

const recordFailure = `UPDATE ordo.steps SET status = $2, errors = errors || $3::jsonb WHERE id = $1`

const countAmbiguous = `UPDATE ordo.steps SET ambiguous_count = ambiguous_count + 1 WHERE id = $1`

const killStep = `UPDATE ordo.steps SET status = 'failed', errors = errors || $2::jsonb, finished_at = now() WHERE id = $1`

const messageDead = `UPDATE ordo.messages SET status = 'dead', finished_at = now() WHERE id = $1`

const insertDeadLetter = `
INSERT INTO ordo.dead_letters (tenant_id, message_pk, step_id, reason, errors)
SELECT $1, $2, s.id, $4, s.errors FROM ordo.steps s WHERE s.id = $3`

const haltConversation = `UPDATE ordo.conversations SET halted_at = now(), drain_job_id = NULL WHERE id = $1`

// failed records a failed attempt: retried later with backoff while the head
// stays, or — permanent, or out of attempts — dead-lettered.
func (r *run) failed(ctx context.Context, m message, st *step, f *failure) (outcome, error) {
	entry, _ := json.Marshal([]map[string]any{{
		"attempt": st.attempts, "at": time.Now().UTC().Format(time.RFC3339Nano), "error": f.msg,
	}})
	log := r.log.With(slog.String("message_id", m.id), slog.Int64("seq", m.seq), slog.Int64("step_id", st.id),
		slog.String("kind", st.kind), slog.Int("attempt", st.attempts), slog.String("error", f.msg))

	if !f.permanent && st.attempts < r.tenant.MaxAttempts {
		status := "pending"
		b := &pgx.Batch{}
		if f.ambiguous {
			status = "unknown"
			b.Queue(countAmbiguous, st.id)
		}
		b.Queue(recordFailure, st.id, status, entry)
		if err := r.s.write(ctx, b); err != nil {
			return outcome{}, err
		}
		delay := r.d.backoff(st.attempts, f.retryAfter)
		log.InfoContext(ctx, "step failed; will retry", slog.Duration("delay", delay))
		return outcome{kind: outcomeWait, delay: delay}, nil
	}

	reason := f.msg
	if !f.permanent {
		reason = "attempts exhausted (" + strconv.Itoa(st.attempts) + "): " + f.msg
	}
	b := &pgx.Batch{}
	b.Queue(killStep, st.id, entry)
	b.Queue(messageDead, m.pk)
	b.Queue(insertDeadLetter, r.tenant.ID, m.pk, st.id, reason)
	halt := r.tenant.OnDeadLetter != "skip"
	if halt {
		b.Queue(haltConversation, r.s.conv)
	} else {
		b.Queue(moveHead, r.s.conv, m.seq)
	}
	if err := r.s.write(ctx, b); err != nil {
		return outcome{}, err
	}
	log.WarnContext(ctx, "message dead-lettered", slog.String("reason", reason), slog.Bool("halted", halt))
	if halt {
		return outcome{kind: outcomeHalted}, nil
	}
	return outcome{kind: outcomeDone}, nil
}

// backoff is exponential with jitter; a provider's Retry-After wins.
func (d *Drainer) backoff(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, time.Hour)
	}
	delay := d.cfg.RetryMax
	if attempt < 30 {
		delay = min(d.cfg.RetryBase<<(attempt-1), d.cfg.RetryMax)
	}
	return delay/2 + rand.N(delay/2+1)
}
