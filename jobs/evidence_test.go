package jobs

import (
	"testing"
	"time"
)

// evidenceEvent is one outage-class failure fed to the model: step failed
// at offset at, when the tenant had ok successful calls in all.
type evidenceEvent struct {
	step int64
	at   time.Duration
	ok   int64
}

// evidenceCase is a sequence of failures under a dependency's rule and the
// verdict after each.
type evidenceCase struct {
	name   string
	events []evidenceEvent
	want   []verdict
}

// numberCases and handlerCases are the rules' tables, shared with the SQL
// agreement test (TestEvidenceSQLAgrees).
var numberCases = []evidenceCase{
	{"a poison message never takes the number down",
		[]evidenceEvent{{1, 0, 0}, {1, 2 * time.Second, 0}, {1, 6 * time.Second, 0}, {1, 20 * time.Second, 0}, {1, 4 * time.Minute, 0}},
		[]verdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage, verdictMessage}},
	{"two poison messages neither",
		[]evidenceEvent{{1, 0, 0}, {2, time.Second, 0}, {1, 6 * time.Second, 0}, {2, 30 * time.Second, 0}},
		[]verdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage}},
	{"three different messages failing over 5 s take it down",
		[]evidenceEvent{{1, 0, 0}, {2, time.Second, 0}, {3, 2 * time.Second, 0}, {1, 5 * time.Second, 0}},
		[]verdict{verdictMessage, verdictMessage, verdictSuspect, verdictDown}},
	{"three at one instant are only suspect",
		[]evidenceEvent{{1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {4, time.Second, 0}},
		[]verdict{verdictMessage, verdictMessage, verdictSuspect, verdictSuspect}},
	{"the third step after 5 s takes it down at once",
		[]evidenceEvent{{1, 0, 0}, {2, 3 * time.Second, 0}, {3, 6 * time.Second, 0}},
		[]verdict{verdictMessage, verdictMessage, verdictDown}},
	{"a success in between resets the evidence",
		[]evidenceEvent{{1, 0, 10}, {2, time.Second, 10}, {3, 6 * time.Second, 11}, {4, 7 * time.Second, 11}, {5, 12 * time.Second, 11}},
		[]verdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage, verdictDown}},
	{"a poison message beside successful ones",
		[]evidenceEvent{{1, 0, 5}, {2, time.Second, 5}, {1, 6 * time.Second, 9}, {1, 12 * time.Second, 14}, {1, 18 * time.Second, 20}},
		[]verdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage, verdictMessage}},
	{"evidence older than the horizon is dropped",
		[]evidenceEvent{{1, 0, 0}, {2, time.Second, 0}, {3, 6 * time.Minute, 0}, {4, 6*time.Minute + time.Second, 0}, {5, 6*time.Minute + 6*time.Second, 0}},
		[]verdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage, verdictDown}},
	{"the same step again adds nothing",
		[]evidenceEvent{{1, 0, 0}, {2, time.Second, 0}, {2, 6 * time.Second, 0}, {1, 7 * time.Second, 0}, {3, 8 * time.Second, 0}},
		[]verdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage, verdictDown}},
}

var handlerCases = []evidenceCase{
	{"one 503 among answers never takes the handler down",
		[]evidenceEvent{{1, 0, 10}, {2, 3 * time.Second, 14}, {3, 5 * time.Second, 20}, {4, 9 * time.Second, 31}},
		[]verdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage}},
	{"one message's retries behind a proxy with nothing behind it take it down",
		[]evidenceEvent{{1, 0, 0}, {1, time.Second, 0}, {1, 3 * time.Second, 0}},
		[]verdict{verdictMessage, verdictMessage, verdictDown}},
	{"three at one instant are only suspect",
		[]evidenceEvent{{1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {4, time.Second, 0}, {5, 2 * time.Second, 0}},
		[]verdict{verdictMessage, verdictMessage, verdictSuspect, verdictSuspect, verdictDown}},
	{"an answer in between resets the evidence",
		[]evidenceEvent{{1, 0, 3}, {2, time.Second, 3}, {3, 3 * time.Second, 4}, {4, 4 * time.Second, 4}, {5, 5 * time.Second, 4}},
		[]verdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage, verdictDown}},
	{"evidence older than the horizon is dropped",
		[]evidenceEvent{{1, 0, 0}, {2, time.Second, 0}, {3, 6 * time.Minute, 0}},
		[]verdict{verdictMessage, verdictMessage, verdictMessage}},
}

func TestEvidence(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 27, 8, 0, 30, 0, time.UTC)
	for _, set := range []struct {
		rule  evidenceRule
		cases []evidenceCase
	}{{numberRule, numberCases}, {handlerRule, handlerCases}} {
		for _, c := range set.cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				var (
					e    evidence
					down bool
				)
				for i, ev := range c.events {
					if down {
						t.Fatalf("event %d after the dependency went down: the down state takes over", i)
					}
					var v verdict
					var wait time.Duration
					e, v, wait = e.failed(set.rule, ev.step, start.Add(ev.at), ev.ok)
					if v != c.want[i] {
						t.Fatalf("event %d (step %d at %s, %d ok): %s, want %s", i, ev.step, ev.at, ev.ok, v, c.want[i])
					}
					if v == verdictSuspect && (wait <= 0 || wait > set.rule.span) {
						t.Fatalf("event %d: suspect for %s more; want within (0, %s]", i, wait, set.rule.span)
					}
					down = v == verdictDown
				}
			})
		}
	}
}

// Which failures on a step's last attempt keep it until the evidence
// decides (the rest dead-letter as any failure).
func TestEvidenceKeepsTheLastAttempt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		rule     evidenceRule
		v        verdict
		failures int
		want     bool
	}{
		{"a suspicion, handler", handlerRule, verdictSuspect, 3, true},
		{"a suspicion, number", numberRule, verdictSuspect, 0, true},
		{"the handler's first failure", handlerRule, verdictMessage, 1, false},
		{"the handler's failures with no answer between", handlerRule, verdictMessage, 2, true},
		{"the number's failure of one message (a poison message)", numberRule, verdictMessage, 2, false},
		{"down is not kept but waited for", handlerRule, verdictDown, 3, false},
	} {
		if got := c.rule.keeps(c.v, c.failures); got != c.want {
			t.Errorf("%s: keeps %v, want %v", c.name, got, c.want)
		}
	}
}
