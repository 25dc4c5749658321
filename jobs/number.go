package jobs

import (
	"context"
)

// A tenant's WhatsApp number that the Cloud API does not serve — 5xx
// answers, Meta's "service unavailable" codes, refused connections,
// timeouts, for several different messages (numberRule, evidence.go) — is
// unreachable, the dependency state machine's as its handler's is
// (dependency.go, numberDep). While it is down, a drain about to send that
// does not get the probe gives back its attempt and waits, holding
// nothing. What a failed send does to its own step: a refused connection
// (never reached Meta) or a 5xx answer while the number is down gives the
// attempt back, the step pending again — with Meta's service away for
// several messages over seconds, its 5xx says the request was not taken,
// and a probe that waited out the tenant's ReconcileWait first would hold
// every waiting conversation that long. Before the number is down (the
// evidence only suspects it) a 5xx keeps its meaning: status unknown,
// counted, settled by the tenant's reconcile|resend policy; only its last
// attempt is kept back until the evidence decides. A timeout (the request
// went out) is settled exactly as before, its attempt counted: it only
// adds evidence. Meta's pause and throttle answers (actPause, actThrottle)
// are answers, not outages: they bring a down number back and are handled
// as they always were.

const (
	// keepUnknown records a 5xx answer to a send while the number is only
	// suspected away: ambiguous as ever (status unknown, counted), its
	// attempt given back.
	keepUnknown = `
UPDATE ordo.steps SET status = 'unknown', attempts = greatest(attempts - 1, 0),
    ambiguous_count = ambiguous_count + 1, errors = errors || $2::jsonb
WHERE id = $1`
)

// probeNumber is asked before a send while the tenant's number is
// unreachable, st's attempt recorded: ok when this drain got the probe (or
// the number is back meanwhile) and may send; otherwise st gets its attempt
// back and the conversation waits for the number, holding nothing.
func (r *run) probeNumber(ctx context.Context, st *step) (out outcome, ok bool, err error) {
	if r.probing[numberDep.idx] {
		return outcome{}, true, nil // its probe went without an answer about the number: still this run's
	}
	return r.probeOrWait(ctx, numberDep, st, r.d.cfg.SendTimeout, true)
}
