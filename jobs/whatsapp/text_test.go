package whatsapp

import (
	"strings"
	"testing"
)

func TestCheckText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		text, want string // want "" for accepted
	}{
		{`{"body":"héllo 👋"}`, ""},
		{`{"body":"\ud83d\ude00 a pair"}`, ""},
		{`{"body":"\\ud800 an escaped backslash, then text"}`, ""},
		{`{"body":"\u00e9 \u2028 \/"}`, ""},
		{`{"body":"\ud800"}`, `lone UTF-16 surrogate escape (\ud800)`},
		{`{"body":"\udc00 low half alone"}`, `lone UTF-16 surrogate escape (\udc00)`},
		{`{"body":"\ud83d\u0041"}`, `lone UTF-16 surrogate escape (\ud83d)`},
		{`{"body":"\ud83d"}`, `lone UTF-16 surrogate escape (\ud83d)`},
		{`{"body":"a\u0000b"}`, `NUL (\u0000)`},
		{"{\"body\":\"\xff\"}", "not valid UTF-8"},
		{`{"body":"\u12"}`, ""}, // not an escape at all: the JSON parser refuses it
	} {
		err := CheckText([]byte(c.text))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", c.text, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.text, err, c.want)
		}
	}
}
