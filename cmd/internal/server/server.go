// Package server wires ordo's server: the database pool, the tenant store
// and vault, the River workers (jobs) and the HTTP API (web), started in the
// role asked for and shut down gracefully when the context ends. cmd/ordo
// runs it for `serve` and `dev`; the benchmark runs the very same wiring.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/metrics"
	"github.com/ordo-dev/ordo/jobs/outage"
	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// Config is what `ordo serve` and `ordo dev` run, and the benchmark's ordo
// process: the one server wiring, so that what is measured is what ships.
type Config struct {
	// Role is all (API and workers), api (HTTP only) or worker (River
	// workers only).
	Role        string
	DatabaseURL string
	// Addr is the listening address: the API's (roles all and api), or a
	// worker's small listener for /healthz, /readyz and /metrics.
	Addr string
	Keys []tenants.MasterKey
	Jobs jobs.Config
	Web  web.Config
	// ShutdownPeriod bounds the graceful shutdown. Default: the workers'
	// stop timeout (jobs.Config.StopTimeout) plus ShutdownMargin.
	ShutdownPeriod time.Duration
	// Ready, if set, is called with the API's listening address once
	// serving (empty for a worker).
	Ready func(addr string)
	// Build labels ordo_build_info (`ordo version`).
	Build metrics.Build
}

// ShutdownMargin is what Config.ShutdownPeriod's default adds to the
// workers' graceful stop: room for the HTTP server's in-flight requests.
const ShutdownMargin = 15 * time.Second

// Run runs the server until ctx ends, then shuts down gracefully: stop
// accepting, finish in-flight requests, let drains yield after their current
// step, exit. It serves HTTP at once; a database that is away at start is
// waited for (waitForDatabase) before the workers start, and ctx ending
// meanwhile returns nil at once.
func Run(ctx context.Context, logger *slog.Logger, cfg Config) error {
	if cfg.Role != "all" && cfg.Role != "api" && cfg.Role != "worker" {
		return fmt.Errorf("--role %q: want all, api or worker", cfg.Role)
	}
	if err := web.CheckAdminPassword(cfg.Web.AdminPassword); err != nil {
		return fmt.Errorf("ORDO_ADMIN_PASSWORD: %w", err)
	}
	// Room for the workers' graceful stop (jobs.Config.StopTimeout) and the
	// HTTP server's in-flight requests.
	cfg.ShutdownPeriod = cmp.Or(cfg.ShutdownPeriod, cfg.Jobs.WithDefaults().StopTimeout+ShutdownMargin)
	log := logger.With(slog.String("role", cfg.Role))
	poolCfg, err := poolConfig(cfg.DatabaseURL, cfg.Jobs.WithDefaults().Workers)
	if err != nil {
		return err
	}
	// The pool connects lazily: nothing below needs the database until
	// waitForDatabase.
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("open database pool: %w", err)
	}
	defer pool.Close()
	vault, err := tenants.NewVault(pool, cfg.Keys)
	if err != nil {
		return err
	}
	store := tenants.NewStore(pool, vault).WithOutbound(cfg.Jobs.Outbound)
	// One registry per process, every role: the pool, the database gauges
	// (engine.TenantStats, cached) and what each part records.
	var eng *engine.Engine
	m, err := metrics.New(metrics.Config{Build: cfg.Build, Pool: pool,
		Stats: func(ctx context.Context) ([]metrics.TenantStats, error) { return eng.TenantStats(ctx) }})
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	eng = engine.New(pool, log, engine.WithMetrics(m))
	cfg.Jobs.Metrics, cfg.Web.Metrics = m, m
	// One view of Postgres's state for the workers' loops and the API.
	cfg.Jobs.Database = outage.NewWatch("postgres", outage.Config{}, log)
	cfg.Web.Database = cfg.Jobs.Database
	cfg.Jobs.Schema = jobs.NewSchemaWatch(log)
	cfg.Web.Schema = cfg.Jobs.Schema
	cfg.Web.WhatsAppAPIURL = cmp.Or(cfg.Web.WhatsAppAPIURL, cfg.Jobs.WhatsAppAPIURL)
	api := web.New(cfg.Web, eng, store, vault, log)

	// Listen first: a taken port fails the start before any drain begins.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	srv := api.HTTPServer(cfg.Addr)
	if cfg.Role == "worker" {
		// No API: the probes and /metrics only.
		srv.Handler = api.ProbeHandler()
	}
	// Served at once, database or not: /healthz says the process is up,
	// /readyz answers 503 until the start is over (the database there, the
	// workers started), the API's requests meanwhile 503 with Retry-After.
	var started atomic.Bool
	srv.Handler = untilStarted(&started, srv.Handler)
	serveCh := make(chan error, 1)
	go func() { serveCh <- srv.Serve(ln) }()
	log.Info("serving", slog.String("addr", ln.Addr().String()))
	stopServing := func() {
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownMargin)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}

	// A server started before its database (a reboot, compose's order)
	// waits for it; SIGTERM meanwhile exits at once.
	if err := waitForDatabase(ctx, pool, cfg.Jobs.Database); err != nil {
		stopServing()
		if ctx.Err() != nil {
			log.Info("stopped while waiting for the database")
			return nil
		}
		return err
	}

	var runner *jobs.Runner
	if cfg.Role != "api" {
		if runner, err = jobs.NewRunner(pool, cfg.Jobs, store, vault, log); err == nil {
			err = runner.Start(ctx)
		}
		if err != nil {
			stopServing()
			return err
		}
		log.Info("workers started", slog.Int("workers", cfg.Jobs.WithDefaults().Workers))
	}
	if cfg.Ready != nil {
		if cfg.Role == "worker" {
			cfg.Ready("")
		} else {
			cfg.Ready(ln.Addr().String())
		}
	}
	started.Store(true)

	select {
	case <-ctx.Done():
	case err := <-serveCh:
		log.Error("http server stopped", slog.String("error", err.Error()))
	}
	log.Info("shutting down: in-flight steps finish and are recorded; a second signal stops at once")
	// A second SIGINT/SIGTERM ends the graceful stop early (a hard stop).
	again, stopAgain := signal.NotifyContext(context.WithoutCancel(ctx), syscall.SIGINT, syscall.SIGTERM)
	defer stopAgain()
	shutdown, cancel := context.WithTimeout(again, cfg.ShutdownPeriod)
	defer cancel()
	var errs []error
	errs = append(errs, srv.Shutdown(shutdown))
	if runner != nil {
		errs = append(errs, runner.Stop(shutdown))
	}
	log.Info("stopped")
	return errors.Join(errs...)
}

// untilStarted answers /readyz 503 until started is set, and passes
// everything else to next: a probe that sees the process ready sees it
// whole, workers running and Ready called (ordo dev's banner printed).
func untilStarted(started *atomic.Bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !started.Load() && r.URL.Path == "/readyz" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"starting"}` + "\n"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// PoolIdleDefault is how long a pooled connection may sit idle before the
// pool closes it, unless DATABASE_URL says (pool_max_conn_idle_time). A
// burst — REST clients retrying together once Postgres is back from an
// outage — opens the pool to its maximum; pgx's own default (30 minutes)
// then kept 75 idle backends that long. Not much shorter: a pool that
// shrinks and grows again with every lull pays a backend's start (tens of
// milliseconds on a loaded machine) inside a request.
const PoolIdleDefault = 5 * time.Minute

// poolConfig reads DATABASE_URL into the pool's configuration, with ordo's
// sizes where the URL does not set them: room for every worker's drain
// plus the API and River, and idle connections closed after
// PoolIdleDefault.
func poolConfig(url string, workers int) (*pgxpool.Config, error) {
	poolCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errors.New("parse DATABASE_URL: not a valid PostgreSQL URL")
	}
	if !strings.Contains(url, "pool_max_conns") {
		// A running drain holds a connection; the API and River need more.
		poolCfg.MaxConns = int32(workers + 25)
	}
	if !strings.Contains(url, "pool_max_conn_idle_time") {
		poolCfg.MaxConnIdleTime = PoolIdleDefault
	}
	// A commit that gave up its synchronous standby is answered 503, not
	// 2xx (engine/commit.go): the engine watches its commits' warnings.
	ordosql.WatchCommits(&poolCfg.ConnConfig.Config)
	return poolCfg, nil
}
