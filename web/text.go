package web

// Text at the door. Postgres refuses some of what JSON can carry (a lone
// UTF-16 surrogate escape in jsonb, NUL in text), and Go's decoder silently
// turns a lone surrogate into U+FFFD, which would make two different ids one
// message. So a REST body is checked byte by byte before it is decoded, and
// ids are checked for what the contract allows.

import (
	"unicode"
	"unicode/utf8"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// MaxIDLength is the longest message_id or conversation_id, in characters.
const MaxIDLength = 256

// checkText refuses a body that Postgres's jsonb cannot hold as it is and
// that the decoder would repair in silence: invalid UTF-8, a \u0000 escape,
// a lone UTF-16 surrogate escape (whatsapp.CheckText, which the drain uses
// for handler replies too).
func checkText(body []byte) error {
	if err := whatsapp.CheckText(body); err != nil {
		return engine.Errorf(engine.CodeInvalid, "body: %s", err)
	}
	return nil
}

// checkID enforces the contract's ids (message_id, conversation_id): 1 to
// MaxIDLength characters, no control characters, no space at either end.
// An id is never altered to fit: it is taken as it is or refused.
func checkID(field, id string) error {
	switch {
	case id == "":
		return engine.Errorf(engine.CodeInvalid, "%s: required", field)
	case !utf8.ValidString(id):
		return engine.Errorf(engine.CodeInvalid, "%s: not valid UTF-8", field)
	case utf8.RuneCountInString(id) > MaxIDLength:
		return engine.Errorf(engine.CodeInvalid, "%s: longer than %d characters", field, MaxIDLength)
	}
	for _, r := range id {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return engine.Errorf(engine.CodeInvalid, "%s: must not contain NUL or other control characters", field)
		}
	}
	first, _ := utf8.DecodeRuneInString(id)
	last, _ := utf8.DecodeLastRuneInString(id)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return engine.Errorf(engine.CodeInvalid, "%s: must not start or end with a space", field)
	}
	return nil
}
