package main

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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// serverConfig is what `ordo serve` and `ordo dev` run.
type serverConfig struct {
	role           string // all|api|worker
	databaseURL    string
	addr           string
	keys           []tenants.MasterKey
	jobs           jobs.Config
	web            web.Config
	shutdownPeriod time.Duration
	// ready, if set, is called with the listening address once serving.
	ready func(addr string)
}

// runServe is `ordo serve [--role all|api|worker] [--workers N]`.
func runServe(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "serve")
	role := fs.String("role", "all", "all: API and workers; api: HTTP only; worker: River workers only")
	workers := fs.Int("workers", 50, "conversations this process drains at once")
	// Zero keeps jobs.Config's default; the chaos run shortens them so that
	// stalls and crashes are detected within seconds.
	var jc jobs.Config
	fs.DurationVar(&jc.Lease, "lease", 0, "how long a stalled drain keeps its conversation (default 30s)")
	fs.DurationVar(&jc.StrandedAfter, "stranded-after", 0, "when a running drain without its lock is presumed dead (default 10s)")
	fs.DurationVar(&jc.SendTimeout, "send-timeout", 0, "bound on one WhatsApp send (default 10s)")
	fs.DurationVar(&jc.HandlerTimeout, "handler-timeout", 0, "bound on one handler call (default 10s)")
	fs.DurationVar(&jc.ReconcileWait, "reconcile-wait", 0, "how long an ambiguous send waits for a status webhook before a resend (default 30s)")
	fs.DurationVar(&jc.RetryMax, "retry-max", 0, "longest backoff between a step's attempts (default 5m)")
	fs.DurationVar(&jc.StopTimeout, "stop-timeout", 0, "how long SIGTERM waits for in-flight steps before cancelling them (default: the longer of --send-timeout and --handler-timeout plus 5s)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	jc.Workers, jc.WhatsAppAPIURL = *workers, env.whatsappAPIURL
	if env.databaseURL == "" {
		return errors.New("DATABASE_URL is not set")
	}
	keys, err := masterKeys(env)
	if err != nil {
		return err
	}
	return serve(ctx, env, serverConfig{
		role: *role, databaseURL: env.databaseURL, addr: cmp.Or(env.addr, ":8080"), keys: keys,
		jobs: jc,
		web:  web.Config{AdminPassword: env.adminPassword},
	})
}

// serve runs the server until ctx ends, then shuts down gracefully: stop
// accepting, finish in-flight requests, let drains yield after their current
// step, exit.
func serve(ctx context.Context, env *environment, cfg serverConfig) error {
	if cfg.role != "all" && cfg.role != "api" && cfg.role != "worker" {
		return fmt.Errorf("--role %q: want all, api or worker", cfg.role)
	}
	if cfg.shutdownPeriod == 0 {
		// Room for the workers' graceful stop (jobs.Config.StopTimeout)
		// and the HTTP server's in-flight requests.
		cfg.shutdownPeriod = cfg.jobs.WithDefaults().StopTimeout + 15*time.Second
	}
	log := env.logger.With(slog.String("role", cfg.role))
	poolCfg, err := pgxpool.ParseConfig(cfg.databaseURL)
	if err != nil {
		return errors.New("parse DATABASE_URL: not a valid PostgreSQL URL")
	}
	if !strings.Contains(cfg.databaseURL, "pool_max_conns") {
		// A running drain holds a connection; the API and River need more.
		poolCfg.MaxConns = int32(cfg.jobs.WithDefaults().Workers + 25)
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("open database pool: %w", err)
	}
	defer pool.Close()
	if err := ordosql.CheckMigrated(ctx, pool); err != nil {
		return fmt.Errorf("%w (run `ordo migrate up`)", err)
	}
	vault, err := tenants.NewVault(pool, cfg.keys)
	if err != nil {
		return err
	}
	store := tenants.NewStore(pool, vault)

	var runner *jobs.Runner
	if cfg.role != "api" {
		if runner, err = jobs.NewRunner(pool, cfg.jobs, store, vault, log); err != nil {
			return err
		}
		if err := runner.Start(ctx); err != nil {
			return err
		}
		log.Info("workers started", slog.Int("workers", cfg.jobs.WithDefaults().Workers))
	}

	var (
		srv     *http.Server
		serveCh = make(chan error, 1)
	)
	if cfg.role != "worker" {
		ln, err := net.Listen("tcp", cfg.addr)
		if err != nil {
			if runner != nil {
				_ = runner.Stop(context.WithoutCancel(ctx))
			}
			return fmt.Errorf("listen on %s: %w", cfg.addr, err)
		}
		handler := web.New(cfg.web, engine.New(pool, log), store, vault, log).Handler()
		srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second}
		go func() { serveCh <- srv.Serve(ln) }()
		log.Info("serving", slog.String("addr", ln.Addr().String()))
		if cfg.ready != nil {
			cfg.ready(ln.Addr().String())
		}
	} else if cfg.ready != nil {
		cfg.ready("")
	}

	select {
	case <-ctx.Done():
	case err := <-serveCh:
		log.Error("http server stopped", slog.String("error", err.Error()))
	}
	log.Info("shutting down: in-flight steps finish and are recorded; a second signal stops at once")
	// A second SIGINT/SIGTERM ends the graceful stop early (a hard stop).
	again, stopAgain := signal.NotifyContext(context.WithoutCancel(ctx), syscall.SIGINT, syscall.SIGTERM)
	defer stopAgain()
	shutdown, cancel := context.WithTimeout(again, cfg.shutdownPeriod)
	defer cancel()
	var errs []error
	if srv != nil {
		errs = append(errs, srv.Shutdown(shutdown))
	}
	if runner != nil {
		errs = append(errs, runner.Stop(shutdown))
	}
	log.Info("stopped")
	return errors.Join(errs...)
}
