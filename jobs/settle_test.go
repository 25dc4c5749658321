package jobs

import (
	"testing"
	"time"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// TestSettle: what a failed attempt comes to, from plain values — the
// policy run.failed carries out (the tests of number.go, reachability.go
// and evidence.go check the same against Postgres and real servers).
func TestSettle(t *testing.T) {
	t.Parallel()
	// backoff: the provider's wait when it gave one, else a second an
	// attempt (Drainer.backoff is jittered).
	backoff := func(attempt int, retryAfter time.Duration) time.Duration {
		if retryAfter > 0 {
			return retryAfter
		}
		return time.Duration(attempt) * time.Second
	}
	send := func(n int, f failure) attempt { return attempt{kind: "send", attempts: n, most: 3, f: f} }
	handle := func(n int, f failure) attempt { return attempt{kind: "handle", attempts: n, most: 3, f: f} }
	number := func(v verdict, failures int) *depVerdict {
		return &depVerdict{dep: numberDep, v: v, delay: 7 * time.Second, failures: failures}
	}
	handler := func(v verdict, failures int) *depVerdict {
		return &depVerdict{dep: handlerDep, v: v, delay: 7 * time.Second, failures: failures}
	}
	refused := failure{action: actRetry, reach: whatsapp.NotReached}
	server := failure{action: actAmbiguous, reach: whatsapp.ServerError}
	timeout := failure{action: actAmbiguous, reach: whatsapp.NoAnswer, silent: true}
	away := failure{action: actUnreachable}
	proxy := failure{action: actUnreachable, suspect: true}
	past := func(a attempt) attempt { a.numberPast, a.handlerPast = true, true; return a }

	for _, tc := range []struct {
		name string
		a    attempt
		ev   *depVerdict
		want settlement
	}{
		// Any failure.
		{"a send answered with a retryable error retries after its backoff",
			send(1, failure{action: actRetry}), nil, settlement{kind: settleRetry, delay: time.Second}},
		{"the provider's Retry-After wins",
			send(1, failure{action: actRetry, retryAfter: time.Minute}), nil, settlement{kind: settleRetry, delay: time.Minute}},
		{"out of attempts, dead-lettered",
			send(3, failure{action: actRetry}), nil, settlement{kind: settleDeadLetter, exhausted: true}},
		{"an ambiguous send out of attempts is settled before anything else",
			send(3, failure{action: actAmbiguous}), nil, settlement{kind: settleRetry, delay: 3 * time.Second}},
		{"a permanent error dead-letters at once",
			send(1, failure{action: actDeadLetter}), nil, settlement{kind: settleDeadLetter}},
		{"a bad credential pauses the tenant's sending",
			send(1, failure{action: actPause}), nil, settlement{kind: settlePause}},

		// The number.
		{"a send that did not reach the Cloud API asks the number's evidence",
			send(1, refused), nil, settlement{kind: settleEvidence, dep: numberDep}},
		{"so does a timeout (evidence only)",
			send(1, timeout), nil, settlement{kind: settleEvidence, dep: numberDep}},
		{"number down: the send waits for it, not taken",
			send(1, refused), number(verdictDown, 3), settlement{kind: settleWait, dep: numberDep, class: "number_unreachable", delay: 7 * time.Second}},
		{"number down, but the timed-out send may have gone out: settled as ever",
			send(1, timeout), number(verdictDown, 3), settlement{kind: settleRetry, delay: time.Second}},
		{"number suspected, attempts left: the failure counts",
			send(1, refused), number(verdictSuspect, 2), settlement{kind: settleRetry, delay: time.Second}},
		{"number suspected, last attempt: kept back until the evidence decides",
			send(3, refused), number(verdictSuspect, 2), settlement{kind: settleHoldBack, give: unstartStep, class: "number_unreachable", delay: 7 * time.Second}},
		{"number suspected, last attempt answered 5xx: kept back, still in doubt",
			send(3, server), number(verdictSuspect, 2), settlement{kind: settleHoldBack, give: keepUnknown, delay: 7 * time.Second}},
		{"no evidence against the number, last attempt: dead-lettered",
			send(3, refused), number(verdictMessage, 1), settlement{kind: settleDeadLetter, exhausted: true}},
		{"number past its outage limit: no evidence asked, attempts count",
			past(send(3, refused)), nil, settlement{kind: settleDeadLetter, exhausted: true}},

		// The handler.
		{"a handler that is plainly not there goes down at once",
			handle(1, away), nil, settlement{kind: settleEvidence, dep: handlerDep, immediate: true}},
		{"a proxy's 502 only adds evidence",
			handle(1, proxy), nil, settlement{kind: settleEvidence, dep: handlerDep}},
		{"handler down: the conversation waits for it",
			handle(1, away), handler(verdictDown, 1), settlement{kind: settleWait, dep: handlerDep, noEntry: true, delay: 7 * time.Second}},
		{"handler suspected, attempts left: retried no sooner than the evidence decides",
			handle(1, proxy), handler(verdictSuspect, 2), settlement{kind: settleRetry, delay: 7 * time.Second}},
		{"handler suspected, last attempt: kept back",
			handle(3, proxy), handler(verdictSuspect, 2), settlement{kind: settleHoldBack, give: unstartStep, delay: 7 * time.Second}},
		{"failures with no answer between, last attempt: kept back for its backoff",
			handle(3, proxy), handler(verdictMessage, 2), settlement{kind: settleHoldBack, give: unstartStep, delay: 3 * time.Second}},
		{"one failure, last attempt: dead-lettered",
			handle(3, proxy), handler(verdictMessage, 1), settlement{kind: settleDeadLetter, exhausted: true}},
		{"handler past its outage limit: attempts count",
			past(handle(1, away)), nil, settlement{kind: settleRetry, delay: time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := settle(tc.a, tc.ev, backoff); got != tc.want {
				t.Errorf("settle = %+v; want %+v", got, tc.want)
			}
		})
	}
}
