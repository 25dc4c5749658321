package web

// Text at the door. Postgres refuses some of what JSON can carry (a lone
// UTF-16 surrogate escape in jsonb, NUL in text), and Go's decoder silently
// turns a lone surrogate into U+FFFD, which would make two different ids one
// message. So a REST body is checked byte by byte before it is decoded, and
// ids are checked for what the contract allows, by the rule every way in
// shares.

import (
	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

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

// checkID holds an id (message_id, conversation_id, any key a request
// names) to ordo's one rule, whatsapp.CheckID, and words a refusal as the
// contract's 400, naming the field. ordo.enqueue_message applies the same rule
// in SQL (ordo.id_problem); this answers before a transaction.
func checkID(field, id string) error {
	if err := whatsapp.CheckID(id); err != nil {
		return engine.Errorf(engine.CodeInvalid, "%s: %s", field, err)
	}
	return nil
}
