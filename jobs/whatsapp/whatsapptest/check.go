package whatsapptest

import (
	"fmt"
	"sort"
	"strings"
)

// maxDetails bounds Report.Details so a broken chaos run stays readable.
const maxDetails = 100

// Report is what Check found in a run's sends.
type Report struct {
	// Sent is the number of sends examined.
	Sent int
	// Duplicates counts deliveries beyond the expected number of a text in
	// its conversation (a text expected once and delivered three times
	// counts 2).
	Duplicates int
	// OrderViolations counts, per conversation, adjacent pairs of delivered
	// texts (first deliveries only) where the second comes earlier in the
	// expected list than the first.
	OrderViolations int
	// Lost counts expected texts never delivered.
	Lost int
	// Unexpected counts deliveries of texts (or to conversations) that were
	// not expected at all.
	Unexpected int
	// Details says what went wrong, at most 100 lines.
	Details []string
}

// OK reports a clean run: no duplicate, no order violation, nothing lost,
// nothing unexpected.
func (r Report) OK() bool {
	return r.Duplicates == 0 && r.OrderViolations == 0 && r.Lost == 0 && r.Unexpected == 0
}

// String summarises the report on one line.
func (r Report) String() string {
	return fmt.Sprintf("sent=%d duplicates=%d order_violations=%d lost=%d unexpected=%d",
		r.Sent, r.Duplicates, r.OrderViolations, r.Lost, r.Unexpected)
}

func (r *Report) detail(format string, args ...any) {
	if len(r.Details) < maxDetails {
		r.Details = append(r.Details, fmt.Sprintf(format, args...))
	} else if len(r.Details) == maxDetails {
		r.Details = append(r.Details, "… more problems not listed")
	}
}

// Check compares sends, in arrival order (as Server.Sends returns them),
// with what each conversation should have received: expected maps a
// conversation (the send's To) to its texts in order.
//
// A text may be expected more than once in a conversation: its j-th delivery
// then stands for its j-th expected occurrence, and only deliveries beyond
// the expected count are duplicates. Order is judged on those matched
// deliveries only, so a duplicate is not also counted as an order violation.
func Check(sends []Send, expected map[string][]string) Report {
	rep := Report{Sent: len(sends)}

	byConv := make(map[string][]string)
	for _, s := range sends {
		byConv[s.To] = append(byConv[s.To], s.Text)
	}

	convs := make([]string, 0, len(expected)+len(byConv))
	for c := range expected {
		convs = append(convs, c)
	}
	for c := range byConv {
		if _, ok := expected[c]; !ok {
			convs = append(convs, c)
		}
	}
	sort.Strings(convs)

	for _, conv := range convs {
		checkConversation(&rep, conv, expected[conv], byConv[conv])
	}
	return rep
}

// checkConversation adds one conversation's findings to rep.
func checkConversation(rep *Report, conv string, want, got []string) {
	// positions[text] lists the indexes of text in want, in order.
	positions := make(map[string][]int, len(want))
	for i, text := range want {
		positions[text] = append(positions[text], i)
	}

	delivered := make([]bool, len(want))
	seen := make(map[string]int, len(want)) // deliveries so far per text
	var order []int                         // want-index of each matched delivery
	for _, text := range got {
		pos, known := positions[text]
		if !known {
			rep.Unexpected++
			rep.detail("conversation %s: unexpected text %s", conv, quote(text))
			continue
		}
		n := seen[text]
		seen[text] = n + 1
		if n >= len(pos) {
			rep.Duplicates++
			rep.detail("conversation %s: text %s delivered %d times, expected %d", conv, quote(text), n+1, len(pos))
			continue
		}
		delivered[pos[n]] = true
		order = append(order, pos[n])
	}

	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			rep.OrderViolations++
			rep.detail("conversation %s: %s (#%d) delivered after %s (#%d)",
				conv, quote(want[order[i]]), order[i]+1, quote(want[order[i-1]]), order[i-1]+1)
		}
	}

	for i, ok := range delivered {
		if !ok {
			rep.Lost++
			rep.detail("conversation %s: %s (#%d) never delivered", conv, quote(want[i]), i+1)
		}
	}
}

// quote keeps details on one line whatever the texts contain.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		s = s[:max] + "…"
	}
	return fmt.Sprintf("%q", strings.ToValidUTF8(s, "?"))
}
