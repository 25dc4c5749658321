package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// parseReplies reads a POST /v1/messages/{id}/replies body,
// {"replies": [<WhatsApp message>, …]}, checking each reply as a sync
// handler's answer is checked: the first wrong field is named by its JSON
// path (replies[1].text.body).
func parseReplies(body []byte) (json.RawMessage, error) {
	var v struct {
		Replies *[]json.RawMessage `json:"replies"`
	}
	if err := json.Unmarshal(body, &v); err != nil || !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		return nil, engine.Errorf(engine.CodeInvalid, `body: must be a JSON object {"replies": [...]}`)
	}
	if v.Replies == nil {
		return nil, engine.Errorf(engine.CodeInvalid, `replies: required (an array of WhatsApp messages; [] for none)`)
	}
	replies := *v.Replies
	if len(replies) > jobs.MaxReplies {
		return nil, engine.Errorf(engine.CodeInvalid, "replies: at most %d", jobs.MaxReplies)
	}
	for i, reply := range replies {
		if t := bytes.TrimSpace(reply); len(t) == 0 || t[0] != '{' {
			return nil, engine.Errorf(engine.CodeInvalid, "replies[%d]: must be a JSON object", i)
		}
		if err := whatsapp.ValidateMessage(reply); err != nil {
			return nil, engine.Errorf(engine.CodeInvalid, "%s", replyPath(i, err))
		}
	}
	out, _ := json.Marshal(replies)
	return out, nil
}

// replyPath puts reply i's path in front of a validation error's.
func replyPath(i int, err error) string {
	if me, ok := err.(*whatsapp.MessageError); ok {
		if me.Path == "" {
			return fmt.Sprintf("replies[%d]: %s", i, me.Rule)
		}
		sep := "."
		if me.Path[0] == '[' {
			sep = ""
		}
		return fmt.Sprintf("replies[%d]%s%s: %s", i, sep, me.Path, me.Rule)
	}
	return fmt.Sprintf("replies[%d]: %v", i, err)
}

// postReplies is POST /v1/messages/{message_id}/replies: an async handler's
// replies for an inbound message (engine.PostReplies does the transaction).
func (s *Server) postReplies(w http.ResponseWriter, r *http.Request) {
	id := pathVar(r, "message_id")
	if err := checkID("message_id", id); err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := readJSONBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	replies, err := parseReplies(body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	a, err := s.engine.PostReplies(r.Context(), tenantOf(r).ID, id, replies)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusAccepted
	if a.Duplicate {
		status = http.StatusOK
	}
	writeJSON(w, status, a)
}
