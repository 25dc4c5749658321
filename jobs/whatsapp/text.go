package whatsapp

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

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
