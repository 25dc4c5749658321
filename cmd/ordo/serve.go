package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/cmd/internal/server"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/metrics"
	"github.com/ordo-dev/ordo/tenants"
	"github.com/ordo-dev/ordo/web"
)

// runServe is `ordo serve [--role all|api|worker] [--workers N]`.
func runServe(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo serve")
	role := fs.String("role", "all", "all: API and workers; api: HTTP only; worker: River workers only")
	workers := fs.Int("workers", ServeWorkersDefault, "conversations this process drains at once")
	addr := fs.String("addr", "", "listen address: the API, or a worker's /healthz, /readyz and /metrics (default $ORDO_ADDR, else "+DefaultAddr+")")
	// Zero keeps jobs.Config's default; the chaos run shortens them so that
	// stalls and crashes are detected within seconds.
	var jc jobs.Config
	fs.IntVar(&jc.BatchSize, "batch-size", 0, fmt.Sprintf("quiet conversations of an unpaced tenant one worker claims and sends at once; they count against --workers; 1 turns batching off (default %d)", jobs.BatchSizeDefault))
	fs.DurationVar(&jc.Lease, "lease", 0, fmt.Sprintf("how long a stalled or dead drain keeps its conversation (default %s)", jobs.LeaseDefault))
	fs.DurationVar(&jc.SendTimeout, "send-timeout", 0, fmt.Sprintf("bound on one WhatsApp send (default %s)", jobs.SendTimeoutDefault))
	fs.DurationVar(&jc.HandlerTimeout, "handler-timeout", 0, fmt.Sprintf("cap on any tenant's handler call; each tenant's own is set with ordo tenant update --handler-timeout (default %s)", jobs.HandlerTimeoutDefault))
	fs.DurationVar(&jc.ReconcileWait, "reconcile-wait", 0, fmt.Sprintf("how long an ambiguous send waits for a status webhook before a resend (default %s)", jobs.ReconcileWaitDefault))
	fs.DurationVar(&jc.RetryMax, "retry-max", 0, fmt.Sprintf("longest backoff between a step's attempts (default %s)", jobs.RetryMaxDefault))
	fs.DurationVar(&jc.StopTimeout, "stop-timeout", 0, fmt.Sprintf("how long SIGTERM waits for in-flight steps before cancelling them (default: the longer of --send-timeout and the tenants' default handler timeout, %s, plus %s; a longer handler call is cut off and called again)", tenants.HandlerTimeoutDefault, jobs.StopGraceExtra))
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	jc.Workers, jc.WhatsAppAPIURL = *workers, env.WhatsAppAPIURL
	if env.DatabaseURL == "" {
		return errors.New("DATABASE_URL is not set")
	}
	keys, err := cli.MasterKeys(env)
	if err != nil {
		return err
	}
	proxies, err := cli.TrustedProxies(env)
	if err != nil {
		return err
	}
	if jc.Outbound, err = cli.Outbound(env); err != nil {
		return err
	}
	return server.Run(ctx, env.Logger, server.Config{
		Role: *role, DatabaseURL: env.DatabaseURL, Addr: cmp.Or(*addr, env.Addr, DefaultAddr), Keys: keys,
		Jobs:  jc,
		Web:   web.Config{AdminPassword: env.AdminPassword, TrustedProxies: proxies},
		Build: buildLabels(),
	})
}

// ServeWorkersDefault is ordo serve's --workers.
const ServeWorkersDefault = 50

// DefaultAddr is where `ordo serve` listens without ORDO_ADDR or --addr
// (and what `ordo healthcheck` probes then).
const DefaultAddr = ":8080"

// buildLabels is ordo_build_info's labels: `ordo version`'s build.
func buildLabels() metrics.Build {
	b := cli.ReadBuild()
	return metrics.Build{Version: b.Version, Commit: b.Commit, GoVersion: b.Go}
}
