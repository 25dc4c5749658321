package web

import (
	"net/http"
	"strconv"

	"github.com/ordo-dev/ordo/engine"
)

func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := engine.DeadLetterFilter{TenantID: tenantOf(r).ID, ConversationID: q.Get("conversation_id"), State: q.Get("state")}
	if f.ConversationID != "" {
		if err := checkID("conversation_id", f.ConversationID); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	for name, dst := range map[string]*int64{"after": &f.After} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "%s: must be a non-negative integer", name))
				return
			}
			*dst = n
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "limit: must be 1 to 500"))
			return
		}
		f.Limit = n
	}
	list, err := s.engine.DeadLetters(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": list})
}

func (s *Server) getDeadLetter(w http.ResponseWriter, r *http.Request) {
	d, err := s.engine.DeadLetter(r.Context(), tenantOf(r).ID, pathVar(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) replayDeadLetter(w http.ResponseWriter, r *http.Request) {
	d, err := s.engine.Replay(r.Context(), tenantOf(r).ID, pathVar(r, "id"), engine.APIActor(tenantOf(r).Slug))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) skipDeadLetter(w http.ResponseWriter, r *http.Request) {
	d, err := s.engine.Skip(r.Context(), tenantOf(r).ID, pathVar(r, "id"), engine.APIActor(tenantOf(r).Slug))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}
