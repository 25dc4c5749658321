package web

// The console's finding and fixing: dead letters by filter with a count
// preview and the bulk replay or skip, the message search and a message's
// page, a conversation's timeline, the live tiles and the audit log.

import (
	"cmp"
	"net/http"

	"github.com/ordo-dev/ordo/engine"
)

func deadLetterFilter(tenant, reason, minAge string) (engine.AdminDeadLetterFilter, error) {
	age, err := parseAge("min_age", minAge)
	if err != nil {
		return engine.AdminDeadLetterFilter{}, err
	}
	return engine.AdminDeadLetterFilter{Tenant: tenant, Reason: reason, MinAge: age}, nil
}

func (s *Server) adminDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := deadLetterFilter(q.Get("tenant"), q.Get("reason"), q.Get("min_age"))
	if err == nil {
		f.State = q.Get("state")
		f.After, err = queryInt(r, "after")
	}
	if err == nil {
		var n int64
		n, err = queryInt(r, "limit")
		f.Limit = int(min(n, 1000))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.engine.AdminDeadLetters(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// adminBulk replays or skips every open dead letter a filter selects (up
// to engine.BulkMax per request), conversation by conversation in order.
func (s *Server) adminBulk(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Action string `json:"action"`
		Tenant string `json:"tenant"`
		Reason string `json:"reason"`
		MinAge string `json:"min_age"`
	}
	if err := readAdminJSON(w, r, &in); err != nil {
		s.writeError(w, r, err)
		return
	}
	f, err := deadLetterFilter(in.Tenant, in.Reason, in.MinAge)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.engine.BulkResolve(r.Context(), f, in.Action, adminActor(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) adminSearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := engine.AdminSearch{Q: q.Get("q"), Tenant: q.Get("tenant"), Status: q.Get("status"), Direction: q.Get("direction"), Cursor: q.Get("cursor")}
	var err error
	if f.Q != "" {
		err = checkID("q", f.Q)
	}
	if err == nil {
		f.Since, err = queryTime(r, "since")
	}
	if err == nil {
		f.Until, err = queryTime(r, "until")
	}
	if err == nil {
		var n int64
		n, err = queryInt(r, "limit")
		f.Limit = int(min(n, 1000))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.engine.AdminSearchMessages(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// adminMessage is a message's page: content, steps, attempts, sends, dead
// letters.
func (s *Server) adminMessage(w http.ResponseWriter, r *http.Request) {
	id := pathVar(r, "message_id")
	if err := checkID("message_id", id); err != nil {
		s.writeError(w, r, err)
		return
	}
	m, err := s.engine.AdminMessage(r.Context(), pathVar(r, "slug"), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) adminTimeline(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	conv := q.Get("conversation_id")
	err := checkID("conversation_id", conv)
	// Without after_seq the timeline opens around the head.
	after := int64(-1)
	if err == nil && q.Has("after_seq") {
		after, err = queryInt(r, "after_seq")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	tl, err := s.engine.AdminTimeline(r.Context(), q.Get("tenant"), conv, after)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, tl)
}

func (s *Server) adminTiles(w http.ResponseWriter, r *http.Request) {
	t, err := s.engine.AdminTiles(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) adminAudit(w http.ResponseWriter, r *http.Request) {
	before, err := queryInt(r, "before")
	var limit int64
	if err == nil {
		limit, err = queryInt(r, "limit")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	f := engine.AuditFilter{Tenant: q.Get("tenant"), Actor: q.Get("actor"), Action: q.Get("action"), Before: before, Limit: int(min(limit, 1000))}
	list, err := s.engine.AuditLog(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var next int64
	if n := cmp.Or(f.Limit, engine.AuditLimitDefault); len(list) == n {
		next = list[len(list)-1].ID
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": list, "next": next})
}
