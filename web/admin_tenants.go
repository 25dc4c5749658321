package web

// The admin page's tenant console: onboard a tenant (its API key and
// handler secret shown once), change its settings, set its WhatsApp
// credential through a write-only form, issue and revoke API keys, pause and
// resume its sending. Each write runs in one transaction with its audit
// entry (engine.Tx); nothing a write returns or logs holds a stored secret.

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/tenants"
)

// whatsappCredential is the vault name of a tenant's Cloud API credential.
const whatsappCredential = "whatsapp"

// whatsappFields are the credential's fields, all required from the form.
var whatsappFields = []string{"phone_number_id", "access_token", "app_secret", "verify_token"}

// adminTenantView is a tenant as its console shows it: settings, never a
// secret. The handler and events URLs are shown as set or not (n8n webhook
// URLs are bearer secrets of their own).
type adminTenantView struct {
	Slug                string `json:"slug"`
	Name                string `json:"name"`
	HandlerURLSet       bool   `json:"handler_url_set"`
	EventsURLSet        bool   `json:"events_url_set"`
	OnDeadLetter        string `json:"on_dead_letter"`
	Ambiguous           string `json:"ambiguous"`
	MaxAttempts         int    `json:"max_attempts"`
	SendRate            int    `json:"send_rate"`
	PairGapMS           int    `json:"pair_gap_ms"`
	Weight              int    `json:"weight"`
	MaxConcurrency      int    `json:"max_concurrency"`
	Retention           string `json:"retention"`
	HandlerMode         string `json:"handler_mode"`
	HandlerTimeoutMS    int    `json:"handler_timeout_ms"`
	ReplyDeadlineMS     int    `json:"reply_deadline_ms"`
	MarkRead            bool   `json:"mark_read"`
	SendingPaused       bool   `json:"sending_paused"`
	SendingPausedReason string `json:"sending_paused_reason"`
	// HandlerDownSince and NumberDownSince are set while the tenant's
	// handler, or its WhatsApp number, is unreachable (its conversations
	// wait), with what the last failure said.
	HandlerDownSince  *time.Time       `json:"handler_down_since"`
	HandlerDownReason string           `json:"handler_down_reason,omitempty"`
	NumberDownSince   *time.Time       `json:"number_down_since"`
	NumberDownReason  string           `json:"number_down_reason,omitempty"`
	Keys              []tenants.APIKey `json:"api_keys"`
	// WhatsApp says which of the credential's fields are set: "set",
	// "not set" or "unreadable" (a master key is missing).
	WhatsApp       string          `json:"whatsapp"`
	WhatsAppFields map[string]bool `json:"whatsapp_fields"`
	// WebhookURL is what to paste into Meta's app settings as the callback.
	WebhookURL     string `json:"webhook_url"`
	VerifyTokenSet bool   `json:"verify_token_set"`
	// HandlerAuth is how ordo authenticates to the handler: "none",
	// "header" (n8n Header Auth, HandlerAuthHeader names the header),
	// "basic" (n8n Basic Auth) or "unreadable"; never the secret.
	HandlerAuth       string `json:"handler_auth"`
	HandlerAuthHeader string `json:"handler_auth_header,omitempty"`
	// Usage is what Meta billed this calendar month (UTC), by category.
	Usage *engine.Usage `json:"usage,omitempty"`
}

func viewOf(t tenants.Tenant) adminTenantView {
	return adminTenantView{Slug: t.Slug, Name: t.Name, HandlerURLSet: t.HandlerURL != "", EventsURLSet: t.EventsURL != "",
		OnDeadLetter: t.OnDeadLetter, Ambiguous: t.Ambiguous, MaxAttempts: t.MaxAttempts, SendRate: t.SendRate,
		PairGapMS: t.PairGapMS, Weight: t.Weight, MaxConcurrency: t.MaxConcurrency, Retention: t.Retention.String(),
		HandlerMode: t.HandlerMode, HandlerTimeoutMS: t.HandlerTimeoutMS, ReplyDeadlineMS: t.ReplyDeadlineMS, MarkRead: t.MarkRead,
		SendingPaused: t.SendingPausedAt != nil, SendingPausedReason: t.SendingPausedReason, Keys: []tenants.APIKey{},
		HandlerDownSince: t.HandlerDownSince, HandlerDownReason: t.HandlerDownReason,
		NumberDownSince: t.NumberDownSince, NumberDownReason: t.NumberDownReason,
		WhatsApp: "not set", WhatsAppFields: map[string]bool{}, HandlerAuth: "none"}
}

// routeAdminConsole mounts the console's endpoints on the admin router
// (behind adminAuth); writes go through adminWrite.
func (s *Server) routeAdminConsole(a *mux.Router) {
	get := func(path string, h http.HandlerFunc) { a.Handle("/admin/api"+path, h).Methods(http.MethodGet) }
	post := func(role, path string, h http.HandlerFunc) {
		a.Handle("/admin/api"+path, s.adminWrite(role, h)).Methods(http.MethodPost)
	}
	const operator, admin = engine.RoleOperator, engine.RoleAdmin
	get("/tenants", s.adminTenants)
	get("/tenants/{slug}", s.adminTenant)
	post(admin, "/tenants", s.adminCreateTenant)
	post(admin, "/tenants/{slug}/settings", s.adminUpdateTenant)
	post(admin, "/tenants/{slug}/credentials/whatsapp", s.adminSetWhatsApp)
	post(admin, "/tenants/{slug}/credentials/{name}/delete", s.adminDeleteCredential)
	post(admin, "/tenants/{slug}/credentials/handler_auth", s.adminSetHandlerAuth)
	post(admin, "/tenants/{slug}/api-keys", s.adminCreateKey)
	post(admin, "/tenants/{slug}/api-keys/{prefix}/revoke", s.adminRevokeKey)
	post(operator, "/tenants/{slug}/pause", s.adminPause)
	post(operator, "/tenants/{slug}/resume", s.adminResume)
	get("/tenants/{slug}/messages/{message_id}", s.adminMessage)
	get("/dead-letters", s.adminDeadLetters)
	post(operator, "/dead-letters/bulk", s.adminBulk)
	get("/messages", s.adminSearch)
	get("/timeline", s.adminTimeline)
	get("/tiles", s.adminTiles)
	get("/audit", s.adminAudit)
}

// adminTenant shows a tenant's settings, keys and credential state.
func (s *Server) adminTenant(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	t, err := s.tenants.BySlug(ctx, pathVar(r, "slug"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v := viewOf(t)
	if v.Keys, err = s.tenants.ListAPIKeys(ctx, t.Slug); err != nil {
		s.writeError(w, r, err)
		return
	}
	v.WebhookURL = s.publicBase(r) + "/webhooks/whatsapp/" + t.Slug
	since, until := engine.MonthOf(time.Now())
	u, err := s.engine.Usage(ctx, t.ID, since, until)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v.Usage = &u
	if s.vault != nil {
		raw, err := s.vault.Get(ctx, t.ID, whatsappCredential)
		switch {
		case err == nil:
			var fields map[string]any
			_ = json.Unmarshal(raw, &fields)
			v.WhatsApp = "set"
			for _, f := range whatsappFields {
				str, _ := fields[f].(string)
				v.WhatsAppFields[f] = str != ""
			}
			v.VerifyTokenSet = v.WhatsAppFields["verify_token"]
		case errors.Is(err, tenants.ErrNotFound):
		default:
			v.WhatsApp = "unreadable"
		}
		a, err := s.tenants.HandlerAuth(ctx, t.ID)
		switch {
		case err != nil:
			v.HandlerAuth = "unreadable"
		case a != nil && a.Header != "":
			v.HandlerAuth, v.HandlerAuthHeader = "header", a.Header
		case a != nil:
			v.HandlerAuth = "basic"
		}
	}
	writeJSON(w, http.StatusOK, v)
}

// adminTenants lists the tenants.
func (s *Server) adminTenants(w http.ResponseWriter, r *http.Request) {
	list, err := s.engine.AdminTenants(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": list})
}

// adminSetHandlerAuth stores the tenant's handler auth (n8n Header Auth:
// header and value; Basic Auth: basic_user and basic_password). Write-only,
// as the WhatsApp credential.
func (s *Server) adminSetHandlerAuth(w http.ResponseWriter, r *http.Request) {
	body, err := readJSONBody(w, r, adminBodyLimit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, err := tenants.ParseHandlerAuth(body); err != nil {
		s.writeError(w, r, err)
		return
	}
	if s.vault == nil {
		s.writeError(w, r, engine.Errorf(engine.CodeUnavailable, "no master key configured"))
		return
	}
	err = s.audited(r, func(tx pgx.Tx) (engine.AuditEntry, error) {
		t, err := s.tenants.BySlugTx(r.Context(), tx, pathVar(r, "slug"))
		if err != nil {
			return engine.AuditEntry{}, err
		}
		if err := s.vault.Put(r.Context(), tx, t.ID, tenants.HandlerAuthCredential, body); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "credential.set", Tenant: t.Slug, Details: details(map[string]any{"name": tenants.HandlerAuthCredential})}, nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{tenants.HandlerAuthCredential: "set"})
}

// adminDeleteCredential removes a tenant's whatsapp or handler_auth
// credential.
func (s *Server) adminDeleteCredential(w http.ResponseWriter, r *http.Request) {
	name := pathVar(r, "name")
	if name != whatsappCredential && name != tenants.HandlerAuthCredential {
		s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "name: must be whatsapp or handler_auth"))
		return
	}
	if s.vault == nil {
		s.writeError(w, r, engine.Errorf(engine.CodeUnavailable, "no master key configured"))
		return
	}
	err := s.audited(r, func(tx pgx.Tx) (engine.AuditEntry, error) {
		t, err := s.tenants.BySlugTx(r.Context(), tx, pathVar(r, "slug"))
		if err != nil {
			return engine.AuditEntry{}, err
		}
		if err := tenants.DeleteCredential(r.Context(), tx, t.ID, name); err != nil {
			if errors.Is(err, tenants.ErrNotFound) {
				return engine.AuditEntry{}, engine.Errorf(engine.CodeNotFound, "tenant %s has no %s credential", t.Slug, name)
			}
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "credential.delete", Tenant: t.Slug, Details: details(map[string]any{"name": name})}, nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{name: "deleted"})
}

// audited runs f and its audit entry in one transaction, and logs the
// action (never its details) once it committed.
func (s *Server) audited(r *http.Request, f func(tx pgx.Tx) (engine.AuditEntry, error)) error {
	ctx := r.Context()
	var a engine.AuditEntry
	err := s.engine.Tx(ctx, func(tx pgx.Tx) error {
		var err error
		if a, err = f(tx); err != nil {
			return err
		}
		a.Actor = adminActor(r)
		return engine.Audit(ctx, tx, a)
	})
	if err == nil {
		s.logger.InfoContext(ctx, "admin action", slog.String("action", a.Action), slog.String("tenant", a.Tenant), slog.String("actor", a.Actor))
	}
	return err
}

func details(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// adminCreateTenant onboards a tenant: its first API key and handler
// secret are in this answer only.
func (s *Server) adminCreateTenant(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Slug       string `json:"slug"`
		Name       string `json:"name"`
		HandlerURL string `json:"handler_url"`
	}
	if err := readAdminJSON(w, r, &in); err != nil {
		s.writeError(w, r, err)
		return
	}
	var c tenants.Created
	err := s.audited(r, func(tx pgx.Tx) (engine.AuditEntry, error) {
		var err error
		if c, err = s.tenants.CreateTx(r.Context(), tx, tenants.CreateParams{Slug: in.Slug, Name: in.Name, HandlerURL: in.HandlerURL}); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "tenant.create", Tenant: c.Tenant.Slug,
			Details: details(map[string]any{"name": c.Tenant.Name, "handler_url_set": in.HandlerURL != "", "api_key_prefix": keyPrefix(c.APIKey)})}, nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"tenant": viewOf(c.Tenant), "api_key": c.APIKey, "handler_secret": c.HandlerSecret})
}

// adminSettings are the settings the console edits; absent fields stay.
type adminSettings struct {
	Name             *string `json:"name"`
	HandlerURL       *string `json:"handler_url"`
	OnDeadLetter     *string `json:"on_dead_letter"`
	Ambiguous        *string `json:"ambiguous"`
	MaxAttempts      *int    `json:"max_attempts"`
	SendRate         *int    `json:"send_rate"`
	PairGapMS        *int    `json:"pair_gap_ms"`
	Weight           *int    `json:"weight"`
	MaxConcurrency   *int    `json:"max_concurrency"`
	Retention        *string `json:"retention"`
	HandlerMode      *string `json:"handler_mode"`
	HandlerTimeoutMS *int    `json:"handler_timeout_ms"`
	ReplyDeadlineMS  *int    `json:"reply_deadline_ms"`
	EventsURL        *string `json:"events_url"`
	MarkRead         *bool   `json:"mark_read"`
}

func (s *Server) adminUpdateTenant(w http.ResponseWriter, r *http.Request) {
	var in adminSettings
	if err := readAdminJSON(w, r, &in); err != nil {
		s.writeError(w, r, err)
		return
	}
	p := tenants.UpdateParams{Name: in.Name, HandlerURL: in.HandlerURL, OnDeadLetter: in.OnDeadLetter, Ambiguous: in.Ambiguous,
		MaxAttempts: in.MaxAttempts, SendRate: in.SendRate, PairGapMS: in.PairGapMS, Weight: in.Weight, MaxConcurrency: in.MaxConcurrency,
		HandlerMode: in.HandlerMode, HandlerTimeoutMS: in.HandlerTimeoutMS, ReplyDeadlineMS: in.ReplyDeadlineMS, EventsURL: in.EventsURL, MarkRead: in.MarkRead}
	if in.Retention != nil {
		ret, err := tenants.ParseRetention(*in.Retention)
		if err != nil {
			s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "retention: must be a duration such as 30d, 12h or 0 (keep for ever)"))
			return
		}
		p.Retention = &ret
	}
	// The audit keeps what changed; the URLs only as set or removed.
	changed := map[string]any{}
	b, _ := json.Marshal(in)
	_ = json.Unmarshal(b, &changed)
	for k, v := range changed {
		switch {
		case v == nil:
			delete(changed, k)
		case k == "handler_url" || k == "events_url":
			changed[k] = map[bool]string{true: "set", false: "removed"}[v != ""]
		}
	}
	var t tenants.Tenant
	err := s.audited(r, func(tx pgx.Tx) (engine.AuditEntry, error) {
		var err error
		if t, err = s.tenants.UpdateTx(r.Context(), tx, pathVar(r, "slug"), p); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "tenant.update", Tenant: t.Slug, Details: details(changed)}, nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewOf(t))
}

// adminSetWhatsApp stores the tenant's Cloud API credential. The form is
// write-only: the answer says "set", never a value.
func (s *Server) adminSetWhatsApp(w http.ResponseWriter, r *http.Request) {
	var raw map[string]any
	if err := readAdminJSON(w, r, &raw); err != nil {
		s.writeError(w, r, err)
		return
	}
	in := map[string]string{}
	for k, v := range raw {
		if !slices.Contains(whatsappFields, k) {
			s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "%s: unknown field", k))
			return
		}
		str, ok := v.(string)
		if !ok {
			s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "%s: must be a string", k))
			return
		}
		in[k] = str
	}
	for _, f := range whatsappFields {
		v := in[f]
		switch {
		case v == "":
			s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "%s: required", f))
			return
		case len(v) > 4096:
			s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "%s: must be at most 4096 bytes", f))
			return
		case strings.IndexFunc(v, func(c rune) bool { return !unicode.IsPrint(c) }) >= 0 || strings.TrimSpace(v) != v:
			s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "%s: must be printable, without spaces around it", f))
			return
		}
	}
	if strings.Trim(in["phone_number_id"], "0123456789") != "" {
		s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "phone_number_id: must be digits"))
		return
	}
	if s.vault == nil {
		s.writeError(w, r, engine.Errorf(engine.CodeUnavailable, "no master key configured"))
		return
	}
	value, _ := json.Marshal(in)
	err := s.audited(r, func(tx pgx.Tx) (engine.AuditEntry, error) {
		t, err := s.tenants.BySlugTx(r.Context(), tx, pathVar(r, "slug"))
		if err != nil {
			return engine.AuditEntry{}, err
		}
		if err := s.vault.Put(r.Context(), tx, t.ID, whatsappCredential, value); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "credential.set", Tenant: t.Slug,
			Details: details(map[string]any{"name": whatsappCredential, "phone_number_id": in["phone_number_id"]})}, nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"whatsapp": "set"})
}

// adminCreateKey issues an API key, shown in this answer only.
func (s *Server) adminCreateKey(w http.ResponseWriter, r *http.Request) {
	var key, prefix string
	err := s.audited(r, func(tx pgx.Tx) (engine.AuditEntry, error) {
		var err error
		if key, prefix, err = s.tenants.CreateAPIKeyTx(r.Context(), tx, pathVar(r, "slug")); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "api_key.create", Tenant: pathVar(r, "slug"), Details: details(map[string]string{"prefix": prefix})}, nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"api_key": key, "prefix": prefix})
}

func (s *Server) adminRevokeKey(w http.ResponseWriter, r *http.Request) {
	prefix := pathVar(r, "prefix")
	err := s.audited(r, func(tx pgx.Tx) (engine.AuditEntry, error) {
		if err := s.tenants.RevokeTenantAPIKeyTx(r.Context(), tx, pathVar(r, "slug"), prefix); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "api_key.revoke", Tenant: pathVar(r, "slug"), Details: details(map[string]string{"prefix": prefix})}, nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"revoked": prefix})
}

func (s *Server) adminPause(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Reason string `json:"reason"`
	}
	if err := readAdminJSON(w, r, &in); err != nil {
		s.writeError(w, r, err)
		return
	}
	if in.Reason == "" {
		in.Reason = "paused by an operator"
	}
	var paused bool
	err := s.audited(r, func(tx pgx.Tx) (engine.AuditEntry, error) {
		var err error
		if paused, err = s.tenants.PauseSendingTx(r.Context(), tx, pathVar(r, "slug"), in.Reason); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "tenant.pause", Tenant: pathVar(r, "slug"), Details: details(map[string]any{"reason": in.Reason, "was_paused": !paused})}, nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"paused": true, "changed": paused})
}

func (s *Server) adminResume(w http.ResponseWriter, r *http.Request) {
	var resumed bool
	err := s.audited(r, func(tx pgx.Tx) (engine.AuditEntry, error) {
		var err error
		if resumed, err = s.tenants.ResumeSendingTx(r.Context(), tx, pathVar(r, "slug")); err != nil {
			return engine.AuditEntry{}, err
		}
		return engine.AuditEntry{Action: "tenant.resume", Tenant: pathVar(r, "slug"), Details: details(map[string]bool{"was_paused": resumed})}, nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"paused": false, "changed": resumed})
}
