package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/jobs/metrics"
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
	// released: the message's last write let the conversation go and
	// ended the run: caught up, or due again for another run (the run was
	// over its budget or its turn: ordo.finish's 'release'); or, waiting,
	// parked it (waitFor).
	released bool
	// next: the message's last write also read the next message (and may
	// have started its first step); nil when it did not look.
	next *nextMessage
}

// nextMessage is the next message as read with the last write of the one
// before (err pgx.ErrNoRows: none).
type nextMessage struct {
	m     message
	steps []step
	err   error
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
	credentialAt   *time.Time // the credential row's updated_at, read on takeover
	secret         []byte
	auth           *tenants.HandlerAuth // the tenant's handler auth; nil: none
	// on is the connection reads go through when there is no session yet
	// (a batch's); nil with no session: the pool.
	on tenants.Querier
	// probing[d.idx]: this run holds the probe of the tenant's unreachable
	// dependency d (dependency.go: its handler, its WhatsApp number).
	probing [2]bool
	// swept: this run checked the tenant's other unchecked sends
	// (checkUnchecked) once already.
	swept bool
	// goOn says, when the current message's last write is built, whether
	// the run goes on to the next message: that write then reads (and may
	// start) it. prefetched: the message in hand was read so.
	goOn       func() bool
	prefetched bool
}

// step is a step row as a drain needs it. id is 0 until the step exists.
type step struct {
	id             int64
	idx            int
	kind           string
	status         string
	request        json.RawMessage
	attempts       int
	sinceStart     *time.Duration // since the last attempt started, by the database's clock
	providerStatus *string
	providerID     *string
	// started: this drain recorded the attempt as running already (the
	// previous message's last write started it); it goes straight out.
	started bool
	// told is what ordo.start_step answered when the claim or the previous
	// message's last write tried to start this step and it may not go now
	// (ordo.next_step): run.start acts on it instead of asking again.
	told *startAnswer
}

// startAnswer is ordo.start_step's answer to a start that may not go now:
// "wait" (a send slot or pair gap ahead, wait from now), or "paused".
type startAnswer struct {
	verdict string
	wait    time.Duration
}

// toldFirst gives steps' first step, when it is m's fresh one, the answer
// its start got (verdict NULL: none was tried).
func toldFirst(steps []step, verdict *string, wait *time.Duration) {
	if verdict == nil || len(steps) == 0 || steps[0].id != 0 {
		return
	}
	a := &startAnswer{verdict: *verdict}
	if wait != nil {
		a.wait = *wait
	}
	steps[0].told = a
}

const stepsQuery = `
SELECT id, idx, kind, status, request, attempts, clock_timestamp() - started_at, provider_status, provider_message_id
FROM ordo.steps WHERE message_pk = $1 ORDER BY idx`

func (r *run) loadSteps(ctx context.Context, m message) ([]step, error) {
	r.s.touch()
	rows, _ := r.s.conn.Query(ctx, stepsQuery, m.pk)
	steps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (step, error) {
		var st step
		err := row.Scan(&st.id, &st.idx, &st.kind, &st.status, &st.request, &st.attempts, &st.sinceStart, &st.providerStatus, &st.providerID)
		return st, err
	})
	if err != nil {
		return nil, r.s.fail(fmt.Errorf("load steps: %w", err))
	}
	return firstSteps(m, steps), nil
}

// firstSteps is m's steps, or its first step when it has none yet.
func firstSteps(m message, steps []step) []step {
	if len(steps) == 0 {
		// First time at this message: its first step, created by its first attempt.
		first := step{idx: 0, kind: "handle", status: "pending"}
		if m.direction == "outbound" {
			first = step{idx: 0, kind: "send", status: "pending", request: m.payload}
		}
		steps = []step{first}
	}
	return steps
}

// message runs m's unfinished steps in order. Finished steps are never run
// again; the last step's completion finishes the message and moves the head
// in the same write.
func (r *run) message(ctx context.Context, m message, steps []step) (outcome, error) {
	last := outcome{kind: outcomeDone}
	ran := false // a step ran in this call
	for i := 0; i < len(steps); i++ {
		if steps[i].status == "done" {
			continue
		}
		if ran && r.d.stopping.Load() {
			// The worker is stopping (a deploy): the steps before this one
			// are recorded; the rest wait for the next drain.
			return outcome{kind: outcomeWait}, nil
		}
		out, err := r.step(ctx, m, &steps[i], i == len(steps)-1)
		if err != nil || out.kind != outcomeDone || out.released {
			return out, err
		}
		last, ran = out, true // the last step's carries the next message, if it read it
		if steps[i].kind == "handle" {
			// The handler's replies are steps now.
			if steps, err = r.loadSteps(ctx, m); err != nil {
				return outcome{}, err
			}
		}
	}
	return last, nil
}

// action is what a failed step attempt leads to.
type action int

const (
	actRetry       action = iota // retry after backoff (a provider's Retry-After wins)
	actThrottle                  // retry after backoff and slow the whole phone number as long
	actPairRate                  // retry this conversation after 4^X PairRateUnit; others go on
	actAmbiguous                 // the effect may have happened: settle before any resend
	actDeadLetter                // permanent: dead-letter now
	actPause                     // the tenant's credential or account is bad: pause its sending
	actUnreachable               // the handler is not there: the tenant's handler is unreachable (reachability.go)
)

// failure is a step attempt's error and what it leads to.
type failure struct {
	// silent: no answer came (a timeout); it says nothing of whether the
	// far end is there.
	silent bool
	// suspect: for actUnreachable, the answer only suggests the handler is
	// away (a proxy's 502/503/504): it takes the handler down only with
	// more evidence (evidence.go).
	suspect    bool
	msg        string
	action     action
	class      string // the channel's name for the failure (whatsapp.Class), if any
	retryAfter time.Duration
	// reach is what a failed send says of the Cloud API (number.go);
	// answered: the Cloud API answered, about something else than itself.
	reach    whatsapp.Reach
	answered bool
}

func (f *failure) Error() string { return f.msg }

// errorEntry is one element of a step's error history.
func errorEntry(attempt int, msg, class string) []byte {
	e := map[string]any{"attempt": attempt, "at": time.Now().UTC().Format(time.RFC3339Nano), "error": msg}
	if class != "" {
		e["class"] = class
	}
	entry, _ := json.Marshal([]map[string]any{e})
	return entry
}

// startStepQuery checks the fence, takes a send slot (for a send: p_phone
// set) and records the attempt as running, in one transaction.
const startStepQuery = `SELECT verdict, wait, step_id, attempts FROM ordo.start_step($1, $2, $3, $4, $5, $6, $7, $8)`

// finishQuery is the drain's one finish (ordo.finish): steps recorded
// done, each behind its conversation's fence; after a message's last step,
// the message done and the head moved and — caught up, or the run over —
// the conversation let go with the commit. A drain alone calls it with one
// conversation, a batch's round with each of its own (batch.go).
const finishQuery = `
SELECT conv, finished, released, since_accepted, next_message_pk, next_message_id, next_seq, next_payload, next_step_id, refill
FROM ordo.finish($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`

// What ordo.finish does with a conversation whose message finished and that
// has more queued (p_then).
const (
	thenStay    = "stay"    // the drain goes on with it
	thenSend    = "send"    // a batch's next round: its next send started, or released
	thenRelease = "release" // due again now, for another run
)

const markUnknown = `
UPDATE ordo.steps SET status = 'unknown', ambiguous_count = ambiguous_count + 1, errors = errors || $2::jsonb
WHERE id = $1 AND status = 'running'`

// step runs one attempt of st: what must come first (prepare), the
// call, and its record — the three parts a batch also uses (batch.go).
func (r *run) step(ctx context.Context, m message, st *step, last bool) (outcome, error) {
	if out, ok, err := r.prepare(ctx, m, st, last); err != nil || !ok {
		return out, err
	}
	st.started = false
	if r.d.hooks.beforeEffect != nil {
		r.d.hooks.beforeEffect(st.id)
	}
	timeout := r.d.cfg.SendTimeout
	if st.kind == "handle" {
		timeout = r.handlerTimeout()
	}
	callCtx, cancel, err := r.s.callContext(ctx, timeout)
	if err != nil {
		return outcome{}, err // not sure of the lease: no call
	}
	e := r.call(callCtx, m, st)
	cancel()
	var f *failure
	if st.kind == "handle" && (e.err == nil || errors.As(e.err, &f) && f.action != actUnreachable && !f.silent) {
		r.answered(ctx, handlerDep)
	}
	if st.kind == "send" && (e.err == nil || errors.As(e.err, &f) && f.answered) {
		r.answered(ctx, numberDep)
	}
	if r.d.hooks.afterEffect != nil {
		r.d.hooks.afterEffect(st.id)
	}
	return r.record(ctx, m, st, last, e)
}

// prepare does what must come before st's attempt: it settles an earlier
// send attempt whose outcome is unknown, and makes sure the call may go
// (the tenant not paused, the handler or number not away or this run
// probing it, the send checked, the credential read, a slot taken); a step
// the previous message's last write started goes straight on. ok false:
// no call now, and out says what happens instead.
func (r *run) prepare(ctx context.Context, m message, st *step, last bool) (out outcome, ok bool, err error) {
	if st.kind == "handle" && r.tenant.SendingPausedAt != nil {
		// A paused tenant makes no external call at all: its handler's
		// replies could not be sent anyway.
		var entry []byte
		if !st.started {
			st = nil // nothing to give back
		} else {
			entry = errorEntry(st.attempts, "tenant paused: "+r.tenant.SendingPausedReason, "")
		}
		out, err := r.pauseSending(ctx, st, r.tenant.SendingPausedReason, entry)
		return out, false, err
	}
	if st.kind == "handle" && !st.started && st.id != 0 {
		// Called before: its replies may have been posted meanwhile, or it
		// is waiting for them (async).
		if out, handled, err := r.awaitReplies(ctx, m, st, last); err != nil || handled {
			return out, false, err
		}
	}
	if st.kind == "handle" && r.tenant.HandlerURL != "" && r.outage(handlerDep) {
		if out, ok, err := r.probeHandler(ctx, st); err != nil || !ok {
			return out, false, err
		}
	}
	switch st.status {
	case "unchecked": // came in through SQL: checked before its first attempt (send.go)
		f, err := r.checkUnchecked(ctx, m, st)
		if err != nil {
			return outcome{}, false, err
		}
		if f != nil {
			out, err := r.failed(ctx, m, st, f)
			return out, false, err
		}
	case "refused": // checked by another drain's check
		reason, err := r.refusedReason(ctx, st)
		if err != nil {
			return outcome{}, false, err
		}
		out, err := r.deadLetter(ctx, m, st, reason, nil)
		return out, false, err
	}
	if !st.started {
		if out, ok, err := r.ready(ctx, m, st, last); err != nil || !ok {
			return out, false, err
		}
	} else if st.kind == "send" {
		// Started by the takeover on the cached number: the credential
		// itself is read now (and a tenant without one gets the attempt back
		// and its sending paused).
		if out, ok, err := r.prepareSend(ctx, st); err != nil || !ok {
			return out, false, err
		}
	}
	if st.kind == "send" && r.outage(numberDep) {
		// The attempt is recorded: one send at a time probes the number.
		if out, ok, err := r.probeNumber(ctx, st); err != nil || !ok {
			return out, false, err
		}
	}
	return outcome{}, true, nil
}

// effect is what a step's external call did: a send's message id or a
// handler's answer, or its failure.
type effect struct {
	providerID *string
	answer     handlerAnswer
	err        error
}

// call makes st's external call, a handler call or a send, within ctx
// (which the caller bounds by its lease).
func (r *run) call(ctx context.Context, m message, st *step) (e effect) {
	start := time.Now()
	switch st.kind {
	case "handle":
		e.answer, e.err = r.callHandler(ctx, m)
	case "send":
		var id string
		id, e.err = r.send(ctx, st)
		e.providerID = &id
	}
	r.d.cfg.Metrics.Call(st.kind, time.Since(start), e.err)
	return e
}

// record writes what st's call did (e): a failure settled (failed), an
// async handler's wait for its replies, or the step done, with a
// handler's replies as the message's next steps (finish). The effect
// happened (or was tried): it is recorded even when the worker is being
// stopped meanwhile, or the next drain finds it in doubt.
func (r *run) record(ctx context.Context, m message, st *step, last bool, e effect) (outcome, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if e.err != nil {
		var f *failure
		if !errors.As(e.err, &f) {
			f = &failure{msg: e.err.Error()}
		}
		return r.failed(ctx, m, st, f)
	}
	if e.answer.wait {
		return r.waitReplies(ctx, m, st, last)
	}
	replies := e.answer.replies
	if len(replies) <= 2 { // "[]": no replies, no more steps
		replies = nil
	}
	return r.finish(ctx, m, st, e.providerID, last && replies == nil, replies)
}

// recordTimeout bounds recording a step's outcome after its call, which
// goes on after a stop signal (a write takes milliseconds; this only keeps
// a dead database from holding a stopping worker for ever).
const recordTimeout = 10 * time.Second

// ready settles an earlier send attempt whose outcome is unknown, loads the
// credential, and starts the attempt (run.start). ok false: the step does
// not run now, and out says what happens instead.
func (r *run) ready(ctx context.Context, m message, st *step, last bool) (out outcome, ok bool, err error) {
	var phone *string
	if st.kind == "send" {
		if st.status == "running" || st.status == "unknown" {
			out, settled, err := r.settleAmbiguous(ctx, m, st, last)
			if err != nil || settled {
				return out, false, err
			}
		}
		out, ok, err := r.prepareSend(ctx, nil)
		if err != nil || !ok {
			return out, false, err
		}
		phone = &r.cred.PhoneNumberID
	}
	return r.start(ctx, m, st, phone)
}

// start records an attempt of st as running, once it may run: ordo.start_step
// checks the fence and, for a send, takes the phone number's next slot (and
// waits out the user's pair gap). A slot near enough is slept for, holding
// the conversation; one further out keeps its place on the conversation and
// the drain snoozes until then. ok false means not now (out says when).
func (r *run) start(ctx context.Context, m message, st *step, phone *string) (out outcome, ok bool, err error) {
	told := st.told // answered a moment ago: not asked again
	st.told = nil
	for {
		var (
			verdict  string
			wait     *time.Duration
			id       *int64
			attempts *int
		)
		if told != nil {
			verdict, wait, told = told.verdict, &told.wait, nil
		} else if err := r.s.queryRow(ctx, startStepQuery, []any{r.s.conv, r.s.fence, r.tenant.ID, m.pk, st.idx, st.kind, st.request, phone},
			&verdict, &wait, &id, &attempts); err != nil {
			return outcome{}, false, fmt.Errorf("start step: %w", err)
		}
		switch verdict {
		case "go":
			st.id, st.attempts = *id, *attempts
			return outcome{}, true, nil
		case "paused":
			// Marked waiting for the tenant's sending (its send slot given
			// up), or on at once when it was resumed meanwhile.
			out, err := r.waitFor(ctx, "sending", st, "", nil, r.d.cfg.PausedRecheck)
			return out, false, err
		}
		var d time.Duration // "wait": the pair gap, or the slot
		if wait != nil {
			d = *wait
		}
		if d > r.d.cfg.PaceMaxSleep || r.d.stopping.Load() {
			return outcome{kind: outcomeWait, delay: d}, false, nil
		}
		if err := sleep(ctx, d); err != nil {
			return outcome{}, false, err
		}
	}
}

// finish records st done in one write (ordo.finish). With last, st was m's
// last step: m is done and the head moves; when that caught the
// conversation up, or the run will not go on (r.goOn), the conversation is
// let go with the commit (outcome.released). Otherwise the same round trip
// reads (and may start) the next message. replies (a JSON array, or nil)
// are a handler's replies, stored as m's next steps in the same write.
func (r *run) finish(ctx context.Context, m message, st *step, providerID *string, last bool, replies json.RawMessage) (outcome, error) {
	if last && r.d.hooks.beforeFinish != nil {
		r.d.hooks.beforeFinish(r.s.conv)
	}
	var gap *time.Duration
	if st.kind == "send" && r.tenant.PairGapMS > 0 {
		// Counted from the answer, which came after Meta took the message:
		// the gap holds at Meta's end too.
		g := time.Duration(r.tenant.PairGapMS) * time.Millisecond
		gap = &g
	}
	then := thenRelease
	if !last || r.goOn != nil && r.goOn() {
		then = thenStay
	}
	var (
		released      bool // caught up (finished), or released
		sinceAccepted *time.Duration
		next          *nextMessage
		b             = &pgx.Batch{}
	)
	var reps []json.RawMessage // NULL: no replies to store
	if replies != nil {
		reps = []json.RawMessage{replies}
	}
	b.Queue(finishQuery, []int64{r.s.conv}, []int64{r.s.fence}, []int64{st.id}, []*string{providerID},
		[]int64{m.pk}, []int64{m.seq}, []bool{last}, reps, gap,
		then, r.s.after, 0, nil).QueryRow(func(row pgx.Row) error {
		return row.Scan(nil, nil, &released, &sinceAccepted, nil, nil, nil, nil, nil, nil)
	})
	if last && then == thenStay {
		// Same transaction, after the finish: nothing when the finish
		// caught the conversation up (and released it).
		var phone *string
		if r.cred != nil {
			phone = &r.cred.PhoneNumberID
		}
		b.Queue(nextStepQuery, r.s.conv, r.s.fence, m.seq, r.tenant.ID, phone).Query(func(rows pgx.Rows) error {
			n := &nextMessage{}
			n.m, n.steps, n.err = scanNext(rows)
			if n.err != nil && !errors.Is(n.err, pgx.ErrNoRows) {
				return n.err
			}
			next = n
			return nil
		})
	}
	if err := r.s.send(ctx, b); err != nil {
		return outcome{}, fmt.Errorf("finish step: %w", err)
	}
	r.s.unlocked = released
	st.status = "done"
	r.d.cfg.Metrics.Step(st.kind, metrics.StepDone)
	if sinceAccepted != nil && st.kind == "send" {
		r.d.cfg.Metrics.AcceptToSend(*sinceAccepted)
	}
	return outcome{kind: outcomeDone, released: released, next: next}, nil
}

// settleAmbiguous deals with a send whose last attempt has no known outcome:
// it failed ambiguously (5xx, timeout, dropped connection, 131000, 131016),
// or its worker stopped before recording it. Meta has no idempotency key, so
// a status webhook carrying the step's id (biz_opaque_callback_data) is the
// only proof it went out: with one the step is done without a resend. Under
// the tenant's reconcile policy the drain waits up to ReconcileWait from the
// attempt's start for one; under resend it does not wait. Then it resends,
// unless the step is out of attempts, which dead-letters it. settled is false
// when the caller should resend.
func (r *run) settleAmbiguous(ctx context.Context, m message, st *step, last bool) (out outcome, settled bool, err error) {
	if st.status == "running" {
		entry := errorEntry(st.attempts, "outcome unknown: the drain stopped before the send's answer was recorded", "ambiguous")
		b := &pgx.Batch{}
		b.Queue(markUnknown, st.id, entry)
		if err := r.s.write(ctx, b); err != nil {
			return outcome{}, true, err
		}
		st.status = "unknown"
		r.d.cfg.Metrics.Step(st.kind, metrics.StepAmbiguous)
		r.log.WarnContext(ctx, "send outcome unknown", slog.Int64("step_id", st.id), slog.Int64("seq", m.seq))
	}
	if st.providerStatus != nil && *st.providerStatus == "failed" {
		// Meta took an attempt and reported it undelivered: the user did
		// not get it, so it is settled like that error answered at once.
		return r.settleFailed(ctx, m, st)
	}
	if st.providerStatus != nil || st.providerID != nil {
		out, err := r.finish(ctx, m, st, st.providerID, last, nil)
		if err != nil {
			return outcome{}, true, err
		}
		r.log.InfoContext(ctx, "ambiguous send settled by a status webhook; not resent", slog.Int64("step_id", st.id), slog.Int64("seq", m.seq))
		return out, true, nil
	}
	if r.tenant.Ambiguous == "reconcile" && st.sinceStart != nil {
		if wait := r.d.cfg.ReconcileWait - *st.sinceStart; wait > 0 {
			// Look again within a second: the status webhook updates the
			// step, not the drain.
			return outcome{kind: outcomeWait, delay: min(wait, time.Second)}, true, nil
		}
	}
	if st.attempts >= r.tenant.MaxAttempts {
		reason := "attempts exhausted (" + strconv.Itoa(st.attempts) + "): the last send's outcome is unknown"
		out, err := r.deadLetter(ctx, m, st, reason, nil)
		return out, true, err
	}
	r.log.InfoContext(ctx, "resending a send whose outcome is unknown", slog.Int64("step_id", st.id),
		slog.Int64("seq", m.seq), slog.String("policy", r.tenant.Ambiguous))
	return outcome{}, false, nil
}

// failedStatusQuery reads what the failed status recorded on the step
// (the webhook appends it to the error history with its class).
const failedStatusQuery = `SELECT coalesce(errors->-1->>'error', 'delivery failed'), coalesce(errors->-1->>'class', '') FROM ordo.steps WHERE id = $1`

// forgetDelivery clears an undelivered attempt's provider status before the
// step is sent again, so the new attempt's statuses are its own.
const forgetDelivery = `
UPDATE ordo.steps SET provider_status = NULL, provider_status_rank = 0, provider_message_id = NULL
WHERE id = $1 AND provider_status = 'failed'`

// settleFailed settles a send in doubt whose attempt Meta reported failed:
// a permanent reason dead-letters the message, a paused account pauses the
// tenant, anything else sends it again (it was not delivered). settled is
// false when the caller should resend.
func (r *run) settleFailed(ctx context.Context, m message, st *step) (out outcome, settled bool, err error) {
	var msg, class string
	if err := r.s.queryRow(ctx, failedStatusQuery, []any{st.id}, &msg, &class); err != nil {
		return outcome{}, true, fmt.Errorf("read failed status: %w", err)
	}
	switch class {
	case whatsapp.Permanent.String():
		out, err := r.deadLetter(ctx, m, st, msg, nil)
		return out, true, err
	case whatsapp.Paused.String():
		out, err := r.pauseSending(ctx, nil, msg, nil)
		return out, true, err
	}
	if st.attempts >= r.tenant.MaxAttempts {
		out, err := r.deadLetter(ctx, m, st, "attempts exhausted ("+strconv.Itoa(st.attempts)+"): "+msg, nil)
		return out, true, err
	}
	b := &pgx.Batch{}
	b.Queue(forgetDelivery, st.id)
	if err := r.s.write(ctx, b); err != nil {
		return outcome{}, true, err
	}
	st.providerStatus, st.providerID = nil, nil
	r.log.InfoContext(ctx, "resending a send Meta reported undelivered", slog.Int64("step_id", st.id), slog.Int64("seq", m.seq), slog.String("reason", msg))
	return outcome{}, false, nil
}

// recordFailure puts a failed step back for a retry ($2: pending, or unknown
// when it may have gone out, which counts as an ambiguous send) and keeps
// the run of consecutive pair-rate errors ($4) that spaces 131056 retries.
const recordFailure = `
UPDATE ordo.steps SET
    status           = $2,
    errors           = errors || $3::jsonb,
    ambiguous_count  = ambiguous_count + CASE WHEN $2 = 'unknown' THEN 1 ELSE 0 END,
    pair_rate_errors = CASE WHEN $4 THEN pair_rate_errors + 1 ELSE 0 END
WHERE id = $1`

// countPairRate counts a 131056 that dead-letters its step in the step's
// run of pair-rate errors, for holdPairRate.
const countPairRate = `UPDATE ordo.steps SET pair_rate_errors = pair_rate_errors + 1 WHERE id = $1`

// holdPairRate moves conversation $1's pair_ready_at out by the entry of
// schedule $3 (pairRateSchedule) for step $2's run of pair-rate errors,
// counted in the same write, from now on the database's clock; it returns
// how long that is. ordo.reserve_send holds the user's next send until
// then, whichever path starts it — a claim, a wake-up, a takeover, the next
// message after a dead letter — not only the ready row's due time the
// drain parks with. After the step's record (the conversation row is the
// fence check's already, in the same mode: sql/LOCKING.md).
const holdPairRate = `
UPDATE ordo.conversations c
SET pair_ready_at = greatest(c.pair_ready_at,
    clock_timestamp() + ($3::interval[])[least(s.pair_rate_errors, cardinality($3::interval[]))])
FROM ordo.steps s
WHERE s.id = $2 AND c.id = $1
RETURNING c.pair_ready_at - clock_timestamp()`

// deadLetterQuery ends a message in a dead letter, and halts its
// conversation or moves its head past it (ordo.dead_letter).
const deadLetterQuery = `SELECT ordo.dead_letter($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9)`

// failed records a failed attempt and carries out what settle decides:
// retry later while the head stays (slowing the number, or spacing
// pair-rate retries), leave an ambiguous send for settleAmbiguous, pause
// the tenant's sending, dead-letter the message — or, for a dependency's
// outage-class failure, ask the evidence first, then hold the step back or
// wait for the dependency.
func (r *run) failed(ctx context.Context, m message, st *step, f *failure) (outcome, error) {
	a := attempt{kind: st.kind, attempts: st.attempts, most: r.tenant.MaxAttempts, f: *f,
		numberPast: r.pastLimit(numberDep), handlerPast: r.pastLimit(handlerDep)}
	s := settle(a, nil, r.d.backoff)
	if s.kind == settleEvidence {
		v, delay, failures, err := r.dependencyFailed(ctx, s.dep, st, f, s.immediate)
		if err != nil {
			return outcome{}, err
		}
		s = settle(a, &depVerdict{dep: s.dep, v: v, delay: delay, failures: failures}, r.d.backoff)
	}
	entry := errorEntry(st.attempts, f.msg, cmp.Or(s.class, f.class))
	if s.noEntry {
		entry = []byte("[]")
	}
	switch s.kind {
	case settleHoldBack:
		return r.holdBack(ctx, st, s.give, entry, s.delay)
	case settleWait:
		st.started = true // its attempt is given back
		return r.waitForDependency(ctx, s.dep, st, entry, s.delay)
	case settlePause:
		return r.pauseSending(ctx, st, f.msg, entry)
	case settleDeadLetter:
		if !s.exhausted {
			return r.deadLetter(ctx, m, st, f.msg, entry)
		}
		var guard func(*pgx.Batch)
		if f.action == actPairRate {
			// Meta's wait is the user's: it holds for the next message
			// (the tenant's skip policy), or for a replay.
			guard = func(b *pgx.Batch) {
				b.Queue(countPairRate, st.id)
				b.Queue(holdPairRate, r.s.conv, st.id, pairRateSchedule(r.d.cfg.PairRateUnit))
			}
		}
		return r.deadLetterWith(ctx, m, st, "attempts exhausted ("+strconv.Itoa(st.attempts)+"): "+f.msg, entry, guard)
	}

	status, delay := "pending", s.delay
	b := &pgx.Batch{}
	if f.action == actAmbiguous {
		status = "unknown"
	}
	if f.action == actThrottle && r.cred != nil {
		b.Queue(slowNumber, r.cred.PhoneNumberID, delay) // send_pacing before the step (sql/LOCKING.md)
	}
	b.Queue(recordFailure, st.id, status, entry, f.action == actPairRate)
	if f.action == actPairRate {
		b.Queue(holdPairRate, r.s.conv, st.id, pairRateSchedule(r.d.cfg.PairRateUnit)).QueryRow(func(row pgx.Row) error {
			return row.Scan(&delay)
		})
	}
	if err := r.s.write(ctx, b); err != nil {
		return outcome{}, err
	}
	if status == "unknown" {
		r.d.cfg.Metrics.Step(st.kind, metrics.StepAmbiguous)
	} else {
		r.d.cfg.Metrics.Step(st.kind, metrics.StepRetry)
	}
	r.log.InfoContext(ctx, "step failed; will retry", slog.String("message_id", m.id), slog.Int64("seq", m.seq),
		slog.Int64("step_id", st.id), slog.String("kind", st.kind), slog.Int("attempt", st.attempts),
		slog.String("error", f.msg), slog.Duration("delay", delay))
	return outcome{kind: outcomeWait, delay: delay}, nil
}

// deadLetter kills st and its message, records the dead letter with the
// step's error history (plus entry, if any), and halts or skips on per the
// tenant's policy.
func (r *run) deadLetter(ctx context.Context, m message, st *step, reason string, entry []byte) (outcome, error) {
	return r.deadLetterWith(ctx, m, st, reason, entry, nil)
}

// deadLetterWith is deadLetter with guard's statements first in the write
// (after the fence check): one that raises rolls the dead letter back.
func (r *run) deadLetterWith(ctx context.Context, m message, st *step, reason string, entry []byte, guard func(*pgx.Batch)) (outcome, error) {
	if entry == nil {
		entry = []byte("[]")
	}
	b := &pgx.Batch{}
	if guard != nil {
		guard(b)
	}
	halt := r.tenant.OnDeadLetter != "skip"
	b.Queue(deadLetterQuery, r.s.conv, r.s.fence, r.tenant.ID, m.pk, m.seq, st.id, reason, entry, halt)
	if err := r.s.write(ctx, b); err != nil {
		return outcome{}, err
	}
	r.d.cfg.Metrics.Step(st.kind, metrics.StepDead)
	r.log.WarnContext(ctx, "message dead-lettered", slog.String("message_id", m.id), slog.Int64("seq", m.seq),
		slog.Int64("step_id", st.id), slog.String("kind", st.kind), slog.Int("attempt", st.attempts),
		slog.String("reason", reason), slog.Bool("halted", halt))
	if halt {
		return outcome{kind: outcomeHalted}, nil
	}
	return outcome{kind: outcomeDone}, nil
}

// unstartStep gives back the attempt a send that never reached a working
// account took: a paused tenant's sends must not run out of attempts.
const unstartStep = `
UPDATE ordo.steps SET status = 'pending', attempts = greatest(attempts - 1, 0), errors = errors || $2::jsonb
WHERE id = $1`

// pauseTenant pauses the tenant's sending once; the count says whether this
// call did (so one drain logs it, not every drain of the tenant).
const pauseTenant = `
WITH p AS (
    UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = $2
    WHERE id = $1 AND sending_paused_at IS NULL
    RETURNING 1)
SELECT count(*) FROM p`

// pauseSending pauses the tenant's sending: Meta refused its credential or
// account (or it has none), so every send of the tenant would fail alike.
// Nothing is dead-lettered and st (if any) keeps its attempts; the tenant's
// conversations wait (ordo.reserve_send answers "paused") until an operator
// resumes sending, which wakes them.
func (r *run) pauseSending(ctx context.Context, st *step, reason string, entry []byte) (outcome, error) {
	// The tenant row in a transaction of its own, before the conversation's
	// (sql/LOCKING.md: the tenant comes first, and a resume holds it while
	// it wakes the tenant's conversations).
	var paused int
	if err := r.s.queryRow(ctx, pauseTenant, []any{r.tenant.ID, reason}, &paused); err != nil {
		return outcome{}, fmt.Errorf("pause tenant: %w", err)
	}
	give := ""
	if st != nil {
		give = unstartStep
	}
	out, err := r.waitFor(ctx, "sending", st, give, entry, r.d.cfg.PausedRecheck)
	if err != nil {
		return outcome{}, err
	}
	if st != nil {
		st.status = "pending"
		r.d.cfg.Metrics.Step(st.kind, metrics.StepPaused) // the attempt given back
	}
	if paused == 1 {
		r.log.WarnContext(ctx, "tenant's sending paused: its conversations wait until an operator runs `ordo tenant resume`",
			slog.String("tenant", r.tenant.Slug), slog.String("reason", reason))
	}
	return out, nil
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
