package web

// The probes and the exposition every ordo process serves: GET /healthz
// (the process is up), GET /readyz (the database answers and is migrated),
// GET /metrics (Prometheus). The API serves them beside the REST API; a
// worker-only process serves only them (ProbeHandler).

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/mux"
	ordosql "github.com/ordo-dev/ordo/sql"
)

// ReadyTimeout bounds /readyz's database check.
const ReadyTimeout = 2 * time.Second

// routeProbes mounts /healthz, /readyz and /metrics (no authentication:
// they say nothing a tenant's key guards; put /metrics behind the network's
// own rules, since it names tenants).
func (s *Server) routeProbes(r *mux.Router) {
	r.HandleFunc("/healthz", s.healthz).Methods(http.MethodGet)
	r.HandleFunc("/readyz", s.readyz).Methods(http.MethodGet)
	if s.cfg.Metrics != nil {
		r.Handle("/metrics", s.cfg.Metrics.Handler()).Methods(http.MethodGet)
	}
}

// ProbeHandler serves only /healthz, /readyz and /metrics: the small
// listener of a worker-only process (ordo serve --role worker), which has
// no API but must be probed and scraped.
func (s *Server) ProbeHandler() http.Handler {
	r := mux.NewRouter()
	r.NotFoundHandler = http.NotFoundHandler()
	r.Use(routeTemplate)
	s.routeProbes(r)
	return s.logRequests(r)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
	defer cancel()
	err := s.engine.Ready(ctx)
	if !s.cfg.Database.Report(err, ordosql.Unavailable) && !s.cfg.Schema.Report(err, ordosql.SchemaChanged) && err != nil {
		s.logger.WarnContext(ctx, "not ready", slog.String("error", err.Error()))
	}
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
