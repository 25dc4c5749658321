package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"golang.org/x/sync/errgroup"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/cmd/internal/pgcluster"
	"github.com/ordo-dev/ordo/cmd/internal/proc"
	ordosql "github.com/ordo-dev/ordo/sql"
	"github.com/ordo-dev/ordo/tenants"
)

// Template databases every run's fresh database is copied from.
const (
	ordoTemplate  = "bench_ordo"  // ordo's migrations (ordo, sql-floor)
	riverTemplate = "bench_river" // River's own migrations, schema public (baselines)
)

// benchMaxConnections leaves room for a system's pool (workers + 25), the
// bench's own pools and sql-floor's sessions.
const benchMaxConnections = "400"

// benchEnv is what every run shares: the cluster, Redis, the master key.
type benchEnv struct {
	env        *cli.Env
	cfg        benchConfig
	dir        string
	cluster    *pgcluster.Cluster
	admin      *pgxpool.Pool // the postgres database
	redisAddr  string
	redis      *proc.Proc
	masterKey  tenants.MasterKey
	statements bool // pg_stat_statements is loaded
	pgVersion  string
	pgSettings [][2]string
	startLoad  string
	runs       int
}

// startBenchEnv starts the durable cluster, Redis when redis-lock runs, and
// the template databases.
func startBenchEnv(ctx context.Context, env *cli.Env, cfg benchConfig) (_ *benchEnv, err error) {
	b := &benchEnv{env: env, cfg: cfg, startLoad: loadAverage()}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if b.masterKey, err = tenants.GenerateMasterKey(); err != nil {
		return nil, err
	}
	if b.dir, err = os.MkdirTemp("", "ordo-bench-"); err != nil {
		return nil, fmt.Errorf("create bench directory: %w", err)
	}
	// Durability as shipped: Fast stays false (fsync, synchronous_commit and
	// full_page_writes on). pg_stat_statements only when profiling.
	settings := map[string]string{"max_connections": benchMaxConnections}
	if cfg.profile != "" {
		if bin, err := pgcluster.FindBinaries(); err == nil {
			if _, err := os.Stat(filepath.Join(bin, "..", "lib", "pg_stat_statements.so")); err == nil {
				settings["shared_preload_libraries"] = "pg_stat_statements"
				settings["pg_stat_statements.track"] = "all"
				b.statements = true
			}
		}
	}
	b.logf("starting a private PostgreSQL cluster (durable: fsync on, synchronous_commit on) in %s", b.dir)
	b.cluster, err = pgcluster.Start(ctx, pgcluster.Config{Dir: filepath.Join(b.dir, "pg"), Settings: settings, Logger: env.Logger})
	if err != nil {
		return nil, err
	}
	if b.admin, err = pgxpool.New(ctx, b.cluster.URL("postgres")+"&pool_max_conns=4"); err != nil {
		return nil, err
	}
	if err := b.readServer(ctx); err != nil {
		return nil, err
	}
	if b.statements {
		if _, err := b.admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
			return nil, fmt.Errorf("pg_stat_statements: %w", err)
		}
	}
	if err := b.makeTemplates(ctx); err != nil {
		return nil, err
	}
	if slices.Contains(cfg.systems, "redis-lock") {
		if err := b.startRedis(ctx); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (b *benchEnv) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if b.redis != nil {
		_, _ = b.redis.Kill()
	}
	if b.admin != nil {
		b.admin.Close()
	}
	if b.cluster != nil {
		if err := b.cluster.Stop(ctx); err != nil {
			b.logf("%v", err)
			pgcluster.StopLeftover(b.cluster.Dir)
		}
	}
	if b.dir != "" && !b.cfg.keep {
		_ = os.RemoveAll(b.dir)
	} else if b.dir != "" {
		b.logf("kept %s", b.dir)
	}
}

// readServer records the server's version and durability settings for the
// report.
func (b *benchEnv) readServer(ctx context.Context) error {
	if err := b.admin.QueryRow(ctx, "SHOW server_version").Scan(&b.pgVersion); err != nil {
		return err
	}
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "wal_sync_method", "shared_buffers", "max_connections", "max_wal_size"} {
		var v string
		if err := b.admin.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return err
		}
		b.pgSettings = append(b.pgSettings, [2]string{name, v})
	}
	for _, s := range b.pgSettings {
		if (s[0] == "fsync" || s[0] == "synchronous_commit") && s[1] != "on" {
			return fmt.Errorf("the bench cluster runs with %s=%s: a benchmark without durability measures nothing", s[0], s[1])
		}
	}
	return nil
}

// makeTemplates migrates the two template databases once; every run copies
// one (CREATE DATABASE … TEMPLATE), which is much faster than migrating.
func (b *benchEnv) makeTemplates(ctx context.Context) error {
	if err := b.cluster.CreateDatabase(ctx, ordoTemplate); err != nil {
		return err
	}
	if err := ordosql.Up(b.cluster.URL(ordoTemplate)); err != nil {
		return err
	}
	if err := b.loadDedupe(ctx); err != nil {
		return err
	}
	if err := b.cluster.CreateDatabase(ctx, riverTemplate); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, b.cluster.URL(riverTemplate))
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: "public"})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	return nil
}

// newDatabase copies template into a fresh database for one run; drop
// removes it so runs never see each other's rows.
func (b *benchEnv) newDatabase(ctx context.Context, template string) (name, url string, drop func(), err error) {
	b.runs++
	name = fmt.Sprintf("run_%d", b.runs)
	strategy := "" // WAL_LOG, Postgres' default: cheap for a small template
	if b.cfg.dedupeRows > 0 {
		strategy = " STRATEGY FILE_COPY" // gigabytes of dedupe records: copy files, not WAL
	}
	_, err = b.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize()+strategy)
	if err != nil {
		return "", "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	drop = func() {
		ctx := context.WithoutCancel(ctx)
		if _, err := b.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			b.logf("drop database %s: %v", name, err)
		}
	}
	return name, b.cluster.URL(name), drop, nil
}

// checkpoint flushes the previous run's dirty pages, so that one run's
// checkpoint does not land in the next one's numbers.
func (b *benchEnv) checkpoint(ctx context.Context) error {
	if _, err := b.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// benchCredential is the WhatsApp credential of bench tenant t.
func benchCredential(t int) map[string]string {
	return map[string]string{
		"phone_number_id": strconv.Itoa(2000000 + t),
		"access_token":    "bench-token-" + strconv.Itoa(t),
		"app_secret":      "bench-app-secret",
		"verify_token":    "bench-verify",
	}
}

// ordoTenants creates n tenants through the tenant store, each with a
// WhatsApp credential in the vault, and returns their API keys.
func (b *benchEnv) ordoTenants(ctx context.Context, url string, n int) ([]string, error) {
	pool, err := pgxpool.New(ctx, url+"&pool_max_conns=8")
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	vault, err := tenants.NewVault(pool, []tenants.MasterKey{b.masterKey})
	if err != nil {
		return nil, err
	}
	store := tenants.NewStore(pool, vault)
	keys := make([]string, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for t := range n {
		g.Go(func() error {
			created, err := store.Create(gctx, tenants.CreateParams{Slug: "bench-" + strconv.Itoa(t)})
			if err != nil {
				return fmt.Errorf("create tenant: %w", err)
			}
			if _, err := store.Update(gctx, created.Tenant.Slug, tenants.UpdateParams{SendRate: &b.cfg.sendRate}); err != nil {
				return fmt.Errorf("set send rate: %w", err)
			}
			cred, _ := json.Marshal(benchCredential(t))
			if err := vault.Put(gctx, nil, created.Tenant.ID, "whatsapp", cred); err != nil {
				return err
			}
			keys[t] = created.APIKey
			return nil
		})
	}
	return keys, g.Wait()
}

// startRedis starts redis-server on a free loopback port, installing it
// from Debian first when it is missing.
func (b *benchEnv) startRedis(ctx context.Context) error {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if path, err = installRedis(ctx, b); err != nil {
			return err
		}
	}
	port, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	b.redisAddr = "127.0.0.1:" + strconv.Itoa(port)
	b.redis = proc.New(proc.Config{
		Name: "redis-server",
		Argv: []string{path, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", b.dir, "--loglevel", "warning"},
		LogPath: filepath.Join(b.dir, "redis.log"),
	})
	if err := b.redis.Start(); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: b.redisAddr})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := rdb.Ping(ctx).Err(); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s does not answer: %w", b.redisAddr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var version string
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				version = v
			}
		}
	}
	b.logf("redis-server %s on %s (loopback, no persistence: it holds locks only)", version, b.redisAddr)
	return nil
}

const redisInstall = "apt-get install -y redis-server"

// installRedis runs apt-get as root; anyone else gets the command to run.
func installRedis(ctx context.Context, b *benchEnv) (string, error) {
	if os.Geteuid() != 0 || runtime.GOOS != "linux" {
		return "", fmt.Errorf("redis-server is not installed (the redis-lock baseline needs it): run `sudo %s`, or leave redis-lock out with --systems ordo,river-plain,sql-floor", redisInstall)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", errors.New("redis-server is not installed and there is no apt-get: install redis-server, or leave redis-lock out with --systems ordo,river-plain,sql-floor")
	}
	b.logf("redis-server is missing; installing it: %s", redisInstall)
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", "redis-server")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = b.env.Stderr, b.env.Stderr
		return cmd.Run()
	}
	if err := install(); err != nil {
		b.logf("apt-get install failed (%v); refreshing the package lists: apt-get update", err)
		update := exec.CommandContext(ctx, "apt-get", "update")
		update.Stdout, update.Stderr = b.env.Stderr, b.env.Stderr
		if err := update.Run(); err != nil {
			return "", fmt.Errorf("apt-get update: %w (install redis-server yourself: %s)", err, redisInstall)
		}
		if err := install(); err != nil {
			return "", fmt.Errorf("%s: %w", redisInstall, err)
		}
	}
	return exec.LookPath("redis-server")
}

func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// loadAverage is /proc/loadavg's first three fields ("?" off Linux).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// peakRSSMB is process pid's peak resident set (VmHWM) in MB; 0 if unknown.
func peakRSSMB(pid int) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return kb / 1024
			}
		}
	}
	return 0
}

// statementsTop writes the run's top statements by total time to file.
func (b *benchEnv) statementsTop(ctx context.Context, database, url, file string) error {
	rows, err := b.admin.Query(ctx, `
SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 3), rows,
       CASE WHEN toplevel THEN '' ELSE '  ' END || regexp_replace(query, '\s+', ' ', 'g')
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = $1 ORDER BY toplevel DESC, total_exec_time DESC LIMIT 60`, database)
	if err != nil {
		return err
	}
	defer rows.Close()
	var sb strings.Builder
	fmt.Fprintf(&sb, "%10s %12s %10s %10s  %s\n", "calls", "total_ms", "mean_ms", "rows", "query (top-level first; nested ones indented)")
	for rows.Next() {
		var (
			calls, n    int64
			total, mean float64
			query       string
		)
		if err := rows.Scan(&calls, &total, &mean, &n, &query); err != nil {
			return err
		}
		if len(query) > 220 {
			query = query[:220] + "…"
		}
		fmt.Fprintf(&sb, "%10d %12.1f %10.3f %10d  %s\n", calls, total, mean, n, query)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := tableStats(ctx, url, &sb); err != nil {
		return err
	}
	return os.WriteFile(file, []byte(sb.String()), 0o644)
}

// resetStatements empties pg_stat_statements before a profiled run.
func (b *benchEnv) resetStatements(ctx context.Context) error {
	if !b.statements {
		return nil
	}
	_, err := b.admin.Exec(ctx, "SELECT pg_stat_statements_reset()")
	return err
}

// printHeader says what is measured on what.
func (b *benchEnv) printHeader() {
	w := b.env.Stdout
	var mem string
	if info, err := os.ReadFile("/proc/meminfo"); err == nil {
		if line, _, ok := strings.Cut(string(info), "\n"); ok {
			mem = strings.Join(strings.Fields(line)[1:], " ")
		}
	}
	fmt.Fprintf(w, "ordo bench — %s, %d CPUs, memory %s, load average at the start %s\n",
		time.Now().Format(time.RFC3339), runtime.NumCPU(), mem, b.startLoad)
	var s []string
	for _, kv := range b.pgSettings {
		s = append(s, kv[0]+"="+kv[1])
	}
	fmt.Fprintf(w, "PostgreSQL %s (durable, as shipped): %s\n", b.pgVersion, strings.Join(s, " "))
	fmt.Fprintf(w, "load: %d concurrent clients; each system sends with %d workers\n", b.cfg.concurrency, b.cfg.workers)
}

// procStat is a process's parent and CPU times from /proc/PID/stat.
type procStat struct {
	ppid     int
	cpu      time.Duration // utime + stime
	children time.Duration // cutime + cstime: its reaped children's
}

func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	// The command name, in parentheses, may hold spaces: count from after it.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return procStat{}, false
	}
	ticks := func(s string) time.Duration {
		n, _ := strconv.ParseInt(s, 10, 64)
		return time.Duration(n) * time.Second / clockTicks
	}
	ppid, _ := strconv.Atoi(f[1])
	return procStat{ppid: ppid, cpu: ticks(f[11]) + ticks(f[12]), children: ticks(f[13]) + ticks(f[14])}, true
}

// clockTicks is USER_HZ, 100 on every Linux the bench runs on.
const clockTicks = 100

// postgresCPU is the CPU time the cluster has used so far: its live
// processes' plus what the postmaster's exited children (closed sessions)
// used. Differences of it say what a run cost the database, whatever else
// runs on the machine.
func (b *benchEnv) postgresCPU() time.Duration {
	data, err := os.ReadFile(filepath.Join(b.cluster.Dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	if err != nil {
		return 0
	}
	st, ok := readProcStat(pm)
	if !ok {
		return 0
	}
	total := st.cpu + st.children
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, ok := readProcStat(pid); ok && s.ppid == pm {
			total += s.cpu
		}
	}
	return total
}

// waitSessionsGone waits (up to 10s) until no session is left on database:
// a session reports its statistics, and its CPU time reaches the
// postmaster's account, only when it has ended.
func (b *benchEnv) waitSessionsGone(ctx context.Context, database string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		var n int
		if err := b.admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", database).Scan(&n); err != nil || n == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// xacts is how many transactions database has ended so far, committed or
// rolled back. Every statement outside an explicit transaction is one, so
// per message it counts the round trips a system makes to the database.
func (b *benchEnv) xacts(ctx context.Context, database string) int64 {
	var n int64
	// The statistics lag a little behind; a run is long enough not to care.
	_ = b.admin.QueryRow(ctx, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", database).Scan(&n)
	return n
}

// xactsPerMessage is the transactions ended since before per message.
func (b *benchEnv) xactsPerMessage(ctx context.Context, database string, before int64, messages int) float64 {
	if messages == 0 {
		return 0
	}
	return round2(float64(b.xacts(ctx, database)-before) / float64(messages))
}

// tableStats writes the writes each table of the run's database took, and
// how many updates were HOT (no index touched).
func tableStats(ctx context.Context, url string, sb *strings.Builder) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `
SELECT schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, seq_scan, idx_scan,
       autovacuum_count, autoanalyze_count
FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY n_tup_upd + n_tup_ins DESC`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(sb, "\n%-28s %10s %10s %10s %10s %10s %10s %10s %10s\n", "table", "inserts", "updates", "hot", "deletes", "seq_scans", "idx_scans", "autovac", "autoanlz")
	for rows.Next() {
		var (
			name                   string
			ins, upd, hot, del, ss int64
			is                     *int64
			vac, anl               int64
		)
		if err := rows.Scan(&name, &ins, &upd, &hot, &del, &ss, &is, &vac, &anl); err != nil {
			return err
		}
		var idx int64
		if is != nil {
			idx = *is
		}
		fmt.Fprintf(sb, "%-28s %10d %10d %10d %10d %10d %10d %10d %10d\n", name, ins, upd, hot, del, ss, idx, vac, anl)
	}
	return rows.Err()
}

// walLSN is the cluster's current WAL position; differences of it are the
// WAL a run wrote (the durable bytes every commit waits to flush).
func (b *benchEnv) walLSN(ctx context.Context) string {
	var lsn string
	_ = b.admin.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	return lsn
}

// walKBPerMessage is the WAL written since before, in KB per message.
func (b *benchEnv) walKBPerMessage(ctx context.Context, before string, messages int) float64 {
	var bytes float64
	if before == "" || messages == 0 {
		return 0
	}
	if err := b.admin.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)", before).Scan(&bytes); err != nil {
		return 0
	}
	return round2(bytes / 1024 / float64(messages))
}
