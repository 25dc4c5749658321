// Package chaos is the crash and fault run (cmd/ordo-chaos, `make chaos`).
// It starts a private Postgres, one API process and several worker processes
// of the product binary (`ordo serve`), and a fake WhatsApp Cloud API on
// loopback; offers load from many clients while it kills, stalls and
// restarts processes (Postgres included) and the fake misbehaves; then an
// independent checker compares what the clients were told was accepted with
// what the fake provider received.
//
// It is laid out as etcd's functional tester is: faults, stressers and a
// checker.
//
//	chaos.go              the configuration and the run itself
//	fault.go              the fault interface, the seeded plan, the fault log
//	fault_*.go            one kind of process fault each (kill, stall, restart, deploy,
//	                      partitions from Postgres or the Cloud API, a slow Postgres)
//	netproxy.go           the TCP proxy that cuts or slows a connection
//	network.go            the proxies of a run: each process's to Postgres, each worker's to the Cloud API
//	check_partition.go    no Cloud API call from a worker cut off from Postgres once its lease is over
//	soak*.go              make soak: the samples, the verdicts, the table and the plot
//	fault_ha_*.go         with --ha, the failover faults on a Patroni cluster
//	check_ha.go           with --ha, the recovery times and their check
//	stresser.go           the stresser interface
//	load.go               the clients and their ledger (a stresser)
//	probe.go              the bad-input prober (a stresser)
//	fault_hostile_flood.go strangers flooding the public webhook (a fault that runs alone)
//	fault_pg_away.go      Postgres stopped 20 s: quiet logs, 503 with Retry-After, /readyz (runs alone)
//	fault_handler_outage.go the tenants' handler away (refused, then n8n's 404): no dead letter, no halt
//	latency.go            the real clients' waits, read by the flood
//	meta.go               Meta's webhooks: statuses, end users' messages
//	provider.go           the misbehaving provider (its faults are per request) and the tenants' handler
//	procs.go              the ordo processes, operator commands, logs
//	settle.go             after the load: settling, ordo's view, dead letters
//	check.go              the checker (a pure function of what was recorded) and the report
//
// cmd/ordo-chaos/README.md says what the run does and what
// each check means.
package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/hacluster"
	"github.com/ordo-dev/ordo/cmd/internal/pgcluster"
	"github.com/ordo-dev/ordo/cmd/internal/proc"
	"github.com/ordo-dev/ordo/tenants"
)

// Config is one chaos run. Zero values take the defaults of
// Config.withDefaults.
type Config struct {
	// Duration is how long load is offered and faults injected. Default 3m.
	// With HA, or an upgrade (Previous), the load goes on until the last
	// fault is over (exclusive faults run alone and may queue past
	// Duration).
	Duration time.Duration
	// Seed drives every random choice: the fault schedule, the load and the
	// provider's failures. Default: from the clock (printed, so a run can be
	// repeated).
	Seed uint64
	// Workers is the number of `ordo serve --role worker` processes. Default 3.
	Workers int
	// Tenants is the number of tenants the load spreads over. Default 3.
	Tenants int
	// Conversations is the number of conversations, over all tenants. Default 300.
	Conversations int
	// Clients is the number of concurrent client goroutines. Default 40.
	Clients int
	// Rate is the messages offered per second, over all clients. Default 40.
	Rate float64
	// Quiesce bounds the wait, after the load, for every accepted message to
	// be sent or dead-lettered. Default 3m.
	Quiesce time.Duration
	// Dir holds the cluster and the processes' logs. Default: a temporary
	// directory, removed after a passing run and kept after a failing one.
	Dir string
	// Exec is the command that runs the product, `ordo` (the binary, then
	// any fixed arguments), and ExecEnv extra environment for it. Required:
	// the run drives ordo as an operator would, through its binary.
	Exec    []string
	ExecEnv []string
	// Previous, if set, is the command of the build before Exec's: the run
	// starts on it (its migrate, its processes) and upgrades to Exec once
	// under load (fault_upgrade.go). Default none.
	Previous []string
	// Out receives the fault log and the report. Default stdout.
	Out io.Writer

	// WorkerKillEvery is the range of pauses between two kill -9 of a
	// worker. Default 4s..9s.
	WorkerKillMin, WorkerKillMax time.Duration
	// APIKills, PGRestarts and Stalls are how many of each fault the run
	// injects. Defaults scale with Duration: one per minute, per 90s and
	// per 90s, at least one each.
	APIKills, PGRestarts, Stalls int
	// Partitions is how many of each network fault the run injects: a
	// worker cut off from Postgres, a worker cut off from the Cloud API,
	// Postgres slowed by PGSlowMin..PGSlowMax per round trip (network.go).
	// Default: one per 90s, at least one each; none with HA.
	Partitions int
	// RollingDeploys is how many times every process is SIGTERMed and
	// restarted in turn, under load. Default 0 (none) until SIGTERM is
	// graceful in the engine: on an engine without it a deploy
	// duplicates sends, and the run says so.
	RollingDeploys int
	// OperatorResolves is how many dead letters an operator replays or
	// skips (alternating from the seed) while their conversations are busy.
	// Default 0 (none).
	OperatorResolves int
	// SQLBatch, if positive, adds an application enqueuing through
	// ordo.enqueue_message in its own transactions, SQLBatch conversations
	// spread over every tenant in each, one in four rolled back
	// (stresser_sql.go).
	// Default 0 (none).
	SQLBatch int
	// HostileFor, if positive, is how long the hostile flood lasts
	// (fault_hostile_flood.go): HostileConcurrency concurrent unsigned posts
	// of HostileBodyBytes to the webhook while the load flows, once in the
	// run; the API's RSS and the real clients' p99 are measured meanwhile.
	// Default 0 (none).
	HostileFor time.Duration
	// HostileCores is the CPU the flood's generator may use, in cores: it
	// runs as a process of its own in a cgroup v1 CPU quota of that size,
	// the attacker's machine (flood_process.go). Default
	// HostileCoresDefault; negative, or where no cgroup can be made: nice
	// 19 instead, only the CPU the machine leaves idle.
	HostileCores float64
	// HA runs the database as a Patroni cluster (package hacluster: one
	// etcd, a primary and two standbys, synchronous replication) that ordo
	// reaches through a multi-host DATABASE_URL, and replaces the Postgres
	// restarts by the failover faults: kill -9 of the primary's
	// postmaster, a switchover and a standby restart, Failovers of each.
	// Default false.
	HA bool
	// Failovers is how many of each failover fault an HA run injects.
	// Default: one per FailoverEvery of load, at least one.
	Failovers int
	// SoakDir, if set, makes the run a soak (soak.go): faults every few
	// minutes, load at half the capacity unless Rate says otherwise, a
	// sample every SoakSampleEvery, and the table (report.md) and the plot
	// (soak.png) written to SoakDir. Default "" (a crash run).
	SoakDir string
	// SoakSampleEvery is how often a soak samples. Default
	// SoakSampleEveryDefault.
	SoakSampleEvery time.Duration
	// Lease and SendTimeout are handed to the workers (see jobs.Config).
	// Defaults 4s, 1.5s: a stalled or killed worker's conversations move on
	// within seconds.
	Lease, SendTimeout time.Duration
	// PGAway is how long Postgres is stopped, once, under load
	// (fault_pg_away.go). Default PGAwayDefault; negative: no outage. Not
	// with HA (the failovers take its place).
	PGAway time.Duration
	// HandlerOutage is how long the tenants' handler is away, once
	// (fault_handler_outage.go): refusing connections, then answering
	// n8n's 404. Default HandlerOutageFull when Duration is at least
	// HandlerOutageFullFrom, else half of Duration; negative: no outage.
	HandlerOutage time.Duration
	// CloudAPIOutage is how long the Cloud API answers every send 503,
	// once (fault_cloudapi_outage.go), in a run long enough for it and
	// 30 s of load after. Default CloudAPIOutageDefault; negative: none.
	CloudAPIOutage time.Duration
}

func (c Config) withDefaults() Config {
	if c.Duration == 0 {
		c.Duration = 3 * time.Minute
	}
	c = c.withSoakDefaults()
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setDur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	setInt(&c.Workers, 3)
	setInt(&c.Tenants, 3)
	setInt(&c.Conversations, 300)
	setInt(&c.Clients, 40)
	if c.Rate == 0 {
		c.Rate = 40
	}
	setDur(&c.Quiesce, 3*time.Minute)
	if c.Out == nil {
		c.Out = os.Stdout
	}
	setDur(&c.WorkerKillMin, 4*time.Second)
	setDur(&c.WorkerKillMax, 9*time.Second)
	setInt(&c.APIKills, max(1, int(c.Duration/time.Minute)))
	setInt(&c.PGRestarts, max(1, int(c.Duration/(90*time.Second))))
	setInt(&c.Stalls, max(1, int(c.Duration/(90*time.Second))))
	setInt(&c.Partitions, max(1, int(c.Duration/(90*time.Second))))
	setInt(&c.Failovers, max(1, int(c.Duration/FailoverEvery)))
	setDur(&c.Lease, 4*time.Second)
	setDur(&c.SendTimeout, 1500*time.Millisecond)
	setDur(&c.PGAway, PGAwayDefault)
	setDur(&c.CloudAPIOutage, CloudAPIOutageDefault)
	if c.HostileCores == 0 {
		c.HostileCores = HostileCoresDefault
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Workers < 2:
		return errors.New("--workers: at least 2 (one is stalled or killed at times)")
	case c.Tenants < 2:
		return errors.New("--tenants: at least 2 (tenant isolation is probed)")
	case c.Conversations < c.Tenants:
		return errors.New("--conversations: at least one per tenant")
	case len(c.Exec) == 0:
		return errors.New("the ordo binary is required (--ordo)")
	case c.RollingDeploys < 0:
		return errors.New("--rolling-deploys: 0 or more")
	case c.OperatorResolves < 0:
		return errors.New("--operator-resolves: 0 or more")
	case c.SQLBatch < 0:
		return errors.New("--sql-batch: 0 or more")
	case c.Clients < 1 || c.Rate <= 0:
		return errors.New("--clients and --rate must be positive")
	case c.WorkerKillMax < c.WorkerKillMin:
		return errors.New("worker kill interval: max below min")
	case c.HostileFor < 0:
		return errors.New("--hostile: 0 or more")
	case c.HostileFor > 0 && c.Duration < 2*c.HostileFor+15*time.Second:
		return fmt.Errorf("--duration: at least twice --hostile plus 15s (%s): the flood, a window as long before it to compare with, and load after it", 2*c.HostileFor+15*time.Second)
	case c.Duration < c.stallFor()+5*time.Second:
		return fmt.Errorf("--duration: at least %s, for a worker stall past its lease", c.stallFor()+5*time.Second)
	}
	return nil
}

// FailoverEvery is how much load an HA run has per failover fault of each
// kind (Config.Failovers).
const FailoverEvery = 2 * time.Minute

// stallFor is how long a worker stays SIGSTOPped: past its lease twice
// (Postgres ends its sessions, releasing its conversations, and their ready
// rows are due again: another worker takes them over), and a little more.
func (c Config) stallFor() time.Duration {
	return 2*c.Lease + 4*time.Second
}

// run is the state of one run, shared by its parts.
type run struct {
	cfg     Config
	start   time.Time
	log     *faultLog
	cluster *pgcluster.Cluster
	ha      *hacluster.Cluster // with --ha, instead of cluster
	dbURL   string
	env     []string // the ordo processes' environment
	// build is the command ordo's processes and operator commands run:
	// cfg.Previous until the upgrade, then cfg.Exec (fault_upgrade.go).
	buildMu sync.Mutex
	build   []string
	// upgraded: the upgrade replaced every process (fault_upgrade.go);
	// upgradeFailed: its migrate failed so.
	upgraded      bool
	upgradeFailed string
	upgradeSkew   [2]time.Time // when the build before ran on the new schema
	apiURL        string
	api           *proc.Proc
	workers       []*proc.Proc
	provider      *chaosProvider
	handler       *chaosHandler
	tenants       []chaosTenant
	latency       latencyLog // the real clients' waits, for the hostile flood

	windowMu       sync.Mutex
	windows        []faultWindow         // fault_rolling_deploy.go
	hostile        []hostileRecord       // fault_hostile_flood.go
	resolutions    map[string]string     // fault_operator_resolve.go: tenant index and message id → replayed|skipped
	replays        map[chaosConvKey]int  // fault_operator_resolve.go: replays per conversation
	failovers      []haFault             // fault_ha_*.go
	ledger         *chaosLedger          // the clients' ledger, once the load starts
	pgAways        []pgAwayRecord        // fault_pg_away.go
	handlerOutages []handlerOutageRecord // fault_handler_outage.go

	answers    answerLog       // the API's answers to the clients during a Postgres outage
	exclusives []exclusiveSpan // when each exclusive fault ran (fault.go)
	spans      []faultSpan     // every fault injected, from injection to recovery (fault.go)
	// settled is when the last fault that breaks ordo's processes or
	// Postgres (not an independent one) had recovered (fault.go).
	settled     time.Time
	partitions  []partitionRecord // fault_worker_*_cut.go
	workerAddrs []string          // each worker's listener: /healthz, /readyz, /metrics
	netMu       sync.Mutex
	net         network // the proxies between the processes and Postgres, the workers and the Cloud API
}

// chaosTenant is a tenant as the clients know it.
type chaosTenant struct {
	slug          string
	apiKey        string
	phoneNumberID string
	accessToken   string
	handlerSecret string
	inbound       bool   // some of its messages are inbound, answered by the handler
	ambiguous     string // its policy for ambiguous sends: resend or reconcile
}

// Run runs the whole thing and returns the checker's report, which it has
// printed to cfg.Out. An error means the run could not be carried out (not
// that a check failed).
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "ordo-chaos-"); err != nil {
			return nil, err
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, start: time.Now(), log: &faultLog{w: cfg.Out, start: time.Now()}}
	r.build = cfg.Exec
	if len(cfg.Previous) > 0 {
		r.build = cfg.Previous
	}
	defer func() {
		r.stopAll()
		if r.cluster != nil {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			_ = r.cluster.Stop(stopCtx)
			cancel()
		}
		if r.ha != nil {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			r.ha.Stop(stopCtx)
			cancel()
		}
		if cfg.Dir == "" && err == nil && rep != nil && rep.Failed() == 0 {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintf(cfg.Out, "logs and cluster kept in %s\n", dir)
		}
	}()

	fmt.Fprintf(cfg.Out, "ordo chaos: seed %d, %s of load, %d workers, %d tenants, %d conversations, %d clients at %.0f msg/s\n",
		cfg.Seed, cfg.Duration, cfg.Workers, cfg.Tenants, cfg.Conversations, cfg.Clients, cfg.Rate)
	fmt.Fprintf(cfg.Out, "load average %s\n", loadAverage())
	if err := r.setUp(ctx, dir); err != nil {
		return nil, err
	}
	return r.exercise(ctx)
}

// setUp starts Postgres, migrates, creates the tenants, starts the fake
// provider, the handler and the ordo processes.
func (r *run) setUp(ctx context.Context, dir string) error {
	cfg := r.cfg
	var err error
	// Fast skips fsync, which only matters if the machine itself crashes;
	// synchronous_commit stays on, so a 2xx is in the WAL before it is
	// answered and an immediate restart (a crash of Postgres) keeps it.
	if cfg.HA {
		if err := r.startHA(ctx, dir); err != nil {
			return err
		}
	} else {
		pgPort, err := chaosFreePort()
		if err != nil {
			return err
		}
		r.cluster, err = pgcluster.Start(ctx, pgcluster.Config{
			Dir:      filepath.Join(dir, "pg"),
			Port:     pgPort,
			Fast:     true,
			Settings: chaosPGSettings,
		})
		if err != nil {
			return err
		}
		r.dbURL = r.cluster.URL("postgres")
		r.log.printf("postgres started in %s", r.cluster.Dir)
	}
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		return err
	}
	r.provider = newChaosProvider(cfg.Seed, cfg.SendTimeout)
	r.handler = newChaosHandler(cfg.Seed)
	apiPort, err := chaosFreePort()
	if err != nil {
		return err
	}
	apiAddr := "127.0.0.1:" + strconv.Itoa(apiPort)
	r.apiURL = "http://" + apiAddr
	r.env = append(os.Environ(), cfg.ExecEnv...)
	r.env = append(r.env,
		"DATABASE_URL="+r.dbURL,
		"ORDO_MASTER_KEYS="+key.Format(),
		"ORDO_ADDR="+apiAddr,
		"ORDO_WHATSAPP_API_URL="+r.provider.URL()+"/v23.0",
		// info: River says at info when a job fails, e.g. a drain that
		// lost its connection while its worker was stalled.
		"ORDO_LOG_LEVEL=info",
	)
	if _, err := r.ordo(ctx, nil, "migrate", "up"); err != nil {
		return err
	}
	if err := r.createTenants(ctx); err != nil {
		return err
	}
	r.log.printf("migrated; %d tenants created", len(r.tenants))

	r.api = r.newProc(dir, "api", "serve", "--role", "api")
	for i := range cfg.Workers {
		// Its probes' listener, on a port of its own that the soak reads
		// its metrics from.
		port, err := chaosFreePort()
		if err != nil {
			return err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		r.workerAddrs = append(r.workerAddrs, addr)
		r.workers = append(r.workers, r.newProc(dir, "worker-"+strconv.Itoa(i+1), "serve", "--role", "worker",
			"--addr", addr,
			"--workers", "16",
			"--lease", cfg.Lease.String(),
			"--send-timeout", cfg.SendTimeout.String(),
			"--handler-timeout", cfg.SendTimeout.String(),
			"--reconcile-wait", "2s",
			"--retry-max", "5s"))
	}
	for _, p := range append([]*proc.Proc{r.api}, r.workers...) {
		if err := p.Start(); err != nil {
			return err
		}
	}
	if err := r.waitAPI(ctx, time.Minute); err != nil {
		return err
	}
	r.log.printf("api and %d workers up", len(r.workers))
	return nil
}

// createTenants creates the tenants through the operator commands, as an
// operator would: tenant create, credential set, tenant update.
func (r *run) createTenants(ctx context.Context) error {
	for i := range r.cfg.Tenants {
		t := chaosTenant{
			slug:          "chaos-" + strconv.Itoa(i),
			phoneNumberID: strconv.Itoa(1000100 + i),
			accessToken:   "EAAG-chaos-token-" + strconv.Itoa(i),
			inbound:       i == 0, // the first tenant has a handler and inbound messages
		}
		args := []string{"tenant", "create", "--slug", t.slug, "--name", "Chaos " + strconv.Itoa(i)}
		if t.inbound {
			args = append(args, "--handler-url", r.handler.URL()+"/"+t.slug)
		}
		out, err := r.ordo(ctx, nil, args...)
		if err != nil {
			return err
		}
		var created struct {
			APIKey        string `json:"api_key"`
			HandlerSecret string `json:"handler_secret"`
		}
		if err := json.Unmarshal(out, &created); err != nil || created.APIKey == "" {
			return fmt.Errorf("ordo tenant create: unexpected output %q", out)
		}
		t.apiKey, t.handlerSecret = created.APIKey, created.HandlerSecret
		cred := fmt.Sprintf(`{"phone_number_id":%q,"access_token":%q,"app_secret":"chaos-app-secret","verify_token":"chaos-verify"}`,
			t.phoneNumberID, t.accessToken)
		if _, err := r.ordo(ctx, []byte(cred), "credential", "set", "--tenant", t.slug, "--name", "whatsapp", "--from-file", "-"); err != nil {
			return err
		}
		// skip: a permanent failure dead-letters its message and the
		// conversation goes on, so the rest of the run still checks it.
		// Ambiguous sends: resend at once for all but one tenant, which
		// reconciles (waits, briefly, for a status webhook that the fake
		// never sends, then resends). max_attempts 25: only permanent
		// failures may dead-letter, never a streak of injected ones.
		ambiguous := "resend"
		if i == 1 {
			ambiguous = "reconcile"
		}
		t.ambiguous = ambiguous
		if _, err := r.ordo(ctx, nil, "tenant", "update", "--slug", t.slug,
			"--on-dead-letter", "skip", "--ambiguous", ambiguous, "--max-attempts", "25",
			// The fake handler is safe to call twice, and a stalled or
			// killed worker's handler call times out: retried, as an n8n
			// workflow's is not by default.
			"--retry-timeouts",
			// The last tenant is paced low: many of its conversations wait
			// on their number's send slots.
			"--send-rate", strconv.Itoa(chaosSendRate(i, r.cfg.Tenants))); err != nil {
			return err
		}
		r.provider.allow(t.phoneNumberID, t.accessToken)
		r.handler.allow(t.slug, t.handlerSecret)
		r.tenants = append(r.tenants, t)
	}
	return nil
}

// exercise runs load and faults, waits for quiescence and checks.
func (r *run) exercise(ctx context.Context) (*Report, error) {
	cfg := r.cfg
	// The clock of the fault plan and of the log starts with the load.
	r.start = time.Now()
	r.log.mu.Lock()
	r.log.start = r.start
	r.log.mu.Unlock()
	ld := newChaosLoad(r)
	r.ledger = ld.ledger
	r.provider.watch(ld.ledger)
	tenantOf := make(map[string]int)
	for i, t := range r.tenants {
		tenantOf[t.slug] = i
	}
	r.handler.firstCall = func(slug, id string) { r.provider.judgeHandlerCall(tenantOf[slug], id) }
	bad := newChaosProber(r, ld.ledger)
	faults := newFaultPlan(cfg)
	faults.print(r.log)

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	// In-flight offers keep retrying after the load stops, until answered
	// or 2 minutes later.
	answerCtx, stopAnswering := context.WithCancel(ctx)
	defer stopAnswering()
	done := make(chan struct{}) // closed once every fault is over
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(cfg.Duration):
		}
		if cfg.HA || len(cfg.Previous) > 0 {
			// A failover queued behind other exclusive faults past the
			// load's end is still met by the load: its recovery is
			// measured on the clients' answers. So is the hostile flood
			// an upgrade's 25 s queued that late (a run from 28339bc met
			// it with no client left: "0 REST").
			select {
			case <-ctx.Done():
			case <-done:
			}
		}
		stopLoad()
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Minute):
		}
		stopAnswering()
	}()

	meta := newChaosMeta(r)
	metaCtx, stopMeta := context.WithCancel(ctx)
	defer stopMeta()
	metaDone := make(chan struct{})
	go func() {
		defer close(metaDone)
		meta.runStatuses(metaCtx)
	}()
	go func() {
		defer close(done)
		r.runFaults(ctx, faults)
	}()
	stressers := []stresser{ld, bad}
	var sqlLoad *sqlBatches
	if cfg.SQLBatch > 0 {
		sqlLoad = newSQLBatches(r, ld.ledger)
		stressers = append(stressers, sqlLoad)
	}
	var stressing sync.WaitGroup
	for _, s := range stressers {
		stressing.Add(1)
		go func() {
			defer stressing.Done()
			s.Stress(loadCtx, answerCtx)
		}()
	}
	var sampler *soakSampler
	samplerDone := make(chan struct{})
	if cfg.SoakDir != "" {
		sampler = newSoakSampler(r)
		go func() {
			defer close(samplerDone)
			sampler.run(loadCtx)
		}()
	} else {
		close(samplerDone)
	}
	stressing.Wait()
	<-samplerDone
	<-done // every process is back up, every stalled one resumed
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	r.log.printf("load stopped: %d messages offered; waiting for the system to settle", ld.Counts()["messages"])
	if sqlLoad != nil {
		c := sqlLoad.Counts()
		r.log.printf("sql batches: %d transactions committed (%d messages), %d rolled back, %d retries of a transaction in doubt, %d never settled",
			c["committed"], c["messages"], c["rolled_back"], c["retries"], c["unknown"])
	}

	settled, waited := r.quiesce(ctx, ld.ledger)
	// Late sends of a stalled worker or a reconcile have a moment to show;
	// ordo writes down its last outcomes; Meta's side reports the last
	// deliveries.
	time.Sleep(2 * time.Second)
	unfinished := r.engineView(ctx, ld.ledger, time.Now().Add(max(cfg.Quiesce-waited, 30*time.Second)))
	for deadline := time.Now().Add(time.Minute); meta.pending() > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	stopMeta()
	<-metaDone
	deadLetters, dlErr := r.deadLetters(ctx)
	var halted []string
	if len(r.handlerOutages) > 0 {
		halted = r.haltedConversations(ctx)
	}
	r.stopAll()
	r.log.printf("processes stopped")
	ambiguous, ambErr := r.ambiguousCounts(ctx)

	in := chaosInput{
		ledger:      ld.ledger,
		sends:       r.provider.Sends(),
		provider:    r.provider.record(),
		handler:     r.handler.record(),
		meta:        meta.record(),
		ambiguous:   ambiguous,
		ambErr:      ambErr,
		deadLetters: deadLetters,
		dlErr:       dlErr,
		unfinished:  unfinished,
		bad:         bad.summary(),
		faults:      r.log.counts(),
		planned:     faults.kinds(),
		settled:     settled,
		waited:      waited,
		quiesce:     cfg.Quiesce,
		logProblems: r.logProblems(),
		deploys:     append(r.faultWindows(faultRollingDeploy), r.faultWindows(faultUpgrade)...),
		resolves:    r.faultWindows(faultOperatorResolve),
		replays:     r.replaysPer(),
		hostile:     r.hostileRecords(),
		ha:          cfg.HA,
		failovers:   r.failoverRecords(),

		pgAways:        r.pgAways,
		handlerOutages: r.handlerOutages,
		handledAt:      r.handler.srv.handled(),
		halted:         halted,
		exclusives:     r.exclusives,
		spans:          r.faultSpans(),
		start:          r.start,
		partitions:     r.partitionRecords(),
		workerSends:    r.workerSends(),
		lease:          cfg.Lease,
		upgraded:       r.upgraded,
		upgradeFailed:  r.upgradeFailed,
		upgradeSkew:    r.upgradeSkew,
	}
	for _, t := range r.tenants {
		in.policies = append(in.policies, t.ambiguous)
	}
	rep := chaosJudge(in)
	if sampler != nil {
		if err := r.finishSoak(rep, sampler.samples); err != nil {
			return nil, err
		}
	}
	rep.print(cfg.Out)
	return rep, nil
}

// chaosFreePort returns a port free on 127.0.0.1 now, below the range the
// kernel hands out to outgoing connections: the API process and Postgres
// are restarted on their port, and while they are down an outgoing
// connection must not take it.
func chaosFreePort() (int, error) {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				lo = n
			}
		}
	}
	for try := 0; lo > 12000 && try < 100; try++ {
		port := 10000 + rand.IntN(lo-10000)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			ln.Close()
			return port, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// chaosRand returns the run's random source for one purpose: the same seed
// and stream give the same choices.
func chaosRand(seed uint64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream))
}

// chaosSendRate is tenant i's send rate: Meta's default 80/s, but 25/s for
// the last of several tenants, about what it is offered under the default
// load: its bursts (a SQL batch, a redelivery storm) queue its
// conversations on the number's send slots, and it still settles in time;
// and unpaced (0) for the first of three or more, whose outbound messages
// then go through the batched drain (jobs/batch.go), which paced tenants
// never use.
func chaosSendRate(i, tenants int) int {
	switch {
	case tenants > 1 && i == tenants-1:
		return 25
	case tenants > 2 && i == 0:
		return 0
	}
	return 80
}
