package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ordo-dev/ordo/jobs/metrics"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// A tenant's WhatsApp number that the Cloud API does not serve — 5xx
// answers, Meta's "service unavailable" codes, refused connections,
// timeouts, for several different messages (evidence.go) — is a
// state of the tenant, as its handler's is (reachability.go; contract:
// "the same for the Cloud API"). The tenant row holds it
// (number_down_since, number_probe_at); the transitions are SQL functions,
// each in a transaction of its own on the tenant row:
//
//	reachable   --outage-class send failures, distinct evidence-->  unreachable (ordo.number_failed)
//	unreachable --probe time, one caller------------------------>  probing     (ordo.number_probe)
//	probing     --send fails outage-class----------------------->  unreachable (backoff doubles, ≤ NumberProbeMax)
//	probing     --sent, or any answer about something else------>  reachable   (ordo.number_back: waiting conversations woken)
//
// While unreachable, a drain about to send that does not get the probe
// gives back its attempt, marks its conversation number_wait and parks it
// until the probe time: it holds no worker and burns no attempt. What a
// failed send does to its own step: a refused connection (never reached
// Meta) or a 5xx answer while the number is down gives the attempt back,
// the step pending again — with Meta's service away for several messages
// over seconds, its 5xx says the request was not taken, and a probe that
// waited out the tenant's ReconcileWait first would hold every waiting
// conversation that long. Before the number is down (the evidence only
// suspects it) a 5xx keeps its meaning: status unknown, counted, settled
// by the tenant's reconcile|resend policy; only its last attempt is kept
// back until the evidence decides. A timeout (the request went out) is
// settled exactly as before, its attempt counted: it only adds evidence.
// Meta's pause and
// throttle answers (actPause, actThrottle) are answers, not outages: they
// bring a down number back and are handled as they always were. Past the
// tenant's handler_outage_limit_ms (one outage limit for both
// dependencies) the number's failures count as attempts again.

const (
	numberFailedQuery = `SELECT verdict, went_down, wait FROM ordo.number_failed($1, $2, $3, $4, $5, $6, $7, $8, NULL)`
	numberProbeQuery  = `SELECT go, wait FROM ordo.number_probe($1, make_interval(secs => $2::float8 / 1000))`
	numberBackQuery   = `SELECT ordo.number_back($1, $2)`
	// keepUnknown records a 5xx answer to a send while the number is only
	// suspected away: ambiguous as ever (status unknown, counted), its
	// attempt given back.
	keepUnknown = `
UPDATE ordo.steps SET status = 'unknown', attempts = greatest(attempts - 1, 0),
    ambiguous_count = ambiguous_count + 1, errors = errors || $2::jsonb
WHERE id = $1`
)

// numberOutage says whether the tenant's number is unreachable and its
// outage is still within the tenant's limit: its sends are probes, and
// their failures are waits rather than attempts.
func (r *run) numberOutage() bool {
	down := r.tenant.NumberDownSince
	return down != nil && time.Since(*down) < time.Duration(r.tenant.HandlerOutageLimitMS)*time.Millisecond
}

// probeNumber is asked before a send while the tenant's number is
// unreachable, st's attempt recorded: ok when this drain got the probe (or
// the number is back meanwhile) and may send; otherwise st gets its attempt
// back and the conversation waits for the number, holding nothing.
func (r *run) probeNumber(ctx context.Context, st *step) (out outcome, ok bool, err error) {
	if r.probingNumber {
		return outcome{}, true, nil // its probe went without an answer about the number: still this run's
	}
	var (
		probe bool
		wait  *time.Duration
	)
	r.s.touch()
	hold := r.d.cfg.SendTimeout + r.d.cfg.SendTimeout/10 + time.Second
	if err := r.s.conn.QueryRow(ctx, numberProbeQuery, r.tenant.ID, hold.Milliseconds()).Scan(&probe, &wait); err != nil {
		return outcome{}, false, r.s.fail(fmt.Errorf("probe number: %w", err))
	}
	if probe {
		r.probingNumber = true
		return outcome{}, true, nil
	}
	// The prober wakes everyone when a send goes through
	// (ordo.number_back); until then the others look again only at the
	// probe's latest pace, in case its prober died.
	delay := probeLook(wait, NumberProbeMax)
	out, err = r.waitForNumber(ctx, st, []byte("[]"), delay)
	return out, false, err
}

// numberFailed records an outage-class failure of send st
// (ordo.number_failed) and says whether it is handled here: the number is
// down (or suspected while st is out of attempts) and the request
// certainly did not go out or was answered 5xx, so st gets its attempt back
// and the conversation waits. Otherwise (handled false) st's failure is
// settled as any other.
func (r *run) numberFailed(ctx context.Context, st *step, f *failure, entry []byte) (out outcome, handled bool, err error) {
	var (
		verdict  string
		wentDown bool
		wait     *time.Duration
	)
	// The tenant row in a transaction of its own, before the conversation's
	// (sql/LOCKING.md).
	r.s.touch()
	if err := r.s.conn.QueryRow(ctx, numberFailedQuery, r.tenant.ID, st.id, r.probingNumber, f.msg, NumberDownSteps,
		NumberDownSpan.Milliseconds(), NumberEvidenceHorizon.Milliseconds(), NumberProbeMax.Milliseconds()).Scan(&verdict, &wentDown, &wait); err != nil {
		return outcome{}, false, r.s.fail(fmt.Errorf("record number failure: %w", err))
	}
	v := parseVerdict(verdict)
	if wentDown {
		r.log.WarnContext(ctx, "tenant's WhatsApp number unreachable through the Cloud API: its conversations wait and one probe send at a time looks for it",
			slog.String("tenant", r.tenant.Slug), slog.String("reason", f.msg))
	}
	if v == verdictDown && r.tenant.NumberDownSince == nil {
		now := time.Now()
		r.tenant.NumberDownSince = &now
	}
	r.probingNumber = false
	if f.reach == whatsapp.NoAnswer || v != verdictDown && (st.attempts < r.tenant.MaxAttempts || !numberRule.keeps(v, 0)) {
		// A timeout may have gone out: settled as it always was. A failure
		// short of down counts while the step has attempts left; the last
		// one is kept as numberRule says.
		return outcome{}, false, nil
	}
	delay := NumberProbeMax
	if wait != nil {
		delay = max(*wait, 0)
	}
	if f.reach == whatsapp.ServerError && v == verdictSuspect {
		out, err = r.holdBack(ctx, st, keepUnknown, entry, delay)
		return out, true, err
	}
	entry = errorEntry(st.attempts, f.msg, "number_unreachable") // not an ambiguous send: not taken
	if v == verdictSuspect {
		out, err = r.holdBack(ctx, st, unstartStep, entry, delay)
	} else {
		out, err = r.waitForNumber(ctx, st, entry, delay)
	}
	return out, true, err
}

// waitForNumber gives back st's attempt (with entry for its error
// history) and parks the conversation until delay has passed or the
// number is back.
func (r *run) waitForNumber(ctx context.Context, st *step, entry []byte, delay time.Duration) (outcome, error) {
	out, err := r.waitFor(ctx, "number", st, unstartStep, entry, delay)
	if err != nil {
		return outcome{}, err
	}
	st.started, st.status = false, "pending"
	r.d.cfg.Metrics.Step(st.kind, metrics.StepWaiting)
	return out, nil
}

// numberAnswered is called after a send the Cloud API answered — it went
// out, or Meta said something about the message or the account — while
// this run saw the number unreachable (or probed it): the number is back,
// and the conversations that waited for it go on.
func (r *run) numberAnswered(ctx context.Context) {
	if !r.probingNumber && r.tenant.NumberDownSince == nil {
		return
	}
	r.probingNumber, r.tenant.NumberDownSince = false, nil
	r.dependencyBack(ctx, numberBackQuery, "number", "tenant's WhatsApp number served again: its waiting conversations go on")
}
