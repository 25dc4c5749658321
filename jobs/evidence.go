package jobs

import (
	"slices"
	"time"
)

// When calls to what a tenant depends on fail, is it the messages or the
// dependency? One message that Meta answers 500 every time (a malformed
// media id) is that message's problem; one 503 from the handler's proxy
// among a stream of answers (a worker of n8n restarting behind a load
// balancer) is that call's. Neither may take the dependency down and hold
// every other message of the tenant. So a dependency counts as unreachable
// only on evidence: a rule's number of outage-class failures, spanning at
// least its span, with no success of the tenant's calls in between.
// evidence is that rule, pure; ordo.dependency_evidence carries it out on
// the dependency's row of ordo.dependencies for ordo.dependency_failed,
// where every process sees it, with the rule the drain passes
// (dependency.go; TestEvidenceSQLAgrees holds the two together).
//
// A dependency that says plainly it is not there — a refused connection,
// a DNS failure, n8n's 404 for a webhook it does not have — needs no
// evidence: the handler goes down at once (reachability.go).

// evidenceRule is how much evidence takes a dependency down.
type evidenceRule struct {
	// failures is how many failures must be seen: different steps when
	// distinct, else any (the same message's retries included).
	failures int
	// distinct counts only different steps: a poison message's repeats are
	// its own problem.
	distinct bool
	// span is how long the failures must span: a burst at one instant may
	// be one bad moment.
	span time.Duration
	// horizon is how old the first failure of the evidence may be: older
	// evidence is dropped and counting starts again.
	horizon time.Duration
}

const (
	// NumberDownSteps is how many different send steps must fail so
	// before the number counts as unreachable.
	NumberDownSteps = 3
	// NumberDownSpan is how long those failures must span.
	NumberDownSpan = 5 * time.Second
	// NumberEvidenceHorizon is how old the first failure of the number's
	// evidence may be.
	NumberEvidenceHorizon = 5 * time.Minute
	// NumberProbeMax caps the time between two probe sends of an
	// unreachable number, as HandlerProbeMax for a handler.
	NumberProbeMax = time.Minute

	// HandlerDownFailures is how many calls of the handler answered
	// 502/503/504 with no answer between make it unreachable. The same
	// message's retries count: a tenant with one conversation behind a
	// proxy whose n8n is away must not burn that message's attempts. (A
	// message whose workflow times out at the proxy every time can take
	// the handler down; the next call of another message that gets through
	// brings it back.)
	HandlerDownFailures = 3
	// HandlerDownSpan is how long those failures must span.
	HandlerDownSpan = 2 * time.Second
	// HandlerEvidenceHorizon is how old the first failure of the handler's
	// evidence may be.
	HandlerEvidenceHorizon = 5 * time.Minute
)

var (
	numberRule  = evidenceRule{failures: NumberDownSteps, distinct: true, span: NumberDownSpan, horizon: NumberEvidenceHorizon}
	handlerRule = evidenceRule{failures: HandlerDownFailures, span: HandlerDownSpan, horizon: HandlerEvidenceHorizon}
)

// verdict is what an outage-class failure is.
type verdict int

const (
	// verdictMessage: no evidence that the dependency is away: the step's
	// own failure, settled as any other.
	verdictMessage verdict = iota
	// verdictSuspect: enough failures, but not over the rule's span yet:
	// the step keeps its attempt and waits for the evidence to decide.
	verdictSuspect
	// verdictDown: the dependency is unreachable.
	verdictDown
)

func (v verdict) String() string {
	return [...]string{"message", "suspect", "down"}[v]
}

// parseVerdict reads ordo.dependency_evidence's verdict.
func parseVerdict(s string) verdict {
	switch s {
	case "suspect":
		return verdictSuspect
	case "down":
		return verdictDown
	}
	return verdictMessage
}

// evidence is what is known against a tenant's dependency while it is
// reachable: the steps whose calls failed outage-class since since, and
// ok, the tenant's count of successful calls when that evidence began (a
// larger count later means a call succeeded in between).
type evidence struct {
	steps []int64
	since time.Time
	ok    int64
}

// failed records that step's call failed outage-class at now, when the
// tenant's successful calls number ok. It returns the evidence to keep
// (the zero value once the dependency is down: the down state takes over)
// and the verdict; for verdictSuspect, wait is how long until the
// evidence spans the rule's span.
func (e evidence) failed(rule evidenceRule, step int64, now time.Time, ok int64) (next evidence, v verdict, wait time.Duration) {
	if e.steps == nil || now.Sub(e.since) >= rule.horizon || ok > e.ok {
		e = evidence{since: now, ok: ok}
	}
	if len(e.steps) < rule.failures && !(rule.distinct && slices.Contains(e.steps, step)) {
		e.steps = append(slices.Clip(e.steps), step)
	}
	span := now.Sub(e.since)
	switch {
	case len(e.steps) < rule.failures:
		return e, verdictMessage, 0
	case span >= rule.span:
		return evidence{}, verdictDown, 0
	}
	return e, verdictSuspect, rule.span - span
}

// keeps says whether a step whose call failed with verdict v (not down),
// on its last attempt, keeps that attempt until the evidence decides
// instead of being settled — dead-lettered — now: a dependency away must
// never dead-letter what waits for it. A suspicion always keeps it. So do
// failures with no answer between (failures: how many the evidence holds,
// this one included) under a rule that counts a message's own retries: one
// conversation behind a proxy with nothing behind it. A failure after an
// answer, or under a rule of different steps (a poison message), is the
// message's own.
func (rule evidenceRule) keeps(v verdict, failures int) bool {
	switch v {
	case verdictSuspect:
		return true
	case verdictMessage:
		return !rule.distinct && failures >= 2
	}
	return false
}
