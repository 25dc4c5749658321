package web

// Meta's WhatsApp webhooks: GET /webhooks/whatsapp/{tenant} answers the
// subscription handshake, POST delivers messages and statuses. There is no
// API key: the tenant is the path's slug, and a POST is authenticated by
// X-Hub-Signature-256, the HMAC-SHA256 of the raw body under the app_secret
// of the tenant's whatsapp credential, checked before the body is parsed.
//
// Meta redelivers anything not answered 200 (for up to 7 days) and sends
// duplicates anyway, so a POST is all or nothing: every message and status
// of the request is written in one transaction and 200 means it committed.
// A repeat delivery dedupes on the messages' UNIQUE (tenant, message_id).
//
// Answers: 200 committed; 400 malformed body, or a phone_number_id that is
// not the tenant's number (its messages would be answered from the wrong
// number; nothing of the request is stored); 401 bad or missing signature;
// 403 failed handshake; 404 unknown tenant, or one without a whatsapp
// credential; 413 body over Config.MaxWebhookBytes.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
)

// signatureHeader carries Meta's HMAC of a webhook body.
const signatureHeader = "X-Hub-Signature-256"

// routeWebhooks mounts Meta's webhooks (GET handshake, POST events).
func (s *Server) routeWebhooks(r *mux.Router) {
	r.HandleFunc("/webhooks/whatsapp/{tenant}", s.whatsappHandshake).Methods(http.MethodGet)
	r.HandleFunc("/webhooks/whatsapp/{tenant}", s.whatsappEvents).Methods(http.MethodPost)
}

// whatsappChannel returns the tenant of the path and its whatsapp credential.
func (s *Server) whatsappChannel(w http.ResponseWriter, r *http.Request) (tenants.Tenant, whatsapp.Credential, error) {
	slug := mux.Vars(r)["tenant"]
	t, err := s.tenants.BySlug(r.Context(), slug)
	if errors.Is(err, tenants.ErrNotFound) {
		return t, whatsapp.Credential{}, engine.Errorf(engine.CodeNotFound, "tenant: not found")
	}
	if err != nil {
		return t, whatsapp.Credential{}, err
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.tenant = t.Slug
	}
	raw, err := s.vault.Get(r.Context(), t.ID, "whatsapp")
	if errors.Is(err, tenants.ErrNotFound) {
		return t, whatsapp.Credential{}, engine.Errorf(engine.CodeNotFound, "tenant has no whatsapp credential")
	}
	if err != nil {
		return t, whatsapp.Credential{}, err
	}
	var cred whatsapp.Credential
	if err := json.Unmarshal(raw, &cred); err != nil {
		return t, whatsapp.Credential{}, fmt.Errorf("decode whatsapp credential of tenant %s: %w", t.Slug, err)
	}
	return t, cred, nil
}

// whatsappHandshake answers Meta's subscription check: the challenge as
// text/plain when hub.mode is subscribe and hub.verify_token is the
// tenant's, 403 otherwise.
func (s *Server) whatsappHandshake(w http.ResponseWriter, r *http.Request) {
	_, cred, err := s.whatsappChannel(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	challenge, ok := whatsapp.VerifyHandshake(r.URL.Query(), cred.VerifyToken)
	if !ok {
		s.writeError(w, r, engine.Errorf(codeForbidden, "hub.mode must be subscribe and hub.verify_token the tenant's verify_token"))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, challenge)
}

// whatsappEvents authenticates, parses and stores one webhook delivery.
func (s *Server) whatsappEvents(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxWebhookBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		s.writeError(w, r, engine.Errorf(engine.CodeTooLarge, "body larger than %d bytes", s.cfg.MaxWebhookBytes))
		return
	}
	if err != nil {
		s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "body: could not be read"))
		return
	}
	t, cred, err := s.whatsappChannel(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if !whatsapp.VerifySignature(cred.AppSecret, body, r.Header.Get(signatureHeader)) {
		s.logger.InfoContext(r.Context(), "whatsapp webhook refused: bad or missing signature (is the tenant's app_secret the Meta app's?)",
			slog.String("tenant", t.Slug))
		s.writeError(w, r, engine.Errorf(engine.CodeUnauthorized, "%s: missing or not the body's HMAC under the tenant's app_secret", signatureHeader))
		return
	}
	if !utf8.Valid(body) {
		s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "body: not valid UTF-8"))
		return
	}
	wh, err := whatsapp.ParseWebhook(body)
	if err != nil {
		s.writeError(w, r, engine.Errorf(engine.CodeInvalid, "%s", err.Error()))
		return
	}
	res, err := s.engine.StoreWebhook(r.Context(), engine.WebhookTenant{ID: t.ID, Slug: t.Slug, PhoneNumberID: cred.PhoneNumberID}, wh)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
