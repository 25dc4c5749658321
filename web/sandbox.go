package web

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/engine"
)

// The sandbox is ordo dev's stand-in for the WhatsApp Cloud API: the same
// request and answer shapes, and every send recorded in ordo.sandbox_sends so
// a first user sees what would have reached WhatsApp (on the admin page and
// at GET /sandbox/sends).

const insertSandboxSend = `
INSERT INTO ordo.sandbox_sends (phone_number_id, wamid, body)
VALUES ($1, 'wamid.sandbox.' || md5(random()::text), $2)
RETURNING wamid`

const listSandboxSends = `
SELECT id, phone_number_id, wamid, body, created_at FROM ordo.sandbox_sends ORDER BY id DESC LIMIT 100`

// SandboxSend is one message the sandbox channel was asked to send.
type SandboxSend struct {
	ID            int64           `json:"id"`
	PhoneNumberID string          `json:"phone_number_id"`
	WAMID         string          `json:"wamid"`
	Body          json.RawMessage `json:"body"`
	CreatedAt     time.Time       `json:"created_at"`
}

func (s *Server) routeSandbox(r *mux.Router) {
	r.HandleFunc("/sandbox/{version}/{phone_number_id}/messages", s.sandboxSend).Methods(http.MethodPost)
	r.HandleFunc("/sandbox/{phone_number_id}/messages", s.sandboxSend).Methods(http.MethodPost)
	r.HandleFunc("/sandbox/sends", s.sandboxSends).Methods(http.MethodGet)
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
	var fields map[string]any
	if json.Unmarshal(body, &fields) != nil || fields["messaging_product"] != "whatsapp" || fields["to"] == nil {
		graphError(http.StatusBadRequest, 100, "Invalid parameter")
		return
	}
	var wamid string
	if err := s.pool.QueryRow(r.Context(), insertSandboxSend, pathVar(r, "phone_number_id"), body).Scan(&wamid); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"messaging_product": "whatsapp",
		"contacts":          []map[string]any{{"input": fields["to"], "wa_id": fields["to"]}},
		"messages":          []map[string]string{{"id": wamid}},
	})
}

func (s *Server) sandboxSends(w http.ResponseWriter, r *http.Request) {
	sends, err := s.recentSandboxSends(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"sends": sends})
}

func (s *Server) recentSandboxSends(r *http.Request) ([]SandboxSend, error) {
	rows, _ := s.pool.Query(r.Context(), listSandboxSends)
	sends, err := pgx.CollectRows(rows, pgx.RowToStructByPos[SandboxSend])
	if err != nil {
		return nil, &engine.Error{Code: engine.CodeInternal, Message: "internal error", Err: err}
	}
	return sends, nil
}
