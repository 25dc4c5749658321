package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/jobs/metrics"
)

// A tenant's handler that does not answer — connection refused, a DNS
// failure, n8n's 404 while it restarts or while the workflow is off — or
// whose proxy answers 502/503/504 for several calls with no answer between
// (evidence.go) is a state of the tenant, not a failed attempt of each
// message (contract: handler callback, Failures). The tenant row holds it
// (handler_down_since, handler_probe_at, the evidence); the transitions
// are SQL functions, each in a transaction of its own on the tenant row:
//
//	reachable   --refused, 404: at once; 502-504: on evidence-->  unreachable  (ordo.handler_failed)
//	unreachable --probe time, one caller---------------------->  probing      (ordo.handler_probe)
//	probing     --call fails unreachable---------------------->  unreachable  (backoff doubles, ≤ HandlerProbeMax)
//	probing     --any other answer---------------------------->  reachable    (ordo.handler_back: waiting conversations woken)
//
// While unreachable, a drain about to call the handler that does not get
// the probe gives back its attempt, marks its conversation handler_wait and
// parks it until the probe time: it holds no worker, burns no attempt and
// dead-letters nothing. Past the tenant's handler_outage_limit_ms the
// handler's failures count as attempts again, as any other failure.

// HandlerProbeMax caps the time between two probes of an unreachable
// handler: it answers again at most this long before delivery resumes. An
// n8n upgrade takes a minute or three; a probe is one call.
const HandlerProbeMax = 30 * time.Second

const (
	handlerFailedQuery = `SELECT verdict, went_down, wait, coalesce(failures, 0) FROM ordo.handler_failed($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL)`
	handlerProbeQuery  = `SELECT go, wait FROM ordo.handler_probe($1, make_interval(secs => $2::float8 / 1000))`
	handlerBackQuery   = `SELECT ordo.handler_back($1, $2)`
)

// handlerOutage says whether the tenant's handler is unreachable and its
// outage is still within the tenant's limit: its calls are probes, and
// their failures are waits rather than attempts.
func (r *run) handlerOutage() bool {
	down := r.tenant.HandlerDownSince
	return down != nil && time.Since(*down) < time.Duration(r.tenant.HandlerOutageLimitMS)*time.Millisecond
}

// probeHandler is asked before a handle step's call while the tenant's
// handler is unreachable: ok when this drain got the probe (or the handler
// is back meanwhile) and may call; otherwise the conversation waits for
// the handler, holding nothing.
func (r *run) probeHandler(ctx context.Context, st *step) (out outcome, ok bool, err error) {
	var (
		probe bool
		wait  *time.Duration
	)
	r.s.touch()
	hold := r.handlerTimeout() + r.handlerTimeout()/10 + time.Second
	if err := r.s.conn.QueryRow(ctx, handlerProbeQuery, r.tenant.ID, hold.Milliseconds()).Scan(&probe, &wait); err != nil {
		return outcome{}, false, r.s.fail(fmt.Errorf("probe handler: %w", err))
	}
	if probe {
		r.probing = true
		return outcome{}, true, nil
	}
	// The prober wakes everyone when the handler answers
	// (ordo.handler_back); until then the others look again when the probe
	// is free again (its time, or its prober's hold, in case the prober
	// died: make chaos-ha kills workers every few seconds).
	delay := probeLook(wait, HandlerProbeMax)
	out, err = r.waitForHandler(ctx, st, delay)
	return out, false, err
}

// probeLook is when a conversation told "not your probe" looks again: when
// the probe is free again (wait), at least a second later so that no
// conversation spins on a probe about to be taken, at most max (nil wait:
// max).
func probeLook(wait *time.Duration, most time.Duration) time.Duration {
	if wait == nil {
		return most
	}
	return min(max(*wait, time.Second), most)
}

// handlerFailed records that the handler did not answer the call of st
// (f says how: at once unreachable, or only a suspect answer) with
// ordo.handler_failed, and says whether it is handled here. Down: the
// tenant's handler is unreachable (logged once, when it goes), st gets its
// attempt back and the conversation waits for the next probe. Not down
// yet on st's last attempt, with failures and no answer between: st keeps
// it until the evidence decides. Otherwise (handled false) st's failure is
// settled as any other, no sooner than the evidence can decide.
func (r *run) handlerFailed(ctx context.Context, st *step, f *failure, entry []byte) (out outcome, handled bool, err error) {
	var (
		verdict  string
		wentDown bool
		wait     *time.Duration
		failures int
	)
	// The tenant row in a transaction of its own, before the conversation's
	// (sql/LOCKING.md).
	r.s.touch()
	if err := r.s.conn.QueryRow(ctx, handlerFailedQuery, r.tenant.ID, st.id, r.probing, f.msg, !f.suspect, handlerRule.failures,
		handlerRule.span.Milliseconds(), handlerRule.horizon.Milliseconds(), HandlerProbeMax.Milliseconds()).Scan(&verdict, &wentDown, &wait, &failures); err != nil {
		return outcome{}, false, r.s.fail(fmt.Errorf("record handler failure: %w", err))
	}
	r.probing = false
	delay := HandlerProbeMax
	if wait != nil {
		delay = max(*wait, 0)
	}
	switch v := parseVerdict(verdict); v {
	case verdictMessage, verdictSuspect:
		if st.attempts < r.tenant.MaxAttempts || !handlerRule.keeps(v, failures) {
			// Settled as any other failure, no sooner than the evidence
			// can decide.
			if v == verdictSuspect {
				f.retryAfter = max(r.d.backoff(st.attempts, f.retryAfter), delay)
			}
			return outcome{}, false, nil
		}
		if v == verdictMessage {
			delay = r.d.backoff(st.attempts, f.retryAfter)
		}
		out, err = r.holdBack(ctx, st, unstartStep, entry, delay)
		return out, true, err
	}
	if wentDown {
		r.log.WarnContext(ctx, "tenant's handler unreachable: its conversations wait and one probe at a time looks for it",
			slog.String("tenant", r.tenant.Slug), slog.String("reason", f.msg))
	}
	if r.tenant.HandlerDownSince == nil {
		now := time.Now()
		r.tenant.HandlerDownSince = &now
	}
	st.started = true // its attempt is given back
	out, err = r.waitForHandler(ctx, st, delay)
	return out, true, err
}

// waitForHandler gives back st's attempt, if this drain recorded one, and
// parks the conversation until delay has passed or the handler is back.
func (r *run) waitForHandler(ctx context.Context, st *step, delay time.Duration) (outcome, error) {
	give := ""
	if st.started && st.id != 0 {
		give = unstartStep
	}
	out, err := r.waitFor(ctx, "handler", st, give, []byte("[]"), delay)
	if err == nil && st.started {
		st.started, st.status = false, "pending"
		r.d.cfg.Metrics.Step(st.kind, metrics.StepWaiting)
	}
	return out, err
}

// holdBack gives back st's attempt with give (unstartStep, or keepUnknown
// for a send, with entry for its error history) and parks the
// conversation for delay: a dependency suspected away, not yet down, while
// the evidence decides. Not a wait for the dependency (waitFor): nothing
// would wake it, and waitFor goes on at once when the dependency is not
// down — which sent a suspected number's last attempt again and again
// until the evidence decided (12 sends in 4 s).
func (r *run) holdBack(ctx context.Context, st *step, give string, entry []byte, delay time.Duration) (outcome, error) {
	b := &pgx.Batch{}
	b.Queue(give, st.id, entry)
	if err := r.s.write(ctx, b); err != nil {
		return outcome{}, err
	}
	st.started, st.status = false, "pending"
	if give == keepUnknown {
		st.status = "unknown"
		r.d.cfg.Metrics.Step(st.kind, metrics.StepAmbiguous)
	}
	r.d.cfg.Metrics.Step(st.kind, metrics.StepWaiting)
	return outcome{kind: outcomeWait, delay: delay}, nil
}

// waitForQuery marks the conversation waiting for a dependency of its
// tenant, if that is still away (ordo.wait_for_dependency).
const waitForQuery = `SELECT ordo.wait_for_dependency($1, $2, $3, $4)`

// waitFor parks the conversation until what its tenant depends on — its
// "handler", its "number", its "sending" — is back, or delay has passed:
// in one transaction it marks the conversation, which the way back wakes,
// and gives back st's attempt with give (an UPDATE of the step taking its
// id and entry; "" for none). When the dependency came back meanwhile the
// conversation goes on at once: the way back either saw the mark or was
// seen by it (ordo.wait_for_dependency), never neither.
func (r *run) waitFor(ctx context.Context, what string, st *step, give string, entry []byte, delay time.Duration) (outcome, error) {
	if r.d.hooks.beforeWait != nil {
		r.d.hooks.beforeWait(r.s.conv)
	}
	var away bool
	b := &pgx.Batch{}
	b.Queue(waitForQuery, r.tenant.ID, what, r.s.conv, r.s.fence).QueryRow(func(row pgx.Row) error { return row.Scan(&away) })
	if give != "" {
		b.Queue(give, st.id, entry)
	}
	if err := r.s.send(ctx, b); err != nil {
		return outcome{}, err
	}
	if !away {
		delay = 0
	}
	return outcome{kind: outcomeWait, delay: delay}, nil
}

// handlerAnswered is called after any answer of the handler other than an
// unreachable one while this run saw it unreachable (or probed it): the
// handler is back, and the conversations that waited for it go on.
func (r *run) handlerAnswered(ctx context.Context) {
	if !r.probing && r.tenant.HandlerDownSince == nil {
		return
	}
	r.probing, r.tenant.HandlerDownSince = false, nil
	r.dependencyBack(ctx, handlerBackQuery, "handler", "tenant's handler answers again: its waiting conversations go on")
}

// dependencyBack records that a dependency of the tenant (its handler, its
// number) is back with query (ordo.handler_back, ordo.number_back), which
// wakes the conversations that waited for it — not this run's own, whose
// drain goes on and keeps whatever wait it records next (a Retry-After,
// Meta's pair-rate advice); said is logged when this call brought it back.
// A failure leaves it to the next probe.
func (r *run) dependencyBack(ctx context.Context, query, what, said string) {
	var back bool
	r.s.touch()
	if err := r.s.conn.QueryRow(ctx, query, r.tenant.ID, r.s.conv).Scan(&back); err != nil {
		r.log.WarnContext(ctx, "record "+what+" back", slog.String("tenant", r.tenant.Slug), slog.String("error", err.Error()))
		_ = r.s.fail(err)
		return
	}
	if back {
		r.log.InfoContext(ctx, said, slog.String("tenant", r.tenant.Slug))
	}
}
