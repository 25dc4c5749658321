package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// repliesSeeds are one valid reply of every message type
// (jobs/whatsapp/testdata/messages); the odd shapes are in
// testdata/fuzz/FuzzParseReplies and testdata/fuzz/FuzzRepliesBody.
func repliesSeeds(f *testing.F) [][]byte {
	f.Helper()
	files, err := filepath.Glob(filepath.Join("whatsapp", "testdata", "messages", "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no example messages: %v", err)
	}
	var out [][]byte
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, bytes.TrimSpace(b))
	}
	return out
}

// storable reports whether Postgres's jsonb takes the JSON text b as it
// is: valid UTF-8, no \u0000 escape, no lone UTF-16 surrogate escape.
func storable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] != 'u' || i+6 > len(b) {
			i++
			continue
		}
		var r rune
		for _, c := range b[i+2 : i+6] {
			r <<= 4
			switch {
			case c >= '0' && c <= '9':
				r |= rune(c - '0')
			case c >= 'a' && c <= 'f':
				r |= rune(c-'a') + 10
			case c >= 'A' && c <= 'F':
				r |= rune(c-'A') + 10
			}
		}
		switch {
		case r == 0:
			return false
		case r >= 0xd800 && r < 0xdc00: // a high half: a low one must follow
			if i+12 > len(b) || b[i+6] != '\\' || b[i+7] != 'u' || !strings.ContainsAny(string(b[i+8]), "dD") || !strings.ContainsAny(string(b[i+9]), "cdefCDEF") {
				return false
			}
			i += 11
			continue
		case r >= 0xdc00 && r < 0xe000:
			return false
		}
		i += 5
	}
	return true
}

// FuzzParseReplies reads any handler answer as the drain does. Never a
// panic; a refusal is a permanent failure (a dead letter, whose reason
// speaks JSON, not Go); an accepted answer is a JSON array of at most
// MaxReplies objects, each one WhatsApp takes (the message schema), that
// Postgres can store, and that reads back the same when answered again, in
// any shape ({"replies": …}, n8n's items holding replies, n8n's items that
// are the messages).
func FuzzParseReplies(f *testing.F) {
	for _, r := range repliesSeeds(f) {
		f.Add(append(append([]byte(`{"replies":[`), r...), `]}`...))
		f.Add(append(append([]byte(`[{"replies":[`), r...), `]}]`...))
		// n8n's items: two items each holding replies, two message items.
		f.Add(append(append(append(append([]byte(`[{"replies":[`), r...), `]},{"replies":[`...), r...), `]}]`...))
		f.Add(append(append(append(append([]byte(`[`), r...), ','), r...), ']'))
	}
	f.Add([]byte(`[{"replies":[]},{"type":"text","text":{"body":"b"}}]`))
	f.Add([]byte(`[{"text":"no type"},{"replies":[]}]`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, answer []byte) {
		out, err := parseReplies(answer)
		if err != nil {
			var fl *failure
			if !errors.As(err, &fl) || fl.action != actDeadLetter {
				t.Fatalf("%q refused with %v (%T), want a dead letter", answer, err, err)
			}
			for _, w := range []string{"json: ", "Go ", "struct", "RawMessage", "[]interface", "map["} {
				if strings.Contains(fl.msg, w) {
					t.Fatalf("%q refused in Go's words: %q", answer, fl.msg)
				}
			}
			return
		}
		var replies []json.RawMessage
		if err := json.Unmarshal(out, &replies); err != nil {
			t.Fatalf("%q accepted as %q, not a JSON array: %v", answer, out, err)
		}
		if len(replies) > MaxReplies {
			t.Fatalf("%q accepted with %d replies", answer, len(replies))
		}
		for i, r := range replies {
			if err := whatsapp.ValidateMessage(r); err != nil {
				t.Fatalf("%q accepted; reply %d %s fails the schema: %v", answer, i, r, err)
			}
		}
		if !storable(out) {
			t.Fatalf("%q accepted as %q, which Postgres's jsonb refuses", answer, out)
		}
		agains := [][]byte{
			append(append([]byte(`{"replies":`), out...), '}'),
			append(append([]byte(`[{"replies":`), out...), `}]`...),
		}
		if len(replies) > 0 { // the replies as n8n's items, one message each
			agains = append(agains, out)
		}
		for _, again := range agains {
			back, err := parseReplies(again)
			if err != nil || !bytes.Equal(back, out) {
				t.Fatalf("%q accepted as %s; answered again as %s it reads %s, %v", answer, out, again, back, err)
			}
		}
	})
}

// FuzzRepliesBody puts any one reply in a {"replies":[…]} body, the shape
// of a sync handler's answer and of POST /v1/messages/{id}/replies. A
// reply that is one JSON object is accepted exactly when the message schema
// takes it and Postgres can store it, and comes out as itself, compacted.
func FuzzRepliesBody(f *testing.F) {
	for _, r := range repliesSeeds(f) {
		f.Add(r)
	}
	f.Fuzz(func(t *testing.T, reply []byte) {
		body := append(append([]byte(`{"replies":[`), reply...), `]}`...)
		out, err := parseReplies(body)
		trimmed := bytes.TrimSpace(reply)
		if !json.Valid(reply) || len(trimmed) == 0 || trimmed[0] != '{' {
			return // not one object: the body is some other shape
		}
		valid := whatsapp.ValidateMessage(reply) == nil && storable(reply)
		if (err == nil) != valid {
			t.Fatalf("reply %q: parsed with %v; the schema and Postgres say valid=%t", reply, err, valid)
		}
		if err != nil {
			return
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, reply); err != nil {
			t.Fatal(err)
		}
		if want := "[" + compact.String() + "]"; string(out) != want {
			t.Fatalf("reply %q came out as %s, want %s", reply, out, want)
		}
	})
}
