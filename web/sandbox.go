package web

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
)

// The sandbox is ordo dev's stand-in for the WhatsApp Cloud API: the same
// request and answer shapes, every send recorded by the engine so a first
// user sees what would have reached WhatsApp (on the admin page and at GET
// /sandbox/sends).

// routeSandbox mounts the sandbox for loopback hosts only: its sends list
// shows every tenant's messages, and a page on another site could reach it
// through DNS rebinding (a name of theirs resolving to 127.0.0.1) were any
// Host answered.
func (s *Server) routeSandbox(r *mux.Router) {
	loopback := func(h http.HandlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !loopbackHost(r.Host) {
				s.writeError(w, r, engine.Errorf(codeForbidden, "the sandbox answers only loopback hosts (127.0.0.1, ::1, localhost)"))
				return
			}
			h(w, r)
		})
	}
	r.Handle("/sandbox/{version}/{phone_number_id}/messages", loopback(s.sandboxSend)).Methods(http.MethodPost)
	r.Handle("/sandbox/{phone_number_id}/messages", loopback(s.sandboxSend)).Methods(http.MethodPost)
	r.Handle("/sandbox/sends", loopback(s.sandboxSends)).Methods(http.MethodGet)
	// Inbound media (issue 26): any id resolves to a small generated image
	// (sandbox_media.go). The file's route goes first: it would match the
	// id's.
	r.Handle("/sandbox/media/{media_id}", loopback(s.sandboxMediaFile)).Methods(http.MethodGet)
	r.Handle("/sandbox/{version}/{media_id}", loopback(s.sandboxMedia)).Methods(http.MethodGet)
}

// loopbackHost reports whether a Host header names this machine's loopback
// interface: 127.0.0.1, ::1 or localhost, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	switch strings.ToLower(host) {
	case "127.0.0.1", "::1", "localhost":
		return true
	}
	return false
}

// sandboxSend answers like the Cloud API: {"messages":[{"id":"wamid…"}]}, or
// {"error":{"code":…}} for what the real API would refuse.
func (s *Server) sandboxSend(w http.ResponseWriter, r *http.Request) {
	graphError := func(status, code int, msg string) {
		writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg, "type": "OAuthException"}})
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); !ok || tok == "" {
		graphError(http.StatusUnauthorized, 190, "Invalid OAuth access token")
		return
	}
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		graphError(http.StatusBadRequest, 100, "Invalid parameter")
		return
	}
	if whatsapp.IsReadReceipt(body) {
		// ordo's --mark-read: recorded and shown like a send.
		if _, err := s.engine.RecordSandboxSend(r.Context(), pathVar(r, "phone_number_id"), body); err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"success": true})
		return
	}
	// The same schema as at the door, so ordo dev refuses what WhatsApp
	// refuses, with WhatsApp's code and the path of the wrong field.
	if err := whatsapp.ValidateMessage(body); err != nil {
		graphError(http.StatusBadRequest, 100, "(#100) Invalid parameter: "+err.Error())
		return
	}
	var fields map[string]any
	if json.Unmarshal(body, &fields) != nil || fields["messaging_product"] != "whatsapp" || fields["to"] == nil {
		graphError(http.StatusBadRequest, 100, "Invalid parameter")
		return
	}
	wamid, err := s.engine.RecordSandboxSend(r.Context(), pathVar(r, "phone_number_id"), body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"messaging_product": "whatsapp",
		"contacts":          []map[string]any{{"input": fields["to"], "wa_id": fields["to"]}},
		"messages":          []map[string]string{{"id": wamid}},
	})
	s.sandboxStatuses(pathVar(r, "phone_number_id"), wamid, fields, body)
}

func (s *Server) sandboxSends(w http.ResponseWriter, r *http.Request) {
	sends, err := s.engine.SandboxSends(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"sends": sends})
}
