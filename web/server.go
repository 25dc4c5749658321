// Package web is ordo's HTTP face: the REST API tenants call (n8n's HTTP
// Request node, curl), Meta's webhooks, the health probes, the admin page and,
// under ordo dev, the sandbox channel. Endpoints are thin: they parse, call
// the engine, and render; errors become statuses in one place (errors.go).
package web

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/tenants"
)

// Config tunes the HTTP server. Zero values take the defaults named per field.
type Config struct {
	// MaxBodyBytes limits a REST request body. Default 1 MiB.
	MaxBodyBytes int64
	// MaxWebhookBytes limits a webhook body (Meta sends up to a few MB). Default 8 MiB.
	MaxWebhookBytes int64
	// AdminPassword protects the admin page (HTTP basic auth, any user name).
	// Empty disables the admin page.
	AdminPassword string
	// Sandbox serves the built-in stand-in for the WhatsApp Cloud API under
	// /sandbox/ (ordo dev). Default off.
	Sandbox bool
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.MaxWebhookBytes == 0 {
		c.MaxWebhookBytes = 8 << 20
	}
	return c
}

// Server routes requests to the engine.
type Server struct {
	cfg     Config
	engine  *engine.Engine
	tenants *tenants.Store
	vault   *tenants.Vault
	logger  *slog.Logger
}

// New returns a Server.
func New(cfg Config, eng *engine.Engine, ts *tenants.Store, vault *tenants.Vault, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg.WithDefaults(), engine: eng, tenants: ts, vault: vault, logger: logger}
}

// Handler returns the routed handler.
func (s *Server) Handler() http.Handler {
	r := mux.NewRouter().UseEncodedPath()
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, engine.Errorf(engine.CodeNotFound, "no such endpoint"))
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &engine.Error{Code: codeMethodNotAllowed, Message: "method not allowed"})
	})
	r.HandleFunc("/healthz", s.healthz).Methods(http.MethodGet)
	r.HandleFunc("/readyz", s.readyz).Methods(http.MethodGet)

	// The API's routes sit on the main router, each behind authenticate: in a
	// PathPrefix subrouter, gorilla/mux 1.8.1 answers a wrong method with 404
	// instead of 405 (gorilla/mux#751).
	api := func(method, path string, h http.HandlerFunc) {
		r.Handle("/v1"+path, s.authenticate(h)).Methods(method)
	}
	api(http.MethodPost, "/messages", s.postMessage)
	api(http.MethodGet, "/messages/{message_id}", s.getMessage)
	api(http.MethodGet, "/conversations/{conversation_id}", s.getConversation)
	api(http.MethodGet, "/dead-letters", s.listDeadLetters)
	api(http.MethodGet, "/dead-letters/{id}", s.getDeadLetter)
	api(http.MethodPost, "/dead-letters/{id}/replay", s.replayDeadLetter)
	api(http.MethodPost, "/dead-letters/{id}/skip", s.skipDeadLetter)

	s.routeWebhooks(r)
	if s.cfg.Sandbox {
		s.routeSandbox(r)
	}
	if s.cfg.AdminPassword != "" {
		s.routeAdmin(r)
	}
	return s.logRequests(r)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.engine.Ready(ctx); err != nil {
		s.logger.WarnContext(ctx, "not ready", slog.String("error", err.Error()))
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
