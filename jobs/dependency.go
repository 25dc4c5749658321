package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/jobs/metrics"
	"github.com/ordo-dev/ordo/tenants"
)

// What a tenant depends on — its handler (reachability.go), its WhatsApp
// number through the Cloud API (number.go) — can be unreachable: a state of
// the tenant, not a failed attempt of each message (contract: handler
// callback, Failures; "the same for the Cloud API"). One state machine
// serves both, the dependency an argument: its state is a row of
// ordo.dependencies (tenant, what) — there from the tenant's first failure
// of it on, and kept, so that every later transition updates a row that
// is there (migration 000051 says why) — and each transition is one SQL
// function, each in a transaction of its own on that row:
//
//	reachable   --outage-class failures, on evidence (evidence.go)
//	              or at once when it says plainly it is not there-->  unreachable (ordo.dependency_failed)
//	unreachable --probe time, one caller------------------------->  probing     (ordo.dependency_probe)
//	probing     --the call fails outage-class-------------------->  unreachable (backoff doubles, ≤ its probeMax)
//	probing     --any other answer------------------------------->  reachable   (ordo.dependency_back: waiting conversations woken)
//
// While unreachable, a drain about to call it that does not get the probe
// gives back its attempt, marks its conversation waiting for it
// (ordo.wait_for_dependency) and parks it until the probe time: it holds
// no worker, burns no attempt and dead-letters nothing. Past the tenant's
// handler_outage_limit_ms (one outage limit for both) the dependency's
// failures count as attempts again, as any other failure. What a failure
// does to its own step is decided in settle.go.

// dependency is one thing a tenant depends on whose outage is a state.
type dependency struct {
	// what names it in ordo.dependencies and in a conversation's wait
	// (ordo.wait_for_dependency): "handler" or "number".
	what string
	// idx is its place in run.probing.
	idx int
	// rule is how much evidence takes it down.
	rule evidenceRule
	// probeMax caps the time between two probes.
	probeMax time.Duration
	// down is where the drain's copy of the tenant keeps since when it is
	// unreachable (read with the tenant when the drain began).
	down func(t *tenants.Tenant) **time.Time
	// wentDown and back are logged once: when a failure took it down, and
	// when an answer brought it back.
	wentDown, back string
}

var (
	handlerDep = &dependency{
		what: "handler", idx: 0, rule: handlerRule, probeMax: HandlerProbeMax,
		down:     func(t *tenants.Tenant) **time.Time { return &t.HandlerDownSince },
		wentDown: "tenant's handler unreachable: its conversations wait and one probe at a time looks for it",
		back:     "tenant's handler answers again: its waiting conversations go on",
	}
	numberDep = &dependency{
		what: "number", idx: 1, rule: numberRule, probeMax: NumberProbeMax,
		down:     func(t *tenants.Tenant) **time.Time { return &t.NumberDownSince },
		wentDown: "tenant's WhatsApp number unreachable through the Cloud API: its conversations wait and one probe send at a time looks for it",
		back:     "tenant's WhatsApp number served again: its waiting conversations go on",
	}
)

const (
	dependencyFailedQuery = `
SELECT verdict, went_down, wait, coalesce(failures, 0)
FROM ordo.dependency_failed($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULL)`
	dependencyProbeQuery = `SELECT go, wait FROM ordo.dependency_probe($1, $2, make_interval(secs => $3::float8 / 1000))`
	dependencyBackQuery  = `SELECT ordo.dependency_back($1, $2, $3)`
	// waitForQuery marks the conversation waiting for a dependency of its
	// tenant, if that is still away (ordo.wait_for_dependency).
	waitForQuery = `SELECT ordo.wait_for_dependency($1, $2, $3, $4)`
)

// outage says whether the tenant's d is unreachable and its outage is
// still within the tenant's limit: its calls are probes, and their
// failures are waits rather than attempts.
func (r *run) outage(d *dependency) bool {
	down := *d.down(&r.tenant)
	return down != nil && time.Since(*down) < time.Duration(r.tenant.HandlerOutageLimitMS)*time.Millisecond
}

// pastLimit says whether the tenant's d has been unreachable for longer
// than the tenant's outage limit: its failures count as attempts again, as
// any other failure's.
func (r *run) pastLimit(d *dependency) bool {
	return *d.down(&r.tenant) != nil && !r.outage(d)
}

// probeOrWait asks, while the tenant's d is unreachable, whether this
// drain may call it now (ordo.dependency_probe), holding the probe for its
// call's timeout and some, so that a prober that dies frees it: ok when it
// got the probe (or d is back meanwhile). Otherwise the conversation waits
// for d, holding nothing, and st gets back its attempt if one is recorded
// (recorded: a send's, recorded before its probe). The prober wakes
// everyone when d answers (ordo.dependency_back); until then the others
// look again when the probe is free again, in case its prober died (make
// chaos-ha kills workers every few seconds).
func (r *run) probeOrWait(ctx context.Context, d *dependency, st *step, timeout time.Duration, recorded bool) (out outcome, ok bool, err error) {
	var wait *time.Duration
	hold := timeout + timeout/10 + time.Second
	if err := r.s.queryRow(ctx, dependencyProbeQuery, []any{r.tenant.ID, d.what, hold.Milliseconds()}, &ok, &wait); err != nil {
		return outcome{}, false, fmt.Errorf("probe %s: %w", d.what, err)
	}
	if ok {
		r.probing[d.idx] = true
		return outcome{}, true, nil
	}
	if recorded {
		st.started = true
	}
	out, err = r.waitForDependency(ctx, d, st, []byte("[]"), probeLook(wait, d.probeMax))
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

// dependencyFailed records that st's call of d failed outage-class (f; at
// once down when immediate) with ordo.dependency_failed, in a transaction
// of its own on d's row before the conversation's (sql/LOCKING.md), and
// returns the verdict, failures (how many the evidence holds, this one
// included) and delay: for verdictDown the time until the next probe, for
// verdictSuspect until the evidence spans d's rule (d.probeMax when the
// function said none). Down is logged once, by the call that took d down.
func (r *run) dependencyFailed(ctx context.Context, d *dependency, st *step, f *failure, immediate bool) (v verdict, delay time.Duration, failures int, err error) {
	var (
		verdict  string
		wentDown bool
		wait     *time.Duration
	)
	if err := r.s.queryRow(ctx, dependencyFailedQuery, []any{r.tenant.ID, d.what, st.id, r.probing[d.idx], f.msg, immediate,
		d.rule.failures, d.rule.distinct, d.rule.span.Milliseconds(), d.rule.horizon.Milliseconds(), d.probeMax.Milliseconds()},
		&verdict, &wentDown, &wait, &failures); err != nil {
		return 0, 0, 0, fmt.Errorf("record %s failure: %w", d.what, err)
	}
	r.probing[d.idx] = false
	v = parseVerdict(verdict)
	if wentDown {
		r.log.WarnContext(ctx, d.wentDown, slog.String("tenant", r.tenant.Slug), slog.String("reason", f.msg))
	}
	if down := d.down(&r.tenant); v == verdictDown && *down == nil {
		now := time.Now()
		*down = &now
	}
	delay = d.probeMax
	if wait != nil {
		delay = max(*wait, 0)
	}
	return v, delay, failures, nil
}

// waitForDependency gives back st's attempt (with entry for its error
// history), if this drain recorded one, and parks the conversation until
// delay has passed or d is back.
func (r *run) waitForDependency(ctx context.Context, d *dependency, st *step, entry []byte, delay time.Duration) (outcome, error) {
	give := ""
	if st.started && st.id != 0 {
		give = unstartStep
	}
	out, err := r.waitFor(ctx, d.what, st, give, entry, delay)
	if err == nil && st.started {
		st.started, st.status = false, "pending"
		r.d.cfg.Metrics.Step(st.kind, metrics.StepWaiting)
	}
	return out, err
}

// waitFor parks the conversation until what its tenant depends on — its
// "handler", its "number", its "sending" — is back, or delay has passed:
// in one transaction it marks the conversation, which the way back wakes,
// gives back st's attempt with give (an UPDATE of the step taking its id
// and entry; "" for none), and parks the conversation, letting it go. When
// the dependency came back meanwhile the conversation is due at once: the
// way back either saw the mark or was seen by it (ordo.wait_for_dependency),
// never neither. One transaction because the mark holds the row that says
// the dependency is away (FOR SHARE) until the park is committed: the way
// back's ordo.wake_waiting only tries each marked conversation's row, and
// one it found held by a park of its own transaction was left to wait out
// its park (TestResumeWhileADrainParksWakesIt).
func (r *run) waitFor(ctx context.Context, what string, st *step, give string, entry []byte, delay time.Duration) (outcome, error) {
	if r.d.hooks.beforeWait != nil {
		r.d.hooks.beforeWait(r.s.conv)
	}
	r.s.touch()
	err := pgx.BeginFunc(ctx, r.s.conn, func(tx pgx.Tx) error {
		var away, ok bool
		if err := tx.QueryRow(ctx, waitForQuery, r.tenant.ID, what, r.s.conv, r.s.fence).Scan(&away); err != nil {
			return err
		}
		if give != "" {
			if _, err := tx.Exec(ctx, give, st.id, entry); err != nil {
				return err
			}
		}
		if !away {
			delay = 0
		}
		return tx.QueryRow(ctx, parkQuery, r.s.conv, r.s.fence, delay.Milliseconds(), r.s.after).Scan(&ok)
	})
	if err != nil {
		return outcome{}, r.s.written(err)
	}
	r.s.unlocked = true
	return outcome{kind: outcomeWait, delay: delay, released: true}, nil
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

// answered is called after any answer of d other than an outage while
// this run saw d unreachable (or probed it): d is back
// (ordo.dependency_back), and the conversations that waited for it go on —
// not this run's own, whose drain goes on and keeps whatever wait it
// records next (a Retry-After, Meta's pair-rate advice). A failure leaves
// it to the next probe.
func (r *run) answered(ctx context.Context, d *dependency) {
	down := d.down(&r.tenant)
	if !r.probing[d.idx] && *down == nil {
		return
	}
	r.probing[d.idx], *down = false, nil
	var back bool
	if err := r.s.queryRow(ctx, dependencyBackQuery, []any{r.tenant.ID, d.what, r.s.conv}, &back); err != nil {
		r.log.WarnContext(ctx, "record "+d.what+" back", slog.String("tenant", r.tenant.Slug), slog.String("error", err.Error()))
		return
	}
	if back {
		r.log.InfoContext(ctx, d.back, slog.String("tenant", r.tenant.Slug))
	}
}
