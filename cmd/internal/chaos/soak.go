package chaos

// The soak (make soak): the crash run made long and sparse — load at half
// the capacity, a fault every few minutes — while a sampler reads, each
// minute, what grows when something leaks: each ordo process's RSS,
// goroutines and open files, the database's table and index sizes and dead
// tuples, and the clients' p99. At the end it writes a table and a plot and
// judges each series flat or bounded (soak_judge.go); the verdicts join the
// run's checks.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// SoakSampleEveryDefault is how often a soak samples.
const SoakSampleEveryDefault = time.Minute

// SoakCapacityDefault is the run's capacity in messages per second, from
// the harness's own pacing: a third of the load goes to a tenant paced at
// 25 sends a second (chaosSendRate), so about 75 msg/s is what the three
// tenants take together before that tenant's conversations queue. A soak
// offers half of it, REST and SQL together, unless --rate says otherwise.
const SoakCapacityDefault = 75

// SoakSQLBatchDefault is a soak's SQL application batch (Config.SQLBatch):
// smaller than a crash run's, so that most of the load is the REST
// clients'.
const SoakSQLBatchDefault = 5

// SoakRESTRate is the REST clients' rate that, with the SQL application's
// batches of sqlBatch (sqlBatchers sessions, each a transaction about every
// second, one in four rolled back), offers half of capacity.
func SoakRESTRate(capacity float64, sqlBatch int) float64 {
	return max(1, capacity/2-float64(sqlBatchers*sqlBatch)*3/4)
}

// withSoakDefaults makes a run a soak: faults every few minutes instead of
// every few seconds, and no hostile flood (its RSS peak is the flood's
// check, not a leak).
func (c Config) withSoakDefaults() Config {
	if c.SoakDir == "" {
		return c
	}
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if c.Rate == 0 {
		c.Rate = float64(SoakCapacityDefault) / 2
	}
	if c.SoakSampleEvery == 0 {
		c.SoakSampleEvery = SoakSampleEveryDefault
	}
	if c.WorkerKillMin == 0 {
		c.WorkerKillMin, c.WorkerKillMax = 3*time.Minute, 5*time.Minute
	}
	each := max(1, int(c.Duration/(20*time.Minute)))
	setInt(&c.APIKills, each)
	setInt(&c.PGRestarts, each)
	setInt(&c.Stalls, each)
	setInt(&c.Partitions, each)
	c.HostileFor = 0
	return c
}

// soakSample is one minute's reading.
type soakSample struct {
	at    time.Duration // from the start of the load
	procs map[string]soakProc
	// tableBytes and indexBytes sum every table of ordo's and River's;
	// messages counts ordo.messages' rows; deadTuples sums every table's
	// n_dead_tup (statistics an immediate restart of Postgres resets).
	tableBytes, indexBytes, messages, deadTuples int64
	// liveTuples sums every table's n_live_tup: autovacuum lets a table's
	// dead tuples grow with it (20% of its rows by default) before it
	// vacuums, so dead tuples are judged per live row.
	liveTuples int64
	// p99Accept is the clients' wait for a 2xx (retries included), p99Send
	// from the first offer of a message to the provider's first delivery
	// of its (first) text, over the requests of the minute before.
	p99Accept, p99Send time.Duration
	accepted, sent     int
	// load1 is the machine's one-minute load average: on a shared
	// machine, what the latencies are read against.
	load1 float64
}

// soakProc is one ordo process at a sample; -1 where it could not be read
// (down, restarting). What its goroutines and open files are made of
// (soak_conns.go): conns are the connections accepted on its port that it
// holds open, clientConns those of them the run's own clients hold open
// at their end, inFlight its HTTP requests being served, poolConns (of at
// most poolMax) its database pool's connections.
type soakProc struct {
	rssBytes, goroutines, openFiles int64
	conns, clientConns, inFlight    int64
	poolConns, poolMax              int64
}

// unreadProc is a process that could not be read.
var unreadProc = soakProc{-1, -1, -1, -1, -1, -1, -1, -1}

// soakSampler reads the samples.
type soakSampler struct {
	r       *run
	samples []soakSample
	// sendsSeen is how many of the provider's sends were read; firstSend
	// marks the texts whose first delivery is counted.
	sendsSeen int
	firstSent map[string]bool
	last      time.Time
}

func newSoakSampler(r *run) *soakSampler {
	return &soakSampler{r: r, firstSent: make(map[string]bool), last: time.Now()}
}

// run samples every SoakSampleEvery until ctx ends.
func (s *soakSampler) run(ctx context.Context) {
	t := time.NewTicker(s.r.cfg.SoakSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ctx.Err() != nil {
			return // the load ended with this tick: no half-read sample
		}
		// Each read has its own timeout; the load ending meanwhile must
		// not cut the sample short.
		smp := s.sample(context.WithoutCancel(ctx))
		s.samples = append(s.samples, smp)
		s.r.log.printf("soak sample: %s", smp.line())
	}
}

func (s *soakSampler) sample(ctx context.Context) soakSample {
	now := time.Now()
	smp := soakSample{at: now.Sub(s.r.start), procs: make(map[string]soakProc)}
	for name, p := range s.r.procsByName() {
		smp.procs[name] = readSoakProc(ctx, p.pid, p.metricsURL)
	}
	s.readDatabase(ctx, &smp)
	smp.load1 = -1
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				smp.load1 = v
			}
		}
	}
	rest, _ := s.r.latency.during(s.last, now)
	smp.accepted = len(rest)
	smp.p99Accept = p99(rest)
	sends := s.r.provider.Sends()
	var waits []time.Duration
	for _, snd := range sends[min(s.sendsSeen, len(sends)):] {
		k := chaosSendKey(snd.PhoneNumberID, snd.To, snd.Text)
		if s.firstSent[k] {
			continue
		}
		s.firstSent[k] = true
		if at, ok := s.r.ledger.offeredAt(k); ok {
			waits = append(waits, snd.At.Sub(at))
		}
	}
	s.sendsSeen = len(sends)
	smp.sent, smp.p99Send = len(waits), p99(waits)
	s.last = now
	return smp
}

const soakDBQuery = `
SELECT coalesce(sum(pg_table_size(c.oid)), 0)::bigint,
       coalesce(sum(pg_indexes_size(c.oid)), 0)::bigint,
       coalesce(sum(s.n_dead_tup), 0)::bigint,
       coalesce(sum(s.n_live_tup), 0)::bigint,
       (SELECT count(*) FROM ordo.messages)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'`

func (s *soakSampler) readDatabase(ctx context.Context, smp *soakSample) {
	smp.tableBytes, smp.indexBytes, smp.deadTuples, smp.liveTuples, smp.messages = -1, -1, -1, -1, -1
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.r.dbURL)
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_ = conn.QueryRow(ctx, soakDBQuery).Scan(&smp.tableBytes, &smp.indexBytes, &smp.deadTuples, &smp.liveTuples, &smp.messages)
}

// soakTarget is what the sampler needs of one ordo process.
type soakTarget struct {
	pid        int
	metricsURL string
}

// procsByName lists the ordo processes and where their metrics are.
func (r *run) procsByName() map[string]soakTarget {
	out := map[string]soakTarget{"api": {pid: r.api.Pid(), metricsURL: r.apiURL + "/metrics"}}
	for i, w := range r.workers {
		url := ""
		if i < len(r.workerAddrs) {
			url = "http://" + r.workerAddrs[i] + "/metrics"
		}
		out[w.Name()] = soakTarget{pid: w.Pid(), metricsURL: url}
	}
	return out
}

// readSoakProc reads a process's RSS, open files and sockets from /proc,
// the run's own connections to it, and its goroutines, requests in flight
// and pool connections from its /metrics.
func readSoakProc(ctx context.Context, pid int, metricsURL string) soakProc {
	out := unreadProc
	if pid <= 0 {
		return out
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				f := strings.Fields(rest)
				if len(f) >= 1 {
					if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
						out.rssBytes = kb << 10
					}
				}
			}
		}
	}
	if out.rssBytes < 0 {
		return out // gone (killed, restarting): nothing of it to read
	}
	if ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd"); err == nil {
		out.openFiles = int64(len(ents))
	}
	if port := urlPort(metricsURL); port > 0 {
		// Both ends at once, the process's first: a connection the
		// clients open in between shows at their end only.
		if socks, err := procSockets(pid); err == nil {
			out.conns = int64(acceptedOn(socks, port))
		}
		if socks, err := procSockets(os.Getpid()); err == nil && out.conns >= 0 {
			out.clientConns = int64(dialedTo(socks, port))
		}
	}
	if metricsURL != "" {
		m := readSoakMetrics(ctx, metricsURL)
		out.goroutines, out.inFlight, out.poolConns, out.poolMax = m.goroutines, m.inFlight, m.poolConns, m.poolMax
	}
	return out
}

func (s soakSample) line() string {
	var parts []string
	for _, name := range sortedKeys(s.procs) {
		p := s.procs[name]
		parts = append(parts, fmt.Sprintf("%s rss=%.1fMB g=%d fd=%d conns=%d/%d req=%d pool=%d", name, float64(p.rssBytes)/(1<<20), p.goroutines, p.openFiles,
			p.conns, p.clientConns, p.inFlight, p.poolConns))
	}
	return fmt.Sprintf("%s; tables=%.1fMB indexes=%.1fMB messages=%d dead=%d; rest_2xx=%d p99=%s first_sends=%d p99=%s; load %.1f",
		strings.Join(parts, ", "), float64(s.tableBytes)/(1<<20), float64(s.indexBytes)/(1<<20), s.messages, s.deadTuples,
		s.accepted, s.p99Accept.Round(time.Millisecond), s.sent, s.p99Send.Round(time.Millisecond), s.load1)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// finishSoak judges the samples, adds a check per series to the run's
// report, and writes the table and the plot to SoakDir.
func (r *run) finishSoak(rep *Report, samples []soakSample) error {
	cfg := r.cfg
	sr := soakReport{cfg: cfg, started: r.start, samples: samples}
	series := soakSeriesOf(samples)
	for _, s := range series {
		v := judgeSoakSeries(s, cfg.SoakSampleEvery)
		sr.verdicts = append(sr.verdicts, v)
		rep.add("soak: "+s.name+" flat or bounded", v.ok, v.why)
	}
	var sum strings.Builder
	rep.print(&sum)
	sr.summary = sum.String()
	if err := os.MkdirAll(cfg.SoakDir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	sr.writeMarkdown(&md)
	if err := os.WriteFile(filepath.Join(cfg.SoakDir, "report.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(cfg.SoakDir, "soak.png"))
	if err != nil {
		return err
	}
	if err := writeSoakPlot(f, series, cfg.SoakSampleEvery.Minutes()); err != nil {
		f.Close()
		return fmt.Errorf("soak plot: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	r.log.printf("soak report and plot written to %s", cfg.SoakDir)
	return nil
}
