package chaos

// A message's tries: every request the clients (or the SQL application)
// made for it and how each ended. The ledger keeps them; the "accepted
// once" check prints them for a message it fails, so that the report alone
// tells an acknowledged insert lost in a failover (a 202, then later
// another id) from an answer that was another caller's (an id that no try
// of this message created) or from a misjudged answer.

import (
	"fmt"
	"strings"
	"time"
)

// chaosTry is one request for a message and how it ended: a 2xx with its
// answer, another status, or no answer at all (err).
type chaosTry struct {
	copy, try int // the copy of the message (1, 2, …; a late copy gets the next number) and its try (1, 2, …)
	sent, at  time.Time
	status    int    // 0: no answer (err says why)
	err       string // the transport error, or the body of a non-2xx answer
	answer    chaosAnswer
	odd       bool // a 2xx that disagreed with the first (or with its own status)
	sql       bool // an application's transaction (stresser_sql.go), not a REST call
}

// tryErrMax shortens an error or a refusal's body in the report.
const tryErrMax = 100

// describeTries lists m's tries in the order they ended, one line each,
// with times from start (as the fault log prints them) and the faults whose
// span the try overlapped.
func describeTries(m *chaosMsg, start time.Time, spans []faultSpan) []string {
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "?"
		}
		return fmt.Sprintf("+%.3fs", t.Sub(start).Seconds())
	}
	out := make([]string, 0, len(m.tries))
	for _, t := range m.tries {
		var b strings.Builder
		who := "copy"
		if t.sql {
			who = "sql transaction"
		}
		fmt.Fprintf(&b, "  %s %d try %d: sent %s, ended %s: ", who, t.copy, t.try, rel(t.sent), rel(t.at))
		switch {
		case t.status == 0:
			fmt.Fprintf(&b, "no answer (%s)", shorten(t.err))
		case t.status >= 200 && t.status < 300:
			fmt.Fprintf(&b, "%d id %s seq %d duplicate %t", t.status, t.answer.ID, t.answer.Seq, t.answer.Duplicate)
			if t.answer.MessageID != m.id || t.answer.ConversationID != m.conv {
				fmt.Fprintf(&b, " message_id %.40q conversation_id %.40q", t.answer.MessageID, t.answer.ConversationID)
			}
			if t.odd {
				b.WriteString(" ← disagrees")
			}
		default:
			fmt.Fprintf(&b, "%d %s", t.status, shorten(t.err))
		}
		var in []string
		for _, s := range spans {
			if !t.sent.IsZero() && !t.at.IsZero() && !t.at.Before(s.from) && !t.sent.After(s.to) {
				in = append(in, fmt.Sprintf("%s %s–%s", s.kind, rel(s.from), rel(s.to)))
			}
		}
		if len(in) > 0 {
			fmt.Fprintf(&b, " [during %s]", strings.Join(in, ", "))
		}
		out = append(out, b.String())
	}
	return out
}

func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len([]rune(s)) > tryErrMax {
		return string([]rune(s)[:tryErrMax]) + "…"
	}
	return s
}
