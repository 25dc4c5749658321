package web

// The admin page is the operator's view across tenants: who is configured,
// which conversations need attention, what happened to recent messages, the
// open dead letters with Replay and Skip, and — under ordo dev — what the
// sandbox channel "sent". It is plain HTML, CSS and a little vanilla JS
// embedded in the binary (no build step, no CDN) on top of a few JSON
// endpoints under /admin/api/.
//
// Everything under /admin sits behind HTTP basic auth with
// Config.AdminPassword. Because browsers replay basic credentials on
// cross-site requests too, the state-changing endpoints are POST-only and
// require the X-Ordo-Admin header the page's fetch sets (a cross-site form
// cannot set it, and a cross-site fetch that does is stopped by CORS) and,
// when the browser sends one, a same-host Origin.

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/engine"
)

//go:embed admin
var adminAssets embed.FS

// adminHeader must be set (to "1") on every state-changing admin request.
const adminHeader = "X-Ordo-Admin"

// Operator queries read across tenants on purpose. Each list is bounded: the
// page is refreshed every few seconds and must stay cheap on a busy database.

const adminTenantsQuery = `
SELECT t.slug, t.name, t.handler_url IS NOT NULL, t.on_dead_letter, t.ambiguous, t.max_attempts,
       t.send_rate, t.pair_gap_ms, t.sending_paused_at, coalesce(t.sending_paused_reason, ''),
       coalesce((SELECT array_agg(cr.name ORDER BY cr.name) FROM ordo.credentials cr WHERE cr.tenant_id = t.id), '{}'),
       (SELECT count(*) FROM ordo.dead_letters d WHERE d.tenant_id = t.id AND d.resolved_at IS NULL),
       t.created_at
FROM ordo.tenants t
ORDER BY t.slug
LIMIT 200`

// Halted conversations first, then the biggest backlogs.
const adminAttentionQuery = `
SELECT t.slug, c.conversation_id, c.head_seq, c.last_seq, c.last_seq - c.head_seq, c.halted_at
FROM ordo.conversations c
JOIN ordo.tenants t ON t.id = c.tenant_id
WHERE c.halted_at IS NOT NULL OR c.last_seq > c.head_seq
ORDER BY c.halted_at IS NULL, c.last_seq - c.head_seq DESC, c.id
LIMIT 50`

const adminMessagesQuery = `
SELECT t.slug, c.conversation_id, m.message_id, m.seq, m.direction, m.status, m.created_at, m.finished_at,
       (SELECT count(*) FROM ordo.steps s WHERE s.message_pk = m.id AND s.kind = 'send' AND s.status = 'done'),
       coalesce((SELECT s.errors -> -1 ->> 'error' FROM ordo.steps s
                 WHERE s.message_pk = m.id AND jsonb_array_length(s.errors) > 0
                 ORDER BY s.idx DESC LIMIT 1), '')
FROM ordo.messages m
JOIN ordo.tenants t ON t.id = m.tenant_id
JOIN ordo.conversations c ON c.id = m.conversation_pk
ORDER BY m.id DESC
LIMIT 50`

// Open dead letters oldest first, then the recently resolved ones so an
// operator sees what a Replay or Skip did.
const adminDeadLettersQuery = `
(SELECT d.id::text, t.slug, m.message_id, c.conversation_id, m.seq, m.status, d.reason,
        coalesce(d.errors -> -1 ->> 'error', ''), jsonb_array_length(d.errors), d.created_at, d.resolved_at,
        coalesce(d.resolution, '')
 FROM ordo.dead_letters d
 JOIN ordo.tenants t ON t.id = d.tenant_id
 JOIN ordo.messages m ON m.id = d.message_pk
 JOIN ordo.conversations c ON c.id = m.conversation_pk
 WHERE d.resolved_at IS NULL
 ORDER BY d.id LIMIT 100)
UNION ALL
(SELECT d.id::text, t.slug, m.message_id, c.conversation_id, m.seq, m.status, d.reason,
        coalesce(d.errors -> -1 ->> 'error', ''), jsonb_array_length(d.errors), d.created_at, d.resolved_at,
        coalesce(d.resolution, '')
 FROM ordo.dead_letters d
 JOIN ordo.tenants t ON t.id = d.tenant_id
 JOIN ordo.messages m ON m.id = d.message_pk
 JOIN ordo.conversations c ON c.id = m.conversation_pk
 WHERE d.resolved_at IS NOT NULL
 ORDER BY d.resolved_at DESC LIMIT 20)`

// AdminTenant is a tenant as the admin page shows it: settings and the names
// of its credentials, never a secret nor the handler URL itself (n8n webhook
// URLs are bearer secrets of their own).
type AdminTenant struct {
	Slug          string `json:"slug"`
	Name          string `json:"name"`
	HandlerURLSet bool   `json:"handler_url_set"`
	OnDeadLetter  string `json:"on_dead_letter"`
	Ambiguous     string `json:"ambiguous"`
	MaxAttempts   int    `json:"max_attempts"`
	// SendRate is sends per second per phone number (0: unpaced), PairGapMS
	// the gap between two sends to one user.
	SendRate  int `json:"send_rate"`
	PairGapMS int `json:"pair_gap_ms"`
	// SendingPausedAt is set while Meta refuses the tenant's credential or
	// account: its messages wait for an operator's ordo tenant resume.
	SendingPausedAt     *time.Time `json:"sending_paused_at"`
	SendingPausedReason string     `json:"sending_paused_reason"`
	Credentials         []string   `json:"credentials"`
	OpenDeadLetters     int64      `json:"open_dead_letters"`
	CreatedAt           time.Time  `json:"created_at"`
}

// AdminConversation is a conversation that is halted or has a backlog.
type AdminConversation struct {
	Tenant         string     `json:"tenant"`
	ConversationID string     `json:"conversation_id"`
	HeadSeq        int64      `json:"head_seq"`
	LastSeq        int64      `json:"last_seq"`
	Backlog        int64      `json:"backlog"`
	HaltedAt       *time.Time `json:"halted_at"`
}

// AdminMessage is a recent message with its outcome.
type AdminMessage struct {
	Tenant         string     `json:"tenant"`
	ConversationID string     `json:"conversation_id"`
	MessageID      string     `json:"message_id"`
	Seq            int64      `json:"seq"`
	Direction      string     `json:"direction"`
	Status         string     `json:"status"`
	CreatedAt      time.Time  `json:"created_at"`
	FinishedAt     *time.Time `json:"finished_at"`
	SendsDone      int64      `json:"sends_done"`
	LastError      string     `json:"last_error"`
}

// AdminDeadLetter is a dead letter without its message's payload.
type AdminDeadLetter struct {
	ID             string     `json:"id"`
	Tenant         string     `json:"tenant"`
	MessageID      string     `json:"message_id"`
	ConversationID string     `json:"conversation_id"`
	Seq            int64      `json:"seq"`
	MessageStatus  string     `json:"message_status"`
	Reason         string     `json:"reason"`
	LastError      string     `json:"last_error"`
	Attempts       int        `json:"attempts"`
	CreatedAt      time.Time  `json:"created_at"`
	ResolvedAt     *time.Time `json:"resolved_at"`
	Resolution     string     `json:"resolution"`
}

// AdminSandboxSend is a sandbox send reduced to what a person reads.
type AdminSandboxSend struct {
	ID            int64     `json:"id"`
	PhoneNumberID string    `json:"phone_number_id"`
	To            string    `json:"to"`
	Type          string    `json:"type"`
	Text          string    `json:"text"`
	WAMID         string    `json:"wamid"`
	CreatedAt     time.Time `json:"created_at"`
}

// AdminOverview is everything the page shows, read in one snapshot.
type AdminOverview struct {
	At           time.Time           `json:"at"`
	Sandbox      bool                `json:"sandbox"`
	Tenants      []AdminTenant       `json:"tenants"`
	Attention    []AdminConversation `json:"attention"`
	Messages     []AdminMessage      `json:"messages"`
	DeadLetters  []AdminDeadLetter   `json:"dead_letters"`
	SandboxSends []AdminSandboxSend  `json:"sandbox_sends"`
}

// routeAdmin mounts the admin page. Every path under /admin is authenticated
// before it is routed, so not even a 404 or 405 answers a stranger.
func (s *Server) routeAdmin(r *mux.Router) {
	a := mux.NewRouter().UseEncodedPath()
	a.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, engine.Errorf(engine.CodeNotFound, "no such endpoint"))
	})
	a.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &engine.Error{Code: codeMethodNotAllowed, Message: "method not allowed"})
	})
	static, _ := fs.Sub(adminAssets, "admin")
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.adminFile(w, r, static, "index.html") })
	a.Handle("/admin", page).Methods(http.MethodGet, http.MethodHead)
	a.Handle("/admin/", page).Methods(http.MethodGet, http.MethodHead)
	for _, name := range []string{"admin.js", "admin.css", "favicon.svg"} {
		a.HandleFunc("/admin/"+name, func(w http.ResponseWriter, r *http.Request) { s.adminFile(w, r, static, name) }).
			Methods(http.MethodGet, http.MethodHead)
	}
	a.HandleFunc("/admin/api/overview", s.adminOverview).Methods(http.MethodGet)
	a.Handle("/admin/api/dead-letters/{id}/replay", s.adminWrite(s.adminResolve(s.engine.Replay))).Methods(http.MethodPost)
	a.Handle("/admin/api/dead-letters/{id}/skip", s.adminWrite(s.adminResolve(s.engine.Skip))).Methods(http.MethodPost)
	r.PathPrefix("/admin").Handler(s.adminAuth(a))
}

// adminAuth checks the basic-auth password (any user name). Both sides are
// hashed first so the comparison takes the same time whatever the lengths.
func (s *Server) adminAuth(next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(s.cfg.AdminPassword))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, password, ok := r.BasicAuth()
		got := sha256.Sum256([]byte(password))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 || !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="ordo admin", charset="UTF-8"`)
			s.writeError(w, r, engine.Errorf(engine.CodeUnauthorized, "admin password required (HTTP basic auth, any user name)"))
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// adminWrite is the anti-CSRF check of state-changing admin endpoints. The
// custom header alone stops forged requests (another site can only send it
// through a CORS preflight, which is never granted); the Origin check is a
// second line. Behind a proxy that rewrites Host, X-Forwarded-Host names the
// host the browser saw (a cross-site page cannot set it either).
func (s *Server) adminWrite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(adminHeader) != "1" {
			s.writeError(w, r, engine.Errorf(codeForbidden, "%s: 1 header required", adminHeader))
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			if err != nil || u.Host == "" || (u.Host != r.Host && u.Host != r.Header.Get("X-Forwarded-Host")) {
				s.writeError(w, r, engine.Errorf(codeForbidden, "cross-origin request refused"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// adminFile serves an embedded asset with headers that keep the page to its
// own scripts and styles and out of other sites' frames.
func (s *Server) adminFile(w http.ResponseWriter, r *http.Request, static fs.FS, name string) {
	body, err := fs.ReadFile(static, name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	types := map[string]string{
		"index.html":  "text/html; charset=utf-8",
		"admin.js":    "text/javascript; charset=utf-8",
		"admin.css":   "text/css; charset=utf-8",
		"favicon.svg": "image/svg+xml",
	}
	h := w.Header()
	h.Set("Content-Type", types[name])
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

func (s *Server) adminOverview(w http.ResponseWriter, r *http.Request) {
	o, err := s.readOverview(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// readOverview reads the page's data in one read-only snapshot, so the
// counts and lists agree with each other.
func (s *Server) readOverview(r *http.Request) (AdminOverview, error) {
	ctx := r.Context()
	o := AdminOverview{Sandbox: s.cfg.Sandbox}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&o.At); err != nil {
			return err
		}
		var err error
		rows, _ := tx.Query(ctx, adminTenantsQuery)
		if o.Tenants, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AdminTenant]); err != nil {
			return err
		}
		rows, _ = tx.Query(ctx, adminAttentionQuery)
		if o.Attention, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AdminConversation]); err != nil {
			return err
		}
		rows, _ = tx.Query(ctx, adminMessagesQuery)
		if o.Messages, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AdminMessage]); err != nil {
			return err
		}
		rows, _ = tx.Query(ctx, adminDeadLettersQuery)
		if o.DeadLetters, err = pgx.CollectRows(rows, pgx.RowToStructByPos[AdminDeadLetter]); err != nil {
			return err
		}
		if !s.cfg.Sandbox {
			return nil
		}
		rows, _ = tx.Query(ctx, listSandboxSends)
		sends, err := pgx.CollectRows(rows, pgx.RowToStructByPos[SandboxSend])
		if err != nil {
			return err
		}
		o.SandboxSends = make([]AdminSandboxSend, 0, len(sends))
		for _, snd := range sends {
			o.SandboxSends = append(o.SandboxSends, readableSend(snd))
		}
		return nil
	})
	if err != nil {
		return AdminOverview{}, &engine.Error{Code: engine.CodeInternal, Message: "internal error", Err: err}
	}
	return o, nil
}

// readableSend picks the recipient and the text a person would see out of a
// Cloud API request body.
func readableSend(snd SandboxSend) AdminSandboxSend {
	var body struct {
		To       string                `json:"to"`
		Type     string                `json:"type"`
		Text     struct{ Body string } `json:"text"`
		Template struct{ Name string } `json:"template"`
	}
	_ = json.Unmarshal(snd.Body, &body)
	text := body.Text.Body
	if body.Type == "template" {
		text = "template " + body.Template.Name
	}
	return AdminSandboxSend{ID: snd.ID, PhoneNumberID: snd.PhoneNumberID, To: body.To, Type: body.Type, Text: text, WAMID: snd.WAMID, CreatedAt: snd.CreatedAt}
}

// adminResolve replays or skips a dead letter of any tenant (tenant 0 is the
// operator) and answers with its new state, without the message's payload.
func (s *Server) adminResolve(resolve func(ctx context.Context, tenantID int64, id string) (engine.DeadLetter, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := resolve(r.Context(), 0, pathVar(r, "id"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.logger.InfoContext(r.Context(), "admin resolved a dead letter",
			slog.String("tenant", d.Tenant), slog.String("dead_letter_id", d.ID), slog.String("resolution", d.Resolution))
		d.Payload = nil
		writeJSON(w, http.StatusOK, d)
	})
}
