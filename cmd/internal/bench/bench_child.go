package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/cmd/internal/proc"
	"github.com/ordo-dev/ordo/cmd/internal/server"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
)

// Every HTTP system runs in a process of its own (this binary, `ordo-bench
// --child …`, supervised by package proc), so that the load generator and
// the fake Cloud API in the bench process do not count against it, and its
// peak RSS is its own. The ordo child runs `ordo serve`'s own wiring
// (server.Run with the same jobs.Config a production server gets).

// childSpec is what one child process runs.
type childSpec struct {
	system      string // ordo, river-plain, redis-lock
	role        string // all, api (ingest only), worker (sending only)
	databaseURL string
	whatsappURL string
	tenantsFile string // baselines: tenants, keys and credentials
	cpuProfile  string // file for a CPU profile; empty for none
}

// benchChild is a running child process.
type benchChild struct {
	p    *proc.Proc
	addr string // the REST address; empty for a worker
}

// startChild starts a system and waits until it serves.
func (b *benchEnv) startChild(ctx context.Context, s childSpec) (*benchChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the ordo-bench binary: %w", err)
	}
	args := []string{exe, "--child", "--system", s.system, "--role", s.role, "--workers", strconv.Itoa(b.cfg.workers)}
	if s.tenantsFile != "" {
		args = append(args, "--tenants", s.tenantsFile)
	}
	if s.system == "redis-lock" {
		args = append(args, "--redis", b.redisAddr, "--redis-ttl", b.cfg.redisTTL.String(), "--redis-snooze", b.cfg.redisSnooze.String())
	}
	if s.cpuProfile != "" {
		args = append(args, "--cpuprofile", s.cpuProfile)
	}
	ready := make(chan string, 1)
	c := &benchChild{p: proc.New(proc.Config{
		Name: s.system + " (" + s.role + ")",
		Argv: niceArgv(b.cfg.instrumentNice, args),
		Env: append(os.Environ(),
			"DATABASE_URL="+s.databaseURL,
			"ORDO_ADDR=127.0.0.1:0",
			"ORDO_MASTER_KEYS="+b.masterKey.Format(),
			"ORDO_WHATSAPP_API_URL="+s.whatsappURL,
			"ORDO_LOG_LEVEL=warn",
		),
		LogPath: filepath.Join(b.dir, fmt.Sprintf("run%d-%s-%s.log", b.runs, s.system, s.role)),
		Stdout: func(line string) {
			if addr, ok := strings.CutPrefix(line, "ready "); ok {
				ready <- addr
			}
		},
	})}
	if err := c.p.Start(); err != nil {
		return nil, err
	}
	select {
	case c.addr = <-ready:
		return c, nil
	case <-c.p.Done():
		return nil, fmt.Errorf("%s (%s) exited before serving: %v%s", s.system, s.role, c.p.Err(), c.p.LogTail())
	case <-time.After(time.Minute):
		_, _ = c.p.Kill()
		return nil, fmt.Errorf("%s (%s) did not come up within a minute%s", s.system, s.role, c.p.LogTail())
	case <-ctx.Done():
		_, _ = c.p.Kill()
		return nil, ctx.Err()
	}
}

// peakRSSMB is the child's VmHWM so far.
func (c *benchChild) peakRSSMB() float64 { return peakRSSMB(c.p.Pid()) }

// cpuUsed is the CPU time the child used; valid once it exited.
func (c *benchChild) cpuUsed() time.Duration { return c.p.CPUUsed() }

// stop shuts the child down as an operator would (SIGTERM: graceful), and
// kills it if it does not exit within a minute.
func (c *benchChild) stop() error {
	if err := c.p.Stop(time.Minute); err != nil {
		return fmt.Errorf("child exited with %v%s", err, c.p.LogTail())
	}
	return nil
}

// baselineTenant is one tenant as the baselines know it: they keep their
// tenants in memory, so their ingest does no key lookup in the database.
type baselineTenant struct {
	Slug       string            `json:"slug"`
	Key        string            `json:"key"`
	Credential map[string]string `json:"credential"`
}

// baselineTenants writes n tenants for a baseline child and returns their keys.
func (b *benchEnv) baselineTenants(n int) ([]string, string, error) {
	list := make([]baselineTenant, n)
	keys := make([]string, n)
	for t := range n {
		secret := make([]byte, 16)
		_, _ = rand.Read(secret)
		keys[t] = "bench_" + strconv.Itoa(t) + "_" + hex.EncodeToString(secret)
		list[t] = baselineTenant{Slug: "bench-" + strconv.Itoa(t), Key: keys[t], Credential: benchCredential(t)}
	}
	data, _ := json.Marshal(list)
	path := filepath.Join(b.dir, fmt.Sprintf("run%d-tenants.json", b.runs))
	return keys, path, os.WriteFile(path, data, 0o600)
}

// runHTTP measures an HTTP system: offer the load over REST, wait for the
// fake Cloud API to have everything (or to stall), judge what it received.
func (b *benchEnv) runHTTP(ctx context.Context, l benchLoad, system string) (benchResult, error) {
	template := riverTemplate
	if system == "ordo" {
		template = ordoTemplate
	}
	dbName, url, drop, err := b.newDatabase(ctx, template)
	if err != nil {
		return benchResult{}, err
	}
	defer drop()
	wa := whatsapptest.NewServer()
	defer wa.Close()

	spec := childSpec{system: system, databaseURL: url, whatsappURL: wa.URL()}
	var keys []string
	if system == "ordo" {
		keys, err = b.ordoTenants(ctx, url, l.tenants)
	} else {
		keys, spec.tenantsFile, err = b.baselineTenants(l.tenants)
	}
	if err != nil {
		return benchResult{}, fmt.Errorf("tenants: %w", err)
	}
	profiled := b.cfg.profile != ""
	profile := func(role string) string {
		if !profiled {
			return ""
		}
		return filepath.Join(b.cfg.profile, fmt.Sprintf("%s-%s-%s.cpu.pprof", system, l.scenario, role))
	}
	if profiled {
		if err := b.resetStatements(ctx); err != nil {
			return benchResult{}, err
		}
	}

	var (
		o      *offered
		from   time.Time
		rss    float64
		sysCPU time.Duration
		pgCPU  = b.postgresCPU()
		xacts  = b.xacts(ctx, dbName)
		wal    = b.walLSN(ctx)
		// backlog: what queueing cost, apart from draining
		ingestCPU *benchCPU
		// latency: messages of the warm-up, which the costs include
		warmed int
	)
	run := func(role string, work func(c *benchChild) error) error {
		spec.role, spec.cpuProfile = role, profile(role)
		c, err := b.startChild(ctx, spec)
		if err != nil {
			return err
		}
		err = work(c)
		rss = max(rss, c.peakRSSMB())
		err = errors.Join(err, c.stop())
		sysCPU += c.cpuUsed()
		return err
	}
	ingest := func(c *benchChild) error {
		rc := newRESTClient(c.addr, keys, l)
		defer rc.close()
		var err error
		o, err = offer(ctx, l, rc.post)
		return err
	}
	if l.backlog {
		// Queue everything with the API alone, then drain with the workers
		// alone: a backlog, as after an outage of the senders.
		if err := run("api", ingest); err != nil {
			return benchResult{}, err
		}
		b.logf("%s / %s: %d messages queued in %.1fs; draining", l.scenario, system, l.messages(), o.end.Sub(o.start).Seconds())
		b.waitSessionsGone(ctx, dbName)
		ingestCPU = cpuPerMessage(sysCPU, b.postgresCPU()-pgCPU, l.messages())
		if err := run("worker", func(*benchChild) error {
			from = time.Now()
			return b.waitSends(ctx, wa, l.messages())
		}); err != nil {
			return benchResult{}, err
		}
	} else if err := run("all", func(c *benchChild) error {
		if l.openLoop() && b.cfg.latencyWarmup > 0 {
			n, err := b.warmUp(ctx, c, wa, keys, l)
			if err != nil {
				return err
			}
			warmed = n
		}
		if err := ingest(c); err != nil {
			return err
		}
		from = o.start
		return b.waitSends(ctx, wa, l.messages())
	}); err != nil {
		return benchResult{}, err
	}

	b.waitSessionsGone(ctx, dbName)
	pgCPU = b.postgresCPU() - pgCPU
	r := judge(l, system, o, wa.Sends(), from)
	r.CPU = cpuPerMessage(sysCPU, pgCPU, l.messages()+warmed)
	r.TxPerMsg = b.xactsPerMessage(ctx, dbName, xacts, l.messages()+warmed)
	r.WALKBPerMsg = b.walKBPerMessage(ctx, wal, l.messages()+warmed)
	r.PeakRSSMB = round1(rss)
	r.ProviderRequests = wa.Attempts()
	if l.backlog {
		r.IngestS = round2(o.end.Sub(o.start).Seconds())
		r.IngestCPU = ingestCPU
	}
	if profiled && b.statements {
		file := filepath.Join(b.cfg.profile, fmt.Sprintf("%s-%s.statements.txt", system, l.scenario))
		if err := b.statementsTop(ctx, dbName, url, file); err != nil {
			b.logf("pg_stat_statements: %v", err)
		}
	}
	return r, nil
}

// warmUp offers l's rate to l's conversations for --latency-warmup with
// messages that are never judged, waits until the fake Cloud API has them
// all, and makes it forget them: a fresh process's first seconds (new
// database sessions, cold plan and function caches) are not what a running
// service's latency is. Every system gets the same warm-up.
// It returns how many messages the warm-up sent (the run's CPU, transactions
// and WAL per message count them).
func (b *benchEnv) warmUp(ctx context.Context, c *benchChild, wa *whatsapptest.Server, keys []string, l benchLoad) (int, error) {
	w := l
	w.warmup, w.duration = true, b.cfg.latencyWarmup
	rc := newRESTClient(c.addr, keys, w)
	defer rc.close()
	if _, err := offer(ctx, w, rc.post); err != nil {
		return 0, fmt.Errorf("warm-up: %w", err)
	}
	if err := b.waitSends(ctx, wa, w.messages()); err != nil {
		return 0, fmt.Errorf("warm-up: %w", err)
	}
	if len(wa.Sends()) < w.messages() {
		return 0, fmt.Errorf("warm-up: %d of %d messages sent", len(wa.Sends()), w.messages())
	}
	wa.Reset()
	b.logf("%s: warmed up with %d messages over %s", l.scenario, w.messages(), w.duration)
	return w.messages(), nil
}

// waitSends waits until the fake Cloud API has n sends, or none came for
// the stall period; what is missing then is judged lost.
func (b *benchEnv) waitSends(ctx context.Context, wa *whatsapptest.Server, n int) error {
	last, lastChange, lastLog := -1, time.Now(), time.Now()
	for {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		err := wa.WaitForSends(wctx, n)
		cancel()
		if err == nil {
			// Anything still in flight (a duplicate) lands within this.
			time.Sleep(500 * time.Millisecond)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		now := time.Now()
		if a := wa.Attempts(); a != last {
			last, lastChange = a, now
		} else if now.Sub(lastChange) > b.cfg.stall {
			b.logf("no send for %s: counting what is missing as lost", b.cfg.stall)
			return nil
		}
		if now.Sub(lastLog) > 15*time.Second {
			b.logf("  … %d of %d sent", last, n)
			lastLog = now
		}
	}
}

// runChild is `ordo-bench --child --system S --role R …`: one system's
// process.
func runChild(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "ordo-bench --child")
	var (
		system     = fs.String("system", "", "ordo, river-plain or redis-lock")
		role       = fs.String("role", "all", "all, api or worker")
		workers    = fs.Int("workers", 50, "concurrent senders")
		tenantFile = fs.String("tenants", "", "baselines: the tenants file")
		redisAddr  = fs.String("redis", "", "redis-lock: Redis address")
		redisTTL   = fs.Duration("redis-ttl", 5*time.Second, "redis-lock: lock expiry")
		snooze     = fs.Duration("redis-snooze", 50*time.Millisecond, "redis-lock: snooze when locked")
		cpuProfile = fs.String("cpuprofile", "", "write a CPU profile here")
	)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ready := func(addr string) { fmt.Fprintln(env.Stdout, "ready", addr) }
	switch *system {
	case "ordo":
		keys, err := cli.MasterKeys(env)
		if err != nil {
			return err
		}
		return server.Run(ctx, env.Logger, server.Config{
			Role: *role, DatabaseURL: env.DatabaseURL, Addr: env.Addr, Keys: keys,
			Jobs:  jobs.Config{Workers: *workers, WhatsAppAPIURL: env.WhatsAppAPIURL},
			Ready: ready,
		})
	case "river-plain", "redis-lock":
		return runBaseline(ctx, env, baselineConfig{
			role: *role, workers: *workers, tenantsFile: *tenantFile,
			redisAddr: *redisAddr, redisTTL: *redisTTL, snooze: *snooze,
			locking: *system == "redis-lock", ready: ready,
		})
	}
	return fmt.Errorf("--system %q: want ordo, river-plain or redis-lock", *system)
}
