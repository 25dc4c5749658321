package whatsapp

// Text and ids at the door: what ordo accepts as JSON text (CheckText) and
// as an id (CheckID), on every way in.

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxIDLength is the longest id, in characters (not bytes).
const MaxIDLength = 256

// CheckID is ordo's one rule for an id: a message_id or conversation_id,
// and every other key a request names (a wamid, a phone number id, a media
// id, a lease key). An id is 1 to MaxIDLength characters of valid UTF-8;
// none is a control character (U+0000–U+001F, U+007F–U+009F) or a line or
// paragraph separator (U+2028, U+2029); the first and the last are not a
// space (unicode.IsSpace). An id is taken as it is or refused, never
// trimmed or repaired.
//
// The error is the problem without the field ("required", "must be 1 to
// 256 printable characters, not 257", …); callers prefix the field. Its SQL
// twin, ordo.id_problem (sql/functions/id_problem.sql), answers the same
// words for the same ids, and ordo.enqueue_message applies it whoever
// calls: this check only lets REST and the webhook answer 400 before a
// transaction. web/ids_test.go holds both to one table and to every
// character of the Basic Multilingual Plane.
func CheckID(id string) error {
	switch {
	case id == "":
		return errors.New("required")
	case !utf8.ValidString(id):
		return errors.New("not valid UTF-8")
	}
	if n := utf8.RuneCountInString(id); n > MaxIDLength {
		return fmt.Errorf("must be 1 to %d printable characters, not %d", MaxIDLength, n)
	}
	at, last := 0, rune(0)
	for _, r := range id {
		at++
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return fmt.Errorf("must be 1 to %d printable characters, without control characters or line separators: U+%04X at character %d", MaxIDLength, r, at)
		}
		last = r
	}
	if first, _ := utf8.DecodeRuneInString(id); unicode.IsSpace(first) {
		return fmt.Errorf("must be 1 to %d printable characters, without a space at either end: U+%04X at character 1", MaxIDLength, first)
	}
	if unicode.IsSpace(last) {
		return fmt.Errorf("must be 1 to %d printable characters, without a space at either end: U+%04X at character %d", MaxIDLength, last, at)
	}
	return nil
}

// metaID is a string of Meta's webhook that ordo keeps as an id. It decodes
// as a string, except that a lone UTF-16 surrogate escape in it is refused:
// encoding/json would turn it into U+FFFD, and two different ids would
// become one (a new message taken for a duplicate of another). The
// webhook's text, by contrast, is repaired rather than refused.
type metaID string

// UnmarshalJSON implements json.Unmarshaler.
func (s *metaID) UnmarshalJSON(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("an id is not valid UTF-8")
	}
	if checkText(b, false) != nil {
		return errors.New("an id is not valid Unicode (a lone UTF-16 surrogate escape)")
	}
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = metaID(v)
	return nil
}

// CheckText refuses JSON text that Postgres's jsonb cannot hold as it is,
// and that encoding/json would otherwise repair in silence (U+FFFD for
// each bad byte and each lone surrogate): bytes that are not UTF-8, a
// \u0000 escape, and a \uXXXX escape of a UTF-16 surrogate without its
// other half. A message the schema accepts is checked with it before it is
// stored: a handler's reply refused here is a dead letter that says why; a
// reply stored as is would fail the write of its step.
func CheckText(b []byte) error { return checkText(b, true) }

// checkText is CheckText, refusing a \u0000 escape only when nul is set.
func checkText(b []byte, nul bool) error {
	if !utf8.Valid(b) {
		return errors.New("not valid UTF-8")
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
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
		case r == 0 && nul:
			return fmt.Errorf("a NUL (\\u0000) at byte %d: text must not contain NUL characters", i)
		case r >= 0xd800 && r < 0xdc00:
			if lo, ok := hex4(b, i+8); ok && i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' && lo >= 0xdc00 && lo < 0xe000 {
				i += 11 // a pair: one character
				continue
			}
			fallthrough
		case r >= 0xdc00 && r < 0xe000:
			return fmt.Errorf("a lone UTF-16 surrogate escape (\\u%s) at byte %d: text must be valid Unicode", b[i+2:i+6], i)
		}
		i += 5
	}
	return nil
}

// hex4 reads the four hex digits at b[at:], if there are four.
func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}
