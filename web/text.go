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
)

// MaxIDLength is the longest message_id or conversation_id, in characters.
const MaxIDLength = 256

// checkText refuses a body that is not valid UTF-8 or that escapes a lone
// UTF-16 surrogate (\ud800 without its pair, or a pair's second half alone).
func checkText(body []byte) error {
	if !utf8.Valid(body) {
		return engine.Errorf(engine.CodeInvalid, "body: not valid UTF-8")
	}
	if at := loneSurrogate(body); at >= 0 {
		return engine.Errorf(engine.CodeInvalid, "body: a lone UTF-16 surrogate escape (\\u%s) at byte %d: text must be valid Unicode", body[at+2:at+6], at)
	}
	return nil
}

// loneSurrogate returns the offset of the first \uXXXX escape in the JSON
// text b that is a surrogate without its other half, or -1. A backslash is
// only ever inside a string in valid JSON, and each escape is skipped whole,
// so "\\ud800" (an escaped backslash, then text) is not mistaken for one.
func loneSurrogate(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 >= len(b) {
			return -1
		}
		if b[i+1] != 'u' {
			i++ // a two-byte escape: \" \\ \/ \b \f \n \r \t
			continue
		}
		r, ok := hex4(b, i+2)
		if !ok {
			i++
			continue
		}
		switch {
		case 0xDC00 <= r && r <= 0xDFFF:
			return i // a second half first
		case 0xD800 <= r && r <= 0xDBFF:
			if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, ok := hex4(b, i+8); ok && 0xDC00 <= lo && lo <= 0xDFFF {
					i += 11
					continue
				}
			}
			return i
		}
		i += 5
	}
	return -1
}

// hex4 reads the four hex digits at b[at:].
func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
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
