package whatsapp

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// An outbound message is checked when ordo accepts it (REST, a handler's
// replies) rather than when Meta refuses it: a refusal at send time is a
// permanent error that halts the conversation behind it, while a 400 at the
// door reaches the caller who can fix it. The rules are ordo's own JSON
// Schema (message.schema.json, draft 2020-12, written from Meta's Cloud API
// reference) plus the few checks a schema cannot say, below.

//go:embed message.schema.json
var messageSchemaJSON []byte

// messageSchemaURL names the embedded schema inside the compiler; it is
// never fetched.
const messageSchemaURL = "ordo:whatsapp/message.schema.json"

// messageSchemaOnce compiles the embedded schema on first use. The schema is
// a constant of the program, so a schema that does not compile is a bug
// caught by the package's tests, and a panic here is like
// regexp.MustCompile's.
var messageSchemaOnce = sync.OnceValue(func() *messageSchema {
	s, err := compileMessageSchema(messageSchemaJSON)
	if err != nil {
		panic("whatsapp: embedded message schema: " + err.Error())
	}
	return s
})

// MessageError says why the Cloud API would refuse an outbound message: the
// JSON path of the first wrong field and the rule it breaks, in plain words.
type MessageError struct {
	// Path is the field's JSON path, e.g. "text.body" or
	// "interactive.action.buttons[2].reply.title"; empty for the message as
	// a whole.
	Path string
	// Rule is what is wrong with it, e.g. "required", "longer than 4096
	// characters", "must be one of text, template, …".
	Rule string
}

// Error is "<path>: <rule>", or "message: <rule>" for the whole message.
func (e *MessageError) Error() string {
	if e.Path == "" {
		return "message: " + e.Rule
	}
	return e.Path + ": " + e.Rule
}

// IsInvalidMessage reports whether err is (or wraps) a *MessageError.
func IsInvalidMessage(err error) bool {
	var me *MessageError
	return errors.As(err, &me)
}

// ValidateMessage checks raw, one outbound message object as the Cloud API
// takes it ({"type":"text","text":{"body":"…"}}, with or without
// messaging_product, to, recipient_type and biz_opaque_callback_data),
// against ordo's message schema. It returns nil or a *MessageError naming
// the first problem: the outermost one, so that a missing or wrong "type" is
// reported before the fields that depend on it.
func ValidateMessage(raw []byte) error {
	v, p := decodeMessage(raw)
	if p != nil {
		return p.err(v)
	}
	s := messageSchemaOnce()
	if field, value := s.unknownType(v.(map[string]any)); field != "" {
		// A type Meta added after this schema: its envelope only
		// (validate_unknown.go).
		if err := s.validate(envelope(v.(map[string]any), field, value)); err != nil {
			return err
		}
		return nil
	}
	return s.validate(v)
}

// MessageTypes returns the message types ordo accepts, in the schema's order.
func MessageTypes() []string {
	return slices.Clone(messageSchemaOnce().types)
}

// decodeMessage parses raw as exactly one JSON value, keeping numbers
// exact, and refuses a number no float64 can hold: Meta reads 1e999 as
// infinity, and Go's encoding/json refuses to decode it at all.
func decodeMessage(raw []byte) (any, *problem) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &problem{rule: "not valid JSON"}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &problem{rule: "not valid JSON (more after the message)"}
	}
	if _, ok := v.(map[string]any); !ok {
		return v, &problem{rule: "must be a JSON object"}
	}
	var found []problem
	finiteNumbers(v, nil, &found)
	if len(found) > 0 {
		return v, &first(found)[0]
	}
	return v, nil
}

func finiteNumbers(v any, path []string, found *[]problem) {
	switch v := v.(type) {
	case json.Number:
		// Only overflow is refused: an underflow (1e-999) is a tiny number
		// that rounds to zero, which WhatsApp reads the same way.
		if f, err := strconv.ParseFloat(string(v), 64); err != nil && math.IsInf(f, 0) {
			*found = append(*found, problem{path: slices.Clone(path), rule: "number out of range"})
		}
	case map[string]any:
		for k, e := range v {
			finiteNumbers(e, append(path, k), found)
		}
	case []any:
		for i, e := range v {
			finiteNumbers(e, append(path, strconv.Itoa(i)), found)
		}
	}
}

// problem is one rule broken at one place; path holds JSON Pointer tokens
// (object keys and array indexes as decimal strings).
type problem struct {
	path []string
	rule string
	rank int
}

// Ranks order problems at the same depth: a value of the wrong kind
// explains the rest, then what is missing, then everything else.
const (
	rankKind = iota
	rankRequired
	rankOther
)

func (p *problem) err(root any) *MessageError {
	return &MessageError{Path: formatPath(root, p.path), Rule: p.rule}
}

// first sorts problems outermost first and returns them; the order is fixed
// so that the same message always gets the same answer.
func first(ps []problem) []problem {
	slices.SortFunc(ps, func(a, b problem) int {
		if len(a.path) != len(b.path) {
			return len(a.path) - len(b.path)
		}
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		if c := slices.Compare(a.path, b.path); c != 0 {
			return c
		}
		return strings.Compare(a.rule, b.rule)
	})
	return ps
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// formatPath writes tokens as a JavaScript-style path: text.body,
// interactive.action.buttons[2].reply.title, contacts[0]["odd key"].
// Whether a token is an index is read off the value it walks, not guessed
// from its digits.
func formatPath(root any, tokens []string) string {
	var b strings.Builder
	cur := root
	for _, t := range tokens {
		switch c := cur.(type) {
		case []any:
			b.WriteString("[" + t + "]")
			if i, err := strconv.Atoi(t); err == nil && i >= 0 && i < len(c) {
				cur = c[i]
			} else {
				cur = nil
			}
			continue
		case map[string]any:
			cur = c[t]
		default:
			cur = nil
		}
		switch {
		case !plainKey.MatchString(t):
			b.WriteString("[" + strconv.Quote(t) + "]")
		case b.Len() > 0:
			b.WriteString("." + t)
		default:
			b.WriteString(t)
		}
	}
	return b.String()
}

// messageSchema is the compiled schema and what the error translation
// needs from its source.
type messageSchema struct {
	schema *jsonschema.Schema
	// messages maps a subschema's JSON Pointer to its "x-message": the rule
	// reported, in ordo's words, when that subschema fails.
	messages map[string]string
	// types are the accepted message types, from the schema's type enum,
	// and interactiveTypes the interactive types ($defs.interactive's).
	types            []string
	interactiveTypes []string
}

func compileMessageSchema(src []byte) (*messageSchema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(messageSchemaURL, doc); err != nil {
		return nil, fmt.Errorf("add: %w", err)
	}
	sch, err := c.Compile(messageSchemaURL)
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	s := &messageSchema{schema: sch, messages: map[string]string{}}
	collectMessages(doc, "", s.messages)
	root, _ := doc.(map[string]any)
	props, _ := root["properties"].(map[string]any)
	typ, _ := props["type"].(map[string]any)
	enum, _ := typ["enum"].([]any)
	for _, t := range enum {
		if t, ok := t.(string); ok {
			s.types = append(s.types, t)
		}
	}
	if len(s.types) == 0 {
		return nil, errors.New("properties.type.enum: no message types")
	}
	defs, _ := root["$defs"].(map[string]any)
	inter, _ := defs["interactive"].(map[string]any)
	iprops, _ := inter["properties"].(map[string]any)
	ityp, _ := iprops["type"].(map[string]any)
	ienum, _ := ityp["enum"].([]any)
	for _, t := range ienum {
		if t, ok := t.(string); ok {
			s.interactiveTypes = append(s.interactiveTypes, t)
		}
	}
	if len(s.interactiveTypes) == 0 {
		return nil, errors.New("$defs.interactive.properties.type.enum: no interactive types")
	}
	return s, nil
}

// collectMessages records every "x-message" of the schema under its
// subschema's JSON Pointer, the form jsonschema reports a failing
// subschema's location in.
func collectMessages(v any, ptr string, into map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		if m, ok := v["x-message"].(string); ok {
			into[ptr] = m
		}
		for k, e := range v {
			collectMessages(e, ptr+"/"+escapePointer(k), into)
		}
	case []any:
		for i, e := range v {
			collectMessages(e, ptr+"/"+strconv.Itoa(i), into)
		}
	}
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// validate runs the schema and the checks it cannot express over v, a
// decoded JSON object, and returns the first problem.
func (s *messageSchema) validate(v any) error {
	var found []problem
	if err := s.schema.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return &MessageError{Rule: "not valid"}
		}
		s.translate(ve, &found)
	}
	found = append(found, s.crossChecks(v)...)
	if len(found) == 0 {
		return nil
	}
	return first(found)[0].err(v)
}

// translate turns jsonschema's error tree into problems. A subschema with
// an x-message speaks for everything under it; containers (the root, $ref,
// allOf) pass through to their causes; every other keyword is a leaf worded
// here, never with the library's own text, which names schema locations.
func (s *messageSchema) translate(e *jsonschema.ValidationError, found *[]problem) {
	switch e.ErrorKind.(type) {
	case *kind.Schema, *kind.Reference, *kind.AllOf, *kind.Group:
	default:
		if m, ok := s.messages[fragment(e.SchemaURL)]; ok {
			*found = append(*found, problem{path: e.InstanceLocation, rule: m, rank: rankOf(e.ErrorKind)})
			return
		}
	}
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			s.translate(c, found)
		}
		return
	}
	at := func(extra ...string) []string { return append(slices.Clip(e.InstanceLocation), extra...) }
	add := func(path []string, rank int, format string, args ...any) {
		*found = append(*found, problem{path: path, rule: fmt.Sprintf(format, args...), rank: rank})
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			add(at(m), rankRequired, "required")
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			add(at(p), rankOther, "not allowed")
		}
	case *kind.FalseSchema:
		add(at(), rankOther, "not allowed")
	case *kind.Type:
		add(at(), rankKind, "must be %s", typeWords(k.Want))
	case *kind.Enum:
		add(at(), rankKind, "must be one of %s", valueWords(k.Want))
	case *kind.Const:
		add(at(), rankKind, "must be %s", valueWords([]any{k.Want}))
	case *kind.MinLength:
		if k.Want == 1 {
			add(at(), rankOther, "must not be empty")
		} else {
			add(at(), rankOther, "shorter than %d characters", k.Want)
		}
	case *kind.MaxLength:
		add(at(), rankOther, "longer than %d characters", k.Want)
	case *kind.MinItems:
		if k.Want == 1 {
			add(at(), rankOther, "must not be empty")
		} else {
			add(at(), rankOther, "fewer than %d items", k.Want)
		}
	case *kind.MaxItems:
		add(at(), rankOther, "more than %d items", k.Want)
	case *kind.MinProperties:
		add(at(), rankOther, "must not be empty")
	case *kind.Minimum:
		add(at(), rankOther, "less than %s", k.Want.RatString())
	case *kind.Maximum:
		add(at(), rankOther, "greater than %s", k.Want.RatString())
	case *kind.Pattern:
		add(at(), rankOther, "not in the expected form")
	default:
		add(at(), rankOther, "not valid")
	}
}

func rankOf(k jsonschema.ErrorKind) int {
	switch k.(type) {
	case *kind.Type, *kind.Enum, *kind.Const:
		return rankKind
	case *kind.Required:
		return rankRequired
	}
	return rankOther
}

// fragment returns the JSON Pointer part of a schema location
// ("ordo:…json#/$defs/media" → "/$defs/media").
func fragment(schemaURL string) string {
	_, f, _ := strings.Cut(schemaURL, "#")
	if u, err := url.PathUnescape(f); err == nil {
		return u
	}
	return f
}

func typeWords(want []string) string {
	words := make([]string, 0, len(want))
	for _, w := range want {
		switch w {
		case "object":
			words = append(words, "an object")
		case "array":
			words = append(words, "an array")
		case "string":
			words = append(words, "a string")
		case "number":
			words = append(words, "a number")
		case "integer":
			words = append(words, "a whole number")
		case "boolean":
			words = append(words, "true or false")
		default:
			words = append(words, w)
		}
	}
	return strings.Join(words, " or ")
}

func valueWords(vs []any) string {
	words := make([]string, 0, len(vs))
	for _, v := range vs {
		if s, ok := v.(string); ok {
			words = append(words, s)
			continue
		}
		b, _ := json.Marshal(v)
		words = append(words, string(b))
	}
	return strings.Join(words, ", ")
}
