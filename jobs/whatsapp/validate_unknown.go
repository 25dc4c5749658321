package whatsapp

import (
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"slices"
	"sync"
)

// Forward compatibility (issue 26). Meta adds message types and
// interactive types; a schema that refused what it does not know would
// block real traffic the day Meta ships one. So a message whose "type", or
// whose interactive.type, the schema does not know is checked for its
// envelope only — every field of the message beside the unknown type's own
// object, exactly as for a known type — and passes; the caller logs it
// once per value (TypeWarnings). Known types keep their exact checks.

// stubInteractive stands in for an interactive object of an unknown
// interactive.type, so that the rest of the message is checked as usual.
var stubInteractive = map[string]any{
	"type":   "button",
	"body":   map[string]any{"text": "."},
	"action": map[string]any{"buttons": []any{map[string]any{"type": "reply", "reply": map[string]any{"id": "a", "title": "a"}}}},
}

// unknownType reports which type of message v the schema does not know:
// field "type" or "interactive.type" and its value; "" when it knows them
// all (or when the type is missing or not a string, which the schema
// reports exactly).
// typeName is what a type Meta adds looks like (image, order_details,
// call_permission_request): "" or "00" is a mistake, refused by the schema
// with the types it knows.
var typeName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

func (s *messageSchema) unknownType(v map[string]any) (field, value string) {
	t, ok := v["type"].(string)
	if !ok {
		return "", ""
	}
	if !slices.Contains(s.types, t) {
		if !typeName.MatchString(t) {
			return "", "" // not a type Meta could add: the schema refuses it
		}
		return "type", t
	}
	if t != "interactive" {
		return "", ""
	}
	in, _ := v["interactive"].(map[string]any)
	it, ok := in["type"].(string)
	if ok && !slices.Contains(s.interactiveTypes, it) && typeName.MatchString(it) {
		return "interactive.type", it
	}
	return "", ""
}

// envelope is v with the unknown type's object replaced by a known stub,
// for the schema to check everything else.
func envelope(v map[string]any, field, value string) map[string]any {
	c := make(map[string]any, len(v))
	for k, e := range v {
		c[k] = e
	}
	switch field {
	case "type":
		delete(c, value) // the unknown type's own object
		c["type"], c["text"] = "text", map[string]any{"body": "."}
	case "interactive.type":
		c["interactive"] = stubInteractive
	}
	return c
}

// UnknownType reports the type of raw, an outbound message, that ordo's
// schema does not know: field "type" or "interactive.type" and its value,
// or "" for a message of known types (or not a message at all).
func UnknownType(raw []byte) (field, value string) {
	var m struct {
		Type        any `json:"type"`
		Interactive struct {
			Type any `json:"type"`
		} `json:"interactive"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return "", ""
	}
	v := map[string]any{"type": m.Type, "interactive": map[string]any{"type": m.Interactive.Type}}
	return messageSchemaOnce().unknownType(v)
}

// maxTypeWarnings bounds the values a TypeWarnings remembers: past it,
// new values are no longer logged (a caller inventing types must not grow
// the process's memory).
const maxTypeWarnings = 1000

// TypeWarnings logs each message type (or interactive type) ordo's schema
// does not know once per process, when a message of it passes. The zero
// value is ready to use; it is safe for concurrent use.
type TypeWarnings struct {
	mu   sync.Mutex
	seen map[string]bool
}

// Note logs raw's unknown type, if it has one not logged before.
func (w *TypeWarnings) Note(ctx context.Context, logger *slog.Logger, raw []byte) {
	field, value := UnknownType(raw)
	if field == "" || logger == nil {
		return
	}
	key := field + "=" + value
	w.mu.Lock()
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	first := !w.seen[key] && len(w.seen) < maxTypeWarnings
	if first {
		w.seen[key] = true
	}
	w.mu.Unlock()
	if first {
		logger.WarnContext(ctx, "a message type ordo's schema does not know passed with envelope checks only (is it new at Meta?)",
			slog.String("field", field), slog.String("value", truncate(value, 64)))
	}
}
