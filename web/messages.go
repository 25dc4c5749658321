package web

import (
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/gorilla/mux"

	"github.com/ordo-dev/ordo/engine"
)

// envelopeFields are the REST body's own fields; every other field of an
// outbound message is the WhatsApp message itself and passes through.
var envelopeFields = []string{"message_id", "conversation_id", "direction", "payload"}

// idempotencyKeyHeader stands for the body's message_id when it has none
// (n8n's HTTP Request node and most HTTP clients can set it).
const idempotencyKeyHeader = "Idempotency-Key"

// parseNewMessage turns a POST /v1/messages body into an engine message;
// idemKey is the request's Idempotency-Key header ("" for none).
func parseNewMessage(tenant string, body []byte, idemKey string) (engine.NewMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return engine.NewMessage{}, engine.Errorf(engine.CodeInvalid, "body: must be a JSON object")
	}
	m := engine.NewMessage{Tenant: tenant}
	for name, dst := range map[string]*string{"message_id": &m.MessageID, "conversation_id": &m.ConversationID, "direction": &m.Direction} {
		raw, ok := fields[name]
		if !ok || string(raw) == "null" {
			continue
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return engine.NewMessage{}, engine.Errorf(engine.CodeInvalid, "%s: must be a string", name)
		}
	}
	switch {
	case idemKey == "":
	case m.MessageID == "":
		if err := checkID(idempotencyKeyHeader, idemKey); err != nil {
			return engine.NewMessage{}, err
		}
		m.MessageID = idemKey
	case m.MessageID != idemKey:
		return engine.NewMessage{}, engine.Errorf(engine.CodeInvalid, "%s: differs from the body's message_id (give one, or the same in both)", idempotencyKeyHeader)
	}
	if err := checkID("message_id", m.MessageID); err != nil {
		return engine.NewMessage{}, err
	}
	if err := checkID("conversation_id", m.ConversationID); err != nil {
		return engine.NewMessage{}, err
	}
	if m.Direction == "inbound" {
		p := fields["payload"]
		if len(p) == 0 || p[0] != '{' {
			return engine.NewMessage{}, engine.Errorf(engine.CodeInvalid, "payload: an inbound message carries its original event as a JSON object")
		}
		m.Payload = p
		return m, nil
	}
	for _, f := range envelopeFields {
		delete(fields, f)
	}
	if _, ok := fields["to"]; !ok {
		fields["to"], _ = json.Marshal(m.ConversationID)
	}
	if _, ok := fields["type"]; !ok {
		return engine.NewMessage{}, engine.Errorf(engine.CodeInvalid, "type: required for an outbound message (text, template, image, …)")
	}
	// The stored payload is what will be sent: engine.Ingest checks it as
	// WhatsApp would, so a mistake is the caller's 400 and not a halted
	// conversation.
	m.Payload, _ = json.Marshal(fields)
	return m, nil
}

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) {
	body, err := readJSONBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	m, err := parseNewMessage(tenantOf(r).Slug, body, r.Header.Get(idempotencyKeyHeader))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	m.KeyHash = keyToCheck(r)
	a, err := s.engine.Ingest(r.Context(), m)
	if err != nil {
		if engine.ErrorCode(err) == engine.CodeUnauthorized && m.KeyHash != nil {
			s.recent.forget([32]byte(m.KeyHash))
		}
		s.writeError(w, r, err)
		return
	}
	status := http.StatusAccepted
	if a.Duplicate {
		status = http.StatusOK
	}
	writeJSON(w, status, a)
}

// pathVar returns a decoded path variable (the router matches encoded paths,
// so ids may contain '/' and other reserved characters).
func pathVar(r *http.Request, name string) string {
	v, err := url.PathUnescape(mux.Vars(r)[name])
	if err != nil {
		return mux.Vars(r)[name]
	}
	return v
}

func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) {
	id := pathVar(r, "message_id")
	if err := checkID("message_id", id); err != nil {
		s.writeError(w, r, err)
		return
	}
	m, err := s.engine.Message(r.Context(), tenantOf(r).ID, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) getConversation(w http.ResponseWriter, r *http.Request) {
	id := pathVar(r, "conversation_id")
	if err := checkID("conversation_id", id); err != nil {
		s.writeError(w, r, err)
		return
	}
	c, err := s.engine.Conversation(r.Context(), tenantOf(r).ID, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}
