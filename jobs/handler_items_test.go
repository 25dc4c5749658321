package jobs

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// n8n answers with items all the time (a Code node returning two items,
// "Respond With: All Incoming Items", "When Last Node Finishes" with "All
// Entries"): items holding replies are concatenated in item order, items
// that are messages are sent in order, and any other shape is a dead letter
// that names the n8n setting to change.
func TestParseRepliesReadsN8nItems(t *testing.T) {
	t.Parallel()
	const (
		a = `{"type":"text","text":{"body":"a"}}`
		b = `{"type":"text","text":{"body":"b"}}`
		c = `{"type":"text","text":{"body":"c"}}`
	)
	for _, tc := range []struct {
		name, answer string
		want         []string // bodies in order; nil: a dead letter
		wantDead     string
	}{
		{name: "object", answer: `{"replies":[` + a + `,` + b + `]}`, want: []string{"a", "b"}},
		{name: "one item holding replies", answer: `[{"replies":[` + a + `]}]`, want: []string{"a"}},
		{name: "two items holding replies", answer: `[{"replies":[` + a + `,` + b + `]},{"replies":[` + c + `]}]`, want: []string{"a", "b", "c"}},
		{name: "an item with no replies among others", answer: `[{"replies":[]},{"replies":[` + b + `]}]`, want: []string{"b"}},
		{name: "two message items", answer: `[` + b + `,` + a + `]`, want: []string{"b", "a"}},
		{name: "one message item", answer: `[` + c + `]`, want: []string{"c"}},
		{name: "items of both kinds, in item order", answer: `[` + a + `,{"replies":[` + b + `,` + c + `]}]`, want: []string{"a", "b", "c"}},
		{name: "items holding no replies", answer: `[{"replies":[]},{"replies":[]}]`, want: []string{}},
		{name: "no items", answer: `[]`, wantDead: `"Respond With: JSON"`},
		{name: "an item of another shape", answer: `[` + a + `,{"text":"hi"}]`, wantDead: `item 2 of 2 is neither {"replies": [...]} nor a WhatsApp message`},
		{name: "an item that is no object", answer: `[` + a + `,"hi"]`, wantDead: `item 2 of 2 is not a JSON object`},
		{name: "replies that are no array", answer: `[{"replies":{"type":"text"}}]`, wantDead: `item 1 of 1 has "replies" that is not an array`},
		{name: "a type that is no string", answer: `[{"type":1}]`, wantDead: `Respond to Webhook`},
		{name: "a message item WhatsApp refuses", answer: `[{"type":"text","text":{}}]`, wantDead: `reply 1 of 1`},
		{name: "too many replies across items", answer: `[{"replies":[` + strings.Repeat(a+",", 30) + a + `]},{"replies":[` + strings.Repeat(b+",", 30) + b + `]}]`, wantDead: "62 replies; at most 50"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := parseReplies([]byte(tc.answer))
			if tc.wantDead != "" {
				var f *failure
				if !errors.As(err, &f) || f.action != actDeadLetter {
					t.Fatalf("parsed as %s, %v; want a dead letter", out, err)
				}
				if !strings.Contains(f.msg, tc.wantDead) {
					t.Fatalf("dead letter %q; want it to say %q", f.msg, tc.wantDead)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			var replies []struct {
				Text struct{ Body string } `json:"text"`
			}
			if err := json.Unmarshal(out, &replies); err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, r := range replies {
				got = append(got, r.Text.Body)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("replies %v, want %v", got, tc.want)
			}
		})
	}
}
