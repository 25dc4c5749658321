package jobs

import (
	"time"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// What a failed attempt comes to is decided here, from plain values
// (settle; table-tested in settle_test.go), and carried out by run.failed:
// retry after a backoff, dead-letter, pause the tenant's sending — or, for
// an outage-class failure of what the tenant depends on (its number,
// number.go; its handler, reachability.go), first ask the evidence
// (ordo.dependency_failed), then hold the step back while the evidence
// decides or wait for the dependency once it is down.
//
// The number: a send that never reached the Cloud API or was answered 5xx
// while the number is down gives its attempt back and waits. Before it is
// down (the evidence only suspects it) a 5xx keeps its meaning — status
// unknown, counted, settled by the tenant's reconcile|resend policy — and
// only its last attempt is kept back until the evidence decides. A timeout
// (the request went out) is settled as any failure: it only adds evidence.
//
// The handler: down, the step gives its attempt back and waits for the
// next probe. Not down yet on its last attempt, with failures and no
// answer between, it is kept back until the evidence decides; otherwise
// it is settled as any failure, no sooner than the evidence can decide.
//
// Past the tenant's outage limit a dependency's failures count as
// attempts again, with no evidence asked.

// settleKind is what a failed attempt comes to.
type settleKind int

const (
	// settleEvidence: ask ordo.dependency_failed about dep, then settle
	// again with its verdict.
	settleEvidence settleKind = iota
	// settleRetry: the failure recorded, the step pending again (unknown:
	// an ambiguous send, settled before any resend) after delay.
	settleRetry
	// settleDeadLetter: the message dead-lettered (exhausted: its step
	// out of attempts).
	settleDeadLetter
	// settlePause: the tenant's sending paused.
	settlePause
	// settleHoldBack: the step keeps its attempt back (give: keepUnknown
	// or unstartStep) while the evidence decides; due again after delay.
	settleHoldBack
	// settleWait: dep is down: the step's attempt given back, the
	// conversation waits for dep (or delay, the next probe).
	settleWait
)

// settlement is a failed attempt's fate (settle).
type settlement struct {
	kind settleKind
	// dep: settleEvidence, settleWait. immediate: settleEvidence takes
	// dep down at once (a handler that says plainly it is not there).
	dep       *dependency
	immediate bool
	// give: settleHoldBack's statement.
	give string
	// class, if set, replaces the failure's own in the error history's
	// entry ("number_unreachable": the send was not taken).
	class string
	// noEntry: the error history gets no entry (a wait for the handler).
	noEntry bool
	// delay: settleRetry, settleHoldBack, settleWait.
	delay time.Duration
	// exhausted: settleDeadLetter for want of attempts.
	exhausted bool
}

// attempt is what settle knows of a failed attempt.
type attempt struct {
	kind     string // "send", "handle"
	attempts int    // made, this one included
	most     int    // the tenant's MaxAttempts
	f        failure
	// pastLimit: the tenant's number, handler has been unreachable for
	// longer than its outage limit.
	numberPast, handlerPast bool
}

// depVerdict is what ordo.dependency_failed said of dep (run.dependencyFailed).
type depVerdict struct {
	dep      *dependency
	v        verdict
	delay    time.Duration
	failures int
}

// settle decides a failed attempt's fate; ev is the evidence asked for by
// a settleEvidence it returned before (nil: none yet). backoff is the
// retry delay of an attempt (Drainer.backoff: jittered).
func settle(a attempt, ev *depVerdict, backoff func(attempt int, retryAfter time.Duration) time.Duration) settlement {
	f := a.f
	switch {
	case ev == nil && a.kind == "send" && f.reach != whatsapp.Reached && !a.numberPast:
		return settlement{kind: settleEvidence, dep: numberDep}
	case ev == nil && f.action == actUnreachable && !a.handlerPast:
		return settlement{kind: settleEvidence, dep: handlerDep, immediate: !f.suspect}
	case ev != nil && ev.dep == numberDep:
		if s, ok := settleNumber(a, *ev); ok {
			return s
		}
	case ev != nil && ev.dep == handlerDep:
		switch {
		case ev.v == verdictDown:
			return settlement{kind: settleWait, dep: handlerDep, noEntry: true, delay: ev.delay}
		case a.attempts >= a.most && handlerRule.keeps(ev.v, ev.failures):
			delay := ev.delay
			if ev.v == verdictMessage {
				delay = backoff(a.attempts, f.retryAfter)
			}
			return settlement{kind: settleHoldBack, give: unstartStep, delay: delay}
		case ev.v == verdictSuspect:
			// No sooner than the evidence can decide.
			f.retryAfter = max(backoff(a.attempts, f.retryAfter), ev.delay)
		}
	}
	switch {
	case f.action == actPause:
		return settlement{kind: settlePause}
	case f.action == actDeadLetter:
		return settlement{kind: settleDeadLetter}
	case f.action != actAmbiguous && a.attempts >= a.most:
		// An ambiguous send is settled first (it may have gone out).
		return settlement{kind: settleDeadLetter, exhausted: true}
	}
	return settlement{kind: settleRetry, delay: backoff(a.attempts, f.retryAfter)}
}

// settleNumber is a send's failure with the number's evidence ev: ok when
// the number's state settles it.
func settleNumber(a attempt, ev depVerdict) (settlement, bool) {
	f := a.f
	if f.reach == whatsapp.NoAnswer || ev.v != verdictDown && (a.attempts < a.most || !numberRule.keeps(ev.v, ev.failures)) {
		// A timeout may have gone out: settled as it always was. A failure
		// short of down counts while the step has attempts left; the last
		// one is kept as numberRule says.
		return settlement{}, false
	}
	switch {
	case f.reach == whatsapp.ServerError && ev.v == verdictSuspect:
		return settlement{kind: settleHoldBack, give: keepUnknown, delay: ev.delay}, true
	case ev.v == verdictSuspect:
		return settlement{kind: settleHoldBack, give: unstartStep, class: "number_unreachable", delay: ev.delay}, true
	}
	return settlement{kind: settleWait, dep: numberDep, class: "number_unreachable", delay: ev.delay}, true
}
