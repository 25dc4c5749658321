package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestAcceptedOnceShowsTries shows that a message the "accepted once"
// check fails comes with every try of every copy — status, id, seq,
// duplicate, times and the fault it fell in — so that a 202 lost in a
// failover and inserted again reads differently from a repeat answered
// with another message's id.
func TestAcceptedOnceShowsTries(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	kill := faultSpan{kind: faultHAPrimaryKill, what: "kill -9 of the primary", from: at(10), to: at(20)}

	l := newChaosLedger([]string{"P0"})
	m := &chaosMsg{tenant: 0, conv: "c", id: "m1", text: "a"}
	l.offer(m)
	c1, c2 := l.newCopy(m), l.newCopy(m)
	l.answerTry(m, 202, chaosAnswer{ID: "7", MessageID: "m1", ConversationID: "c", Seq: 1}, chaosTry{copy: c1, try: 1, sent: at(9), at: at(9.5)})
	l.tried(m, chaosTry{copy: c2, try: 1, sent: at(9.6), at: at(12), status: 503, err: `{"error":{"code":"unavailable"}}`})
	l.tried(m, chaosTry{copy: c2, try: 2, sent: at(12.1), at: at(13), err: "read: connection reset by peer"})
	l.answerTry(m, 202, chaosAnswer{ID: "9", MessageID: "m1", ConversationID: "c", Seq: 1}, chaosTry{copy: c2, try: 3, sent: at(21), at: at(21.2)})
	l.count(2, 2, 0)

	rep := chaosJudge(chaosInput{ledger: l, spans: []faultSpan{kill}, start: start, replays: map[chaosConvKey]int{}})
	var got *chaosCheck
	for i := range rep.checks {
		if rep.checks[i].name == "accepted once" {
			got = &rep.checks[i]
		}
	}
	if got == nil || got.ok {
		t.Fatalf("accepted once: %+v, want a failure", got)
	}
	want := []string{
		`"m1": 2 answers, 2 of them 202, 1 disagreeing with the first, 0 with another seq`,
		`  copy 1 try 1: sent +9.000s, ended +9.500s: 202 id 7 seq 1 duplicate false`,
		`  copy 2 try 1: sent +9.600s, ended +12.000s: 503 {"error":{"code":"unavailable"}} [during ha_primary_kill +10.000s–+20.000s]`,
		`  copy 2 try 2: sent +12.100s, ended +13.000s: no answer (read: connection reset by peer) [during ha_primary_kill +10.000s–+20.000s]`,
		`  copy 2 try 3: sent +21.000s, ended +21.200s: 202 id 9 seq 1 duplicate false ← disagrees`,
	}
	if strings.Join(got.details, "\n") != strings.Join(want, "\n") {
		t.Errorf("details:\n%s\nwant:\n%s", strings.Join(got.details, "\n"), strings.Join(want, "\n"))
	}
}
