// Package web is ordo's HTTP face: the REST API tenants call (n8n's HTTP
// Request node, curl), Meta's webhooks, the health probes, the admin page and,
// under ordo dev, the sandbox channel. Endpoints are thin: they parse, call
// the engine, and render; errors become statuses in one place (errors.go).
package web

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs/metrics"
	"github.com/ordo-dev/ordo/jobs/outage"
	"github.com/ordo-dev/ordo/jobs/whatsapp"
	"github.com/ordo-dev/ordo/tenants"
)

// Defaults of Config, by field.
const (
	MaxBodyBytesDefault             = 1 << 20
	MaxWebhookBytesDefault          = 1 << 20
	MaxUnauthenticatedBodiesDefault = 32
	KeyReuseDefault                 = 10 * time.Second
	UnauthenticatedBodyWaitDefault  = time.Second
	WebhookReadTimeoutDefault       = 10 * time.Second
	WebhookBodiesPerAddressDefault  = 4
	WebhookBodiesPerTenantDefault   = 16
	WebhookMinRateDefault           = 1024
	WebhookMinRateGraceDefault      = 5 * time.Second
	ReadHeaderTimeoutDefault        = 10 * time.Second
	ReadTimeoutDefault              = 60 * time.Second
	WriteTimeoutDefault             = 60 * time.Second
	IdleTimeoutDefault              = 120 * time.Second
	AuthFailureLimitDefault         = 30
	AuthFailureWindowDefault        = time.Minute
	AuthThrottleEntriesDefault      = 10_000
	WebhookFailureLimitDefault      = 20
	WebhookFailureWindowDefault     = 10 * time.Second
	ChannelCacheTTLDefault          = 10 * time.Second
	ChannelCacheEntriesDefault      = 10_000
	MediaTimeoutDefault             = 10 * time.Minute
)

// AdminPasswordMinLength is the shortest admin password ordo accepts, in
// characters: the admin page reads and steers every tenant.
const AdminPasswordMinLength = 12

// Config tunes the HTTP server. Zero values take the defaults named per field.
type Config struct {
	// Database is Postgres's state as this process sees it, shared with
	// the workers (outage.Watch): /readyz reports to it and logs only what
	// is not an outage. Default nil: every failed probe is logged.
	Database *outage.Watch
	// Schema is whether the database's schema matches this build, shared
	// with the workers (jobs.NewSchemaWatch): a request that fails on a
	// column or function a newer build's migration took away is answered
	// 503 with Retry-After and logged once, by the watch. Default nil:
	// each is logged.
	Schema *outage.Watch
	// MaxBodyBytes limits a REST request body, read only once the API key is
	// known. Default MaxBodyBytesDefault (1 MiB).
	MaxBodyBytes int64
	// MaxWebhookBytes limits a webhook body; Meta's are a few KB. A larger
	// body is refused (413) before it is read when its length is declared,
	// after MaxWebhookBytes otherwise. Default MaxWebhookBytesDefault (1 MiB).
	MaxWebhookBytes int64
	// MaxUnauthenticatedBodies caps the webhook bodies being read before
	// their signature is checked, per process: at most this many times
	// MaxWebhookBytes of memory for strangers. Default
	// MaxUnauthenticatedBodiesDefault (32).
	MaxUnauthenticatedBodies int
	// KeyReuse is how long POST /v1/messages trusts an API key that
	// authenticated, before the body is read, without looking it up again:
	// the transaction that stores the message checks the key, so a revoked
	// key is still refused (401, nothing stored). Other endpoints look the
	// key up on every request. Default KeyReuseDefault (10s); negative:
	// look it up on every request.
	KeyReuse time.Duration
	// UnauthenticatedBodyWait is how long a webhook waits for one of those
	// slots before it is answered 503 with Retry-After. Default
	// UnauthenticatedBodyWaitDefault (1s).
	UnauthenticatedBodyWait time.Duration
	// WebhookReadTimeout bounds reading one webhook body, so a slow sender
	// cannot hold a slot for long. Default WebhookReadTimeoutDefault (10s).
	WebhookReadTimeout time.Duration
	// WebhookBodiesPerAddress and WebhookBodiesPerTenant are the shares of
	// those slots one client address, and one tenant's webhook URL, may
	// hold at once (an address that sent a valid signature recently is not
	// held to the tenant's share; webhooks.go). Defaults
	// WebhookBodiesPerAddressDefault (4) and WebhookBodiesPerTenantDefault
	// (16).
	WebhookBodiesPerAddress int
	WebhookBodiesPerTenant  int
	// WebhookMinRate is the slowest a webhook body may arrive, in bytes per
	// second, once WebhookMinRateGrace has passed; a slower one is cut
	// (503, connection closed). Defaults WebhookMinRateDefault (1 KiB/s)
	// and WebhookMinRateGraceDefault (5s).
	WebhookMinRate      int64
	WebhookMinRateGrace time.Duration
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are the
	// http.Server's (see HTTPServer). Defaults ReadHeaderTimeoutDefault
	// (10s), ReadTimeoutDefault (60s), WriteTimeoutDefault (60s),
	// IdleTimeoutDefault (120s).
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// AuthFailureLimit is how many failed authentications (API key or admin
	// password) one client address may make per
	// AuthFailureWindow before it is answered 429 with Retry-After, without
	// a database lookup. Defaults AuthFailureLimitDefault (30) and
	// AuthFailureWindowDefault (1 minute).
	AuthFailureLimit  int
	AuthFailureWindow time.Duration
	// AuthThrottleEntries bounds the addresses tracked (least
	// recently failed forgotten first), for API keys and webhook signatures
	// each. Default AuthThrottleEntriesDefault.
	AuthThrottleEntries int
	// WebhookFailureLimit is how many webhook posts without a valid
	// signature (missing or wrong, an unknown tenant's, a body too large or
	// too slow to be checked) one client address may send per
	// WebhookFailureWindow; past it the address is answered 429 with
	// Retry-After before any byte of its body is read, until the window
	// ends, unless it sent a valid signature in the last goodKeyTTL (Meta,
	// or a proxy every delivery comes through). Defaults
	// WebhookFailureLimitDefault (20) and WebhookFailureWindowDefault (10s).
	WebhookFailureLimit  int
	WebhookFailureWindow time.Duration
	// ChannelCacheTTL is how long a webhook's tenant and WhatsApp credential
	// (or their absence) are remembered; a credential changed by another
	// process is seen after at most this long. Default
	// ChannelCacheTTLDefault (10s); ChannelCacheEntries bounds the slugs
	// remembered (ChannelCacheEntriesDefault).
	ChannelCacheTTL     time.Duration
	ChannelCacheEntries int
	// TrustedProxies are the reverse proxies whose X-Forwarded-For and
	// X-Forwarded-Host are believed (the client's address for throttling,
	// the browser's host for the admin page's Origin check). Default none:
	// the headers are ignored.
	TrustedProxies []netip.Prefix
	// AdminPassword is the console's break-glass account: name "admin",
	// role admin. Empty: no such account; see CheckAdminPassword.
	AdminPassword string
	// AdminOperators serves the console to the operators of ordo.operators
	// (ordo operator add) even without an AdminPassword. Default off: the
	// console is served only when AdminPassword is set.
	AdminOperators bool
	// AdminSessionIdle ends a console session unused this long; default
	// engine.SessionIdleDefault (30m). AdminSessionMax ends any session
	// this long after its login; default engine.SessionMaxDefault (12h).
	AdminSessionIdle time.Duration
	AdminSessionMax  time.Duration
	// WhatsAppAPIURL is the Cloud API's base URL, which GET /v1/media/{id}
	// resolves media ids at (ORDO_WHATSAPP_API_URL). Default
	// whatsapp.DefaultBaseURL.
	WhatsAppAPIURL string
	// MediaTimeout bounds one media download through GET /v1/media/{id}
	// (up to whatsapp.MaxMediaBytes), beyond WriteTimeout. Default
	// MediaTimeoutDefault (10m).
	MediaTimeout time.Duration
	// Sandbox serves the built-in stand-in for the WhatsApp Cloud API under
	// /sandbox/ (ordo dev), to loopback hosts only. Default off.
	Sandbox bool
	// Metrics records every request and webhook delivery, and is served at
	// GET /metrics. Default nil: nothing recorded, /metrics answers 404.
	Metrics *metrics.Metrics
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, MaxBodyBytesDefault)
	c.MaxWebhookBytes = cmp.Or(c.MaxWebhookBytes, MaxWebhookBytesDefault)
	c.MaxUnauthenticatedBodies = cmp.Or(c.MaxUnauthenticatedBodies, MaxUnauthenticatedBodiesDefault)
	c.UnauthenticatedBodyWait = cmp.Or(c.UnauthenticatedBodyWait, UnauthenticatedBodyWaitDefault)
	c.KeyReuse = cmp.Or(c.KeyReuse, KeyReuseDefault)
	c.WebhookReadTimeout = cmp.Or(c.WebhookReadTimeout, WebhookReadTimeoutDefault)
	c.WebhookBodiesPerAddress = cmp.Or(c.WebhookBodiesPerAddress, WebhookBodiesPerAddressDefault)
	c.WebhookBodiesPerTenant = cmp.Or(c.WebhookBodiesPerTenant, WebhookBodiesPerTenantDefault)
	c.WebhookMinRate = cmp.Or(c.WebhookMinRate, WebhookMinRateDefault)
	c.WebhookMinRateGrace = cmp.Or(c.WebhookMinRateGrace, WebhookMinRateGraceDefault)
	c.ReadHeaderTimeout = cmp.Or(c.ReadHeaderTimeout, ReadHeaderTimeoutDefault)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, ReadTimeoutDefault)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, WriteTimeoutDefault)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, IdleTimeoutDefault)
	c.AuthFailureLimit = cmp.Or(c.AuthFailureLimit, AuthFailureLimitDefault)
	c.AuthFailureWindow = cmp.Or(c.AuthFailureWindow, AuthFailureWindowDefault)
	c.AuthThrottleEntries = cmp.Or(c.AuthThrottleEntries, AuthThrottleEntriesDefault)
	c.WebhookFailureLimit = cmp.Or(c.WebhookFailureLimit, WebhookFailureLimitDefault)
	c.WebhookFailureWindow = cmp.Or(c.WebhookFailureWindow, WebhookFailureWindowDefault)
	c.ChannelCacheTTL = cmp.Or(c.ChannelCacheTTL, ChannelCacheTTLDefault)
	c.ChannelCacheEntries = cmp.Or(c.ChannelCacheEntries, ChannelCacheEntriesDefault)
	c.AdminSessionIdle = cmp.Or(c.AdminSessionIdle, engine.SessionIdleDefault)
	c.AdminSessionMax = cmp.Or(c.AdminSessionMax, engine.SessionMaxDefault)
	c.WhatsAppAPIURL = cmp.Or(c.WhatsAppAPIURL, whatsapp.DefaultBaseURL)
	c.MediaTimeout = cmp.Or(c.MediaTimeout, MediaTimeoutDefault)
	return c
}

// CheckAdminPassword refuses an admin password shorter than
// AdminPasswordMinLength characters; empty (no admin page) is fine.
func CheckAdminPassword(p string) error {
	if n := utf8.RuneCountInString(p); p != "" && n < AdminPasswordMinLength {
		return fmt.Errorf("admin password has %d characters; it needs at least %d (or none, which turns the admin page off)", n, AdminPasswordMinLength)
	}
	return nil
}

// Server routes requests to the engine.
type Server struct {
	cfg      Config
	engine   *engine.Engine
	tenants  *tenants.Store
	vault    *tenants.Vault
	logger   *slog.Logger
	throttle *authThrottle            // failed authentications (throttle.go)
	good     goodKeys                 // API keys that authenticated recently (throttle.go)
	recent   recently[tenants.Tenant] // their tenants, reused by message ingest for KeyReuse
	// unsigned counts webhook posts without a valid signature per client
	// address, signers holds the addresses that sent a valid one recently
	// (throttle.go).
	unsigned *authThrottle
	signers  goodKeys
	channels *channelCache // webhook tenants and credentials (channels.go)
	bodies   *bodySlots    // slots for unauthenticated webhook bodies (webhooks.go)
	// wa fetches inbound media with a tenant's token (media.go); no client
	// timeout: the request's context and MediaTimeout bound a download.
	wa *whatsapp.Client
}

// New returns a Server.
func New(cfg Config, eng *engine.Engine, ts *tenants.Store, vault *tenants.Vault, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.WithDefaults()
	s := &Server{cfg: cfg, engine: eng, tenants: ts, vault: vault, logger: logger,
		throttle: newAuthThrottle(cfg.AuthFailureLimit, cfg.AuthFailureWindow, cfg.AuthThrottleEntries),
		unsigned: newAuthThrottle(cfg.WebhookFailureLimit, cfg.WebhookFailureWindow, cfg.AuthThrottleEntries),
		bodies:   newBodySlots(cfg.MaxUnauthenticatedBodies, cfg.WebhookBodiesPerAddress, cfg.WebhookBodiesPerTenant),
		good:     newGoodKeys(),
		signers:  newGoodKeys(),
		recent:   recently[tenants.Tenant]{ttl: cfg.KeyReuse},
		wa:       &whatsapp.Client{BaseURL: cfg.WhatsAppAPIURL, HTTP: &http.Client{}},
	}
	s.channels = newChannelCache(cfg.ChannelCacheTTL, cfg.ChannelCacheEntries, s.loadChannel)
	return s
}

// HTTPServer returns an http.Server for the routed handler with every
// timeout of the Config set: a client that sends its headers or body slowly,
// or never reads the answer, or idles, holds a connection only so long.
func (s *Server) HTTPServer(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
	}
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
	r.Use(routeTemplate)
	s.routeProbes(r)

	// The API's routes sit on the main router, each behind authenticate: in a
	// PathPrefix subrouter, gorilla/mux 1.8.1 answers a wrong method with 404
	// instead of 405 (gorilla/mux#751).
	api := func(method, path string, h http.HandlerFunc) {
		r.Handle("/v1"+path, s.authenticate(h)).Methods(method)
	}
	r.HandleFunc("/v1/openapi.json", s.openAPI).Methods(http.MethodGet) // the contract: no key needed
	r.Handle("/v1/messages", s.authenticateIngest(http.HandlerFunc(s.postMessage))).Methods(http.MethodPost)
	api(http.MethodGet, "/messages/{message_id}", s.getMessage)
	api(http.MethodPost, "/messages/{message_id}/replies", s.postReplies)
	api(http.MethodGet, "/conversations/{conversation_id}", s.getConversation)
	api(http.MethodGet, "/usage", s.getUsage)
	api(http.MethodGet, "/media/{media_id}", s.getMedia)
	api(http.MethodGet, "/dead-letters", s.listDeadLetters)
	api(http.MethodGet, "/dead-letters/{id}", s.getDeadLetter)
	api(http.MethodPost, "/dead-letters/{id}/replay", s.replayDeadLetter)
	api(http.MethodPost, "/dead-letters/{id}/skip", s.skipDeadLetter)
	api(http.MethodPost, "/leases/{key}", s.acquireLease)
	api(http.MethodPost, "/leases/{key}/renew", s.renewLease)
	api(http.MethodDelete, "/leases/{key}", s.releaseLease)
	api(http.MethodGet, "/leases/{key}", s.checkLease)

	s.routeWebhooks(r)
	if s.cfg.Sandbox {
		s.routeSandbox(r)
	}
	if s.cfg.AdminPassword != "" || s.cfg.AdminOperators {
		s.routeAdmin(r)
	} else {
		r.PathPrefix("/admin/api/").HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.writeError(w, r, engine.Errorf(engine.CodeNotFound, "%s", adminOffMessage))
		})
		r.PathPrefix("/admin").HandlerFunc(adminOff)
	}
	return s.logRequests(r)
}

// adminOffMessage is the admin API's 404 when no admin password is set.
var adminOffMessage = fmt.Sprintf("the admin page is off: set ORDO_ADMIN_PASSWORD (at least %d characters) and restart ordo", AdminPasswordMinLength)

// adminOff answers /admin when no admin password is set: 404, with a page
// that says how to turn it on rather than a bare "not found".
func adminOff(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprintf(w, `<!doctype html><meta charset="utf-8"><title>ordo: admin page off</title>
<h1>The admin page is off</h1>
<p>Set <code>ORDO_ADMIN_PASSWORD</code> (at least %d characters) in ordo's environment and restart it;
the page then asks for that password (any user name).</p>
`, AdminPasswordMinLength)
}
