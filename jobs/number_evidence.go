package jobs

import (
	"slices"
	"time"
)

// When the Cloud API fails a tenant's sends, is it the messages or the
// number? One message that Meta answers 500 every time (a malformed media
// id) is that message's problem: it must burn its own attempts and
// dead-letter, never take the number down and hold every other message of
// the tenant. So the number counts as unreachable only on distinct
// evidence: outage-class failures (whatsapp.ReachOf) of NumberDownSteps
// different send steps, spanning at least NumberDownSpan, with no
// successful send of the tenant in between. numberEvidence is that rule,
// pure; ordo.number_failed carries it out on the tenant row, where every
// process sees it (TestNumberEvidenceSQLAgrees holds the two together).
const (
	// NumberDownSteps is how many different send steps must fail so
	// before the number counts as unreachable.
	NumberDownSteps = 3
	// NumberDownSpan is how long those failures must span: a burst of
	// failures at one instant may be one bad moment.
	NumberDownSpan = 5 * time.Second
	// NumberEvidenceHorizon is how old the first failure of the evidence
	// may be: older evidence is dropped and counting starts again.
	NumberEvidenceHorizon = 5 * time.Minute
	// NumberProbeMax caps the time between two probe sends of an
	// unreachable number, as HandlerProbeMax for a handler.
	NumberProbeMax = time.Minute
)

// numberVerdict is what an outage-class send failure is.
type numberVerdict int

const (
	// verdictMessage: no evidence that the number is away: the step's own
	// failure, settled as any other.
	verdictMessage numberVerdict = iota
	// verdictSuspect: enough different steps failed, but not over
	// NumberDownSpan yet: the step keeps its attempt and waits for the
	// evidence to decide.
	verdictSuspect
	// verdictDown: the number is unreachable.
	verdictDown
)

func (v numberVerdict) String() string {
	return [...]string{"message", "suspect", "down"}[v]
}

// parseVerdict reads ordo.number_failed's verdict.
func parseVerdict(s string) numberVerdict {
	switch s {
	case "suspect":
		return verdictSuspect
	case "down":
		return verdictDown
	}
	return verdictMessage
}

// numberEvidence is what is known against a tenant's number while it is
// reachable: the distinct steps whose sends failed outage-class since
// since, and sent, the tenant's count of successful sends when that
// evidence began (a larger count later means a send succeeded in between).
type numberEvidence struct {
	steps []int64
	since time.Time
	sent  int64
}

// failed records that step's send failed outage-class at now, when the
// tenant's successful sends number sent. It returns the evidence to keep
// (the zero value once the number is down: the down state takes over) and
// the verdict; for verdictSuspect, wait is how long until the evidence
// spans NumberDownSpan.
func (e numberEvidence) failed(step int64, now time.Time, sent int64) (next numberEvidence, v numberVerdict, wait time.Duration) {
	if e.steps == nil || now.Sub(e.since) >= NumberEvidenceHorizon || sent > e.sent {
		e = numberEvidence{since: now, sent: sent}
	}
	if !slices.Contains(e.steps, step) && len(e.steps) < NumberDownSteps {
		e.steps = append(slices.Clip(e.steps), step)
	}
	span := now.Sub(e.since)
	switch {
	case len(e.steps) < NumberDownSteps:
		return e, verdictMessage, 0
	case span >= NumberDownSpan:
		return numberEvidence{}, verdictDown, 0
	}
	return e, verdictSuspect, NumberDownSpan - span
}
