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
