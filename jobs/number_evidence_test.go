package jobs

import (
	"testing"
	"time"
)

// numberEvent is one outage-class send failure fed to the model: step
// failed at offset at, when the tenant had sent successful sends in all.
type numberEvent struct {
	step int64
	at   time.Duration
	sent int64
}

// numberCases are the rule's table, shared with the SQL agreement test
// (TestNumberEvidenceSQLAgrees): each is a sequence of failures and the
// verdict after each.
var numberCases = []struct {
	name   string
	events []numberEvent
	want   []numberVerdict
}{
	{"a poison message never takes the number down",
		[]numberEvent{{1, 0, 0}, {1, 2 * time.Second, 0}, {1, 6 * time.Second, 0}, {1, 20 * time.Second, 0}, {1, 4 * time.Minute, 0}},
		[]numberVerdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage, verdictMessage}},
	{"two poison messages neither",
		[]numberEvent{{1, 0, 0}, {2, time.Second, 0}, {1, 6 * time.Second, 0}, {2, 30 * time.Second, 0}},
		[]numberVerdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage}},
	{"three different messages failing over 5 s take it down",
		[]numberEvent{{1, 0, 0}, {2, time.Second, 0}, {3, 2 * time.Second, 0}, {1, 5 * time.Second, 0}},
		[]numberVerdict{verdictMessage, verdictMessage, verdictSuspect, verdictDown}},
	{"three at one instant are only suspect",
		[]numberEvent{{1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {4, time.Second, 0}},
		[]numberVerdict{verdictMessage, verdictMessage, verdictSuspect, verdictSuspect}},
	{"the third step after 5 s takes it down at once",
		[]numberEvent{{1, 0, 0}, {2, 3 * time.Second, 0}, {3, 6 * time.Second, 0}},
		[]numberVerdict{verdictMessage, verdictMessage, verdictDown}},
	{"a success in between resets the evidence",
		[]numberEvent{{1, 0, 10}, {2, time.Second, 10}, {3, 6 * time.Second, 11}, {4, 7 * time.Second, 11}, {5, 12 * time.Second, 11}},
		[]numberVerdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage, verdictDown}},
	{"a poison message beside successful ones",
		[]numberEvent{{1, 0, 5}, {2, time.Second, 5}, {1, 6 * time.Second, 9}, {1, 12 * time.Second, 14}, {1, 18 * time.Second, 20}},
		[]numberVerdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage, verdictMessage}},
	{"evidence older than the horizon is dropped",
		[]numberEvent{{1, 0, 0}, {2, time.Second, 0}, {3, 6 * time.Minute, 0}, {4, 6*time.Minute + time.Second, 0}, {5, 6*time.Minute + 6*time.Second, 0}},
		[]numberVerdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage, verdictDown}},
	{"the same step again adds nothing",
		[]numberEvent{{1, 0, 0}, {2, time.Second, 0}, {2, 6 * time.Second, 0}, {1, 7 * time.Second, 0}, {3, 8 * time.Second, 0}},
		[]numberVerdict{verdictMessage, verdictMessage, verdictMessage, verdictMessage, verdictDown}},
}

func TestNumberEvidence(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 27, 8, 0, 30, 0, time.UTC)
	for _, c := range numberCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var (
				e    numberEvidence
				down bool
			)
			for i, ev := range c.events {
				if down {
					t.Fatalf("event %d after the number went down: the down state takes over", i)
				}
				var v numberVerdict
				var wait time.Duration
				e, v, wait = e.failed(ev.step, start.Add(ev.at), ev.sent)
				if v != c.want[i] {
					t.Fatalf("event %d (step %d at %s, %d sent): %s, want %s", i, ev.step, ev.at, ev.sent, v, c.want[i])
				}
				if v == verdictSuspect && (wait <= 0 || wait > NumberDownSpan) {
					t.Fatalf("event %d: suspect for %s more; want within (0, %s]", i, wait, NumberDownSpan)
				}
				down = v == verdictDown
			}
		})
	}
}
