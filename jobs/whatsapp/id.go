package whatsapp

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
