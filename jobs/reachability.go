package jobs

import (
	"context"
	"time"
)

// A tenant's handler that does not answer — connection refused, a DNS
// failure, n8n's 404 while it restarts or while the workflow is off — goes
// unreachable at once; one whose proxy answers 502/503/504 for several
// calls with no answer between, on evidence (handlerRule, evidence.go).
// Either is the dependency state machine's (dependency.go, handlerDep):
// while it is down, a drain about to call the handler that does not get
// the probe waits for it, holding nothing.

// HandlerProbeMax caps the time between two probes of an unreachable
// handler: it answers again at most this long before delivery resumes. An
// n8n upgrade takes a minute or three; a probe is one call.
const HandlerProbeMax = 30 * time.Second

// probeHandler is asked before a handle step's call while the tenant's
// handler is unreachable: ok when this drain got the probe (or the handler
// is back meanwhile) and may call; otherwise the conversation waits for
// the handler, holding nothing.
func (r *run) probeHandler(ctx context.Context, st *step) (out outcome, ok bool, err error) {
	return r.probeOrWait(ctx, handlerDep, st, r.handlerTimeout(), false)
}

// handlerFailed records that the handler did not answer the call of st
// (f says how: at once unreachable, or only a suspect answer) and says
// whether it is handled here. Down: the tenant's handler is unreachable,
// st gets its attempt back and the conversation waits for the next probe.
// Not down yet on st's last attempt, with failures and no answer between:
// st keeps it until the evidence decides. Otherwise (handled false) st's
// failure is settled as any other, no sooner than the evidence can decide.
func (r *run) handlerFailed(ctx context.Context, st *step, f *failure, entry []byte) (out outcome, handled bool, err error) {
	v, delay, failures, err := r.dependencyFailed(ctx, handlerDep, st, f, !f.suspect)
	if err != nil {
		return outcome{}, false, err
	}
	switch v {
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
	st.started = true // its attempt is given back
	out, err = r.waitForDependency(ctx, handlerDep, st, []byte("[]"), delay)
	return out, true, err
}
