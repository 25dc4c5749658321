package whatsapptest

import (
	"strings"
	"testing"
)

func sends(pairs ...string) []Send {
	var out []Send
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, Send{To: pairs[i], Text: pairs[i+1]})
	}
	return out
}

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		sends    []Send
		expected map[string][]string
		want     Report // Details compared by count only
		details  []string
	}{
		{
			name:     "clean run, two conversations interleaved",
			sends:    sends("a", "1", "b", "x", "a", "2", "b", "y", "a", "3"),
			expected: map[string][]string{"a": {"1", "2", "3"}, "b": {"x", "y"}},
			want:     Report{Sent: 5},
		},
		{
			name:     "nothing expected, nothing sent",
			expected: map[string][]string{},
			want:     Report{},
		},
		{
			name:     "duplicate",
			sends:    sends("a", "1", "a", "2", "a", "2", "a", "3"),
			expected: map[string][]string{"a": {"1", "2", "3"}},
			want:     Report{Sent: 4, Duplicates: 1},
			details:  []string{`conversation a: text "2" delivered 2 times, expected 1`},
		},
		{
			name:     "duplicate of an earlier text is not also an order violation",
			sends:    sends("a", "1", "a", "2", "a", "1", "a", "3"),
			expected: map[string][]string{"a": {"1", "2", "3"}},
			want:     Report{Sent: 4, Duplicates: 1},
		},
		{
			name:     "triple delivery counts two duplicates",
			sends:    sends("a", "1", "a", "1", "a", "1"),
			expected: map[string][]string{"a": {"1"}},
			want:     Report{Sent: 3, Duplicates: 2},
		},
		{
			name:     "swap of two adjacent texts",
			sends:    sends("a", "2", "a", "1", "a", "3"),
			expected: map[string][]string{"a": {"1", "2", "3"}},
			want:     Report{Sent: 3, OrderViolations: 1},
			details:  []string{`conversation a: "1" (#1) delivered after "2" (#2)`},
		},
		{
			name:     "fully reversed counts every adjacent inversion",
			sends:    sends("a", "4", "a", "3", "a", "2", "a", "1"),
			expected: map[string][]string{"a": {"1", "2", "3", "4"}},
			want:     Report{Sent: 4, OrderViolations: 3},
		},
		{
			name:     "one late text counts once",
			sends:    sends("a", "2", "a", "3", "a", "4", "a", "1"),
			expected: map[string][]string{"a": {"1", "2", "3", "4"}},
			want:     Report{Sent: 4, OrderViolations: 1},
		},
		{
			name:     "order is per conversation",
			sends:    sends("b", "y", "a", "1", "b", "z", "a", "2"),
			expected: map[string][]string{"a": {"1", "2"}, "b": {"y", "z"}},
			want:     Report{Sent: 4},
		},
		{
			name:     "gap is a loss, not an order violation",
			sends:    sends("a", "1", "a", "3"),
			expected: map[string][]string{"a": {"1", "2", "3"}},
			want:     Report{Sent: 2, Lost: 1},
			details:  []string{`conversation a: "2" (#2) never delivered`},
		},
		{
			name:     "conversation never served",
			sends:    sends("a", "1"),
			expected: map[string][]string{"a": {"1"}, "b": {"x", "y"}},
			want:     Report{Sent: 1, Lost: 2},
		},
		{
			name:     "same text expected twice",
			sends:    sends("a", "ok", "a", "next", "a", "ok"),
			expected: map[string][]string{"a": {"ok", "next", "ok"}},
			want:     Report{Sent: 3},
		},
		{
			name:     "same text expected twice, delivered three times",
			sends:    sends("a", "ok", "a", "ok", "a", "next", "a", "ok"),
			expected: map[string][]string{"a": {"ok", "next", "ok"}},
			// Second "ok" is matched to #3 and arrives before "next" (#2).
			want: Report{Sent: 4, Duplicates: 1, OrderViolations: 1},
		},
		{
			name:     "unexpected text and unknown conversation",
			sends:    sends("a", "1", "a", "spam", "zz", "hello"),
			expected: map[string][]string{"a": {"1"}},
			want:     Report{Sent: 3, Unexpected: 2},
		},
		{
			name:     "everything at once",
			sends:    sends("a", "2", "a", "1", "a", "1", "b", "x"),
			expected: map[string][]string{"a": {"1", "2", "3"}, "b": {"x", "y"}},
			want:     Report{Sent: 4, Duplicates: 1, OrderViolations: 1, Lost: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Check(tt.sends, tt.expected)
			if got.Sent != tt.want.Sent || got.Duplicates != tt.want.Duplicates ||
				got.OrderViolations != tt.want.OrderViolations || got.Lost != tt.want.Lost ||
				got.Unexpected != tt.want.Unexpected {
				t.Errorf("got %s, want %s\n%s", got, tt.want, strings.Join(got.Details, "\n"))
			}
			problems := tt.want.Duplicates + tt.want.OrderViolations + tt.want.Lost + tt.want.Unexpected
			if len(got.Details) != problems {
				t.Errorf("want one detail per problem (%d), got %q", problems, got.Details)
			}
			if got.OK() != (problems == 0) {
				t.Errorf("OK() = %v with %d problems", got.OK(), problems)
			}
			for _, d := range tt.details {
				found := false
				for _, g := range got.Details {
					found = found || g == d
				}
				if !found {
					t.Errorf("missing detail %q in %q", d, got.Details)
				}
			}
		})
	}
}

func TestCheckBoundsDetails(t *testing.T) {
	t.Parallel()
	want := make([]string, 500)
	for i := range want {
		want[i] = strings.Repeat("x", i+1)
	}
	rep := Check(nil, map[string][]string{"a": want})
	if rep.Lost != 500 {
		t.Fatalf("Lost = %d", rep.Lost)
	}
	if len(rep.Details) != maxDetails+1 {
		t.Errorf("details not bounded: %d", len(rep.Details))
	}
}
