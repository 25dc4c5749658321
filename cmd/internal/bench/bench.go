// Package bench is the benchmark (cmd/ordo-bench, `make bench`): ordo
// measured beside the field's ceiling, the field's usual pattern and the
// physical floor, judged by a fake Cloud API. It is a harness, linked only
// into its own binary, never into the product.
package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// The benchmark (`ordo-bench`, `make bench`) measures ordo side by side with
// the field's ceiling, the field's usual pattern and the physical floor, on
// one private, durable PostgreSQL cluster, with the same load for each:
//
//   - ordo: `ordo serve` (REST ingest → drain → send), in a child process;
//   - river-plain: an HTTP endpoint inserting one River job per message and
//     a River worker sending it (no order, no dedupe), in a child process;
//   - redis-lock: river-plain plus a Redis SET NX EX per conversation around
//     the send, a snooze when it is taken, DEL at the end;
//   - sql-floor: the bare SQL writes of one accepted-and-sent message in
//     ordo's schema, no HTTP, no queue, no send.
//
// Every HTTP system sends through jobs/whatsapp.Client to the same fake
// Cloud API (whatsapptest.Server) in the bench process, which is the judge:
// throughput, latency, duplicates, order violations and losses all come from
// what it received, never from what a system says about itself.
//
// Files: bench.go (command, flags, the run), bench_env.go (cluster, Redis,
// databases, tenants), bench_child.go (a system in its own process),
// bench_baseline.go (river-plain, redis-lock), bench_floor.go (sql-floor),
// bench_load.go (load generator), bench_report.go (numbers, table, JSON).

// Systems and scenarios, in the order they run and print.
var (
	benchSystems   = []string{"ordo", "river-plain", "redis-lock", "sql-floor"}
	benchScenarios = []string{"spread", "hot", "latency", "backlog", "noisy", "claim"}
)

// benchConfig is one `ordo-bench` run. Sizes default to what finishes in a
// few minutes on 2 cores; the sizes are given in each flag's help.
type benchConfig struct {
	scenarios []string
	systems   []string
	out       string
	// results is the Markdown file each run appends its table and targets
	// to (ResultsFileDefault); empty: none.
	results string
	// args is the command line, recorded with the results.
	args []string
	// concurrency is the load generator's concurrent HTTP clients (and
	// sql-floor's concurrent accepting sessions).
	concurrency int
	// workers is each system's concurrent senders: ordo's jobs.Config.Workers,
	// the baselines' River MaxWorkers, sql-floor's finishing sessions.
	workers int

	spreadConvs, spreadMsgs   int
	hotConvs, hotMsgs         int
	latencyRate, latencyConvs int
	latencyFor                time.Duration
	// latencyWarmup is how long the latency scenario offers its rate, to
	// the same conversations, before the measured run (every system alike).
	latencyWarmup             time.Duration
	backlogMsgs, backlogConvs int
	backlogTenants            int

	// sendRate is the bench tenants' send_rate (sends per second per phone
	// number; 0 unpaced). The fake Cloud API has no limit and the baselines
	// do not pace, so ordo does not either unless asked to.
	sendRate int

	redisTTL, redisSnooze time.Duration
	// stall is how long a run may go without a single send before what is
	// missing is counted lost.
	stall time.Duration
	// profile, when set, is a directory receiving each system process's CPU
	// profile and each HTTP system run's top statements (pg_stat_statements).
	profile string
	// keep leaves the cluster directory in place after the run.
	keep bool
	// rounds runs the throughput scenarios' systems this many times each, in turn.
	rounds int
	// dedupeRows pruned dedupe records are loaded into ordo's template
	// before the runs (bench_dedupe.go).
	dedupeRows int

	// noisy (bench_noisy.go): the burst tenant's messages and conversations,
	// unpaced and paced at noisyRate (0: ordo runs unpaced only); the quiet
	// tenants, each offering quietRate messages a second for quietFor; the
	// fake Cloud API's answer delay.
	noisyMsgs, noisyConvs           int
	noisyPacedMsgs, noisyPacedConvs int
	noisyRate                       int
	quietTenants, quietRate         int
	quietFor                        time.Duration
	providerDelay                   time.Duration

	// cpuHog is how many busy processes (bench_cpuhog.go) run beside the
	// whole run, as other users of a shared machine would; while they run,
	// the bench process itself is at instrumentNice and its children back
	// at 0.
	cpuHog         int
	instrumentNice int
}

func parseBenchFlags(env *cli.Env, args []string) (benchConfig, error) {
	var (
		c        benchConfig
		scenario string
		systems  string
		fs       = cli.NewFlagSet(env, "ordo-bench")
	)
	fs.StringVar(&scenario, "scenario", "all", "spread|hot|latency|backlog|noisy|claim|all, or a comma-separated list")
	fs.StringVar(&systems, "systems", strings.Join(benchSystems, ","), "systems to measure, comma-separated")
	fs.StringVar(&c.out, "out", "bench-results.jsonl", "file receiving one JSON object per system and scenario")
	fs.StringVar(&c.results, "results", ResultsFileDefault, "Markdown file this run's table and targets are appended to, with the date, commit and flags; empty: none")
	c.args = args
	fs.IntVar(&c.concurrency, "concurrency", 32, "concurrent load-generator clients, the same for every system")
	fs.IntVar(&c.workers, "workers", 16, "concurrent senders per system (ordo --workers, River MaxWorkers, sql-floor finishers); 16 fits 2 cores and a loopback provider (cmd/ordo-bench/README.md)")
	fs.IntVar(&c.spreadConvs, "spread-conversations", 2000, "conversations of the spread scenario (issue: 10000)")
	fs.IntVar(&c.spreadMsgs, "spread-messages", 5, "messages per conversation in spread (issue: 5)")
	fs.IntVar(&c.hotConvs, "hot-conversations", 100, "conversations of the hot scenario (issue: 100)")
	fs.IntVar(&c.hotMsgs, "hot-messages", 100, "messages per conversation in hot (issue: 200)")
	fs.IntVar(&c.latencyRate, "latency-rate", 500, "offered messages per second in the latency scenario (issue: 500)")
	fs.DurationVar(&c.latencyFor, "latency-duration", 20*time.Second, "how long the latency scenario offers (issue: 60s)")
	fs.IntVar(&c.latencyConvs, "latency-conversations", 1000, "conversations the latency scenario spreads over")
	fs.DurationVar(&c.latencyWarmup, "latency-warmup", 5*time.Second, "the latency scenario's warm-up at the same rate, sent and then forgotten before it measures (0: none)")
	fs.IntVar(&c.backlogMsgs, "backlog-messages", 20000, "messages queued before the backlog drains (issue: 1000000)")
	fs.IntVar(&c.backlogConvs, "backlog-conversations", 2000, "conversations of the backlog (issue: 100000)")
	fs.IntVar(&c.backlogTenants, "backlog-tenants", 100, "tenants of the backlog (issue: 1000)")
	fs.IntVar(&c.sendRate, "send-rate", 0, "ordo tenants' send_rate: sends/s per phone number (0: unpaced, like the baselines; ordo's default is 80, Meta's)")
	fs.DurationVar(&c.redisTTL, "redis-ttl", 5*time.Second, "redis-lock: the conversation lock's expiry (SET NX EX)")
	fs.DurationVar(&c.redisSnooze, "redis-snooze", 50*time.Millisecond, "redis-lock: how long a job snoozes when its conversation is locked")
	fs.DurationVar(&c.stall, "stall", 30*time.Second, "a run with no send for this long ends; what is missing is lost")
	fs.StringVar(&c.profile, "profile", "", "directory for CPU profiles and pg_stat_statements tops per system and scenario (off when empty)")
	fs.BoolVar(&c.keep, "keep", false, "keep the cluster directory afterwards")
	fs.IntVar(&c.rounds, "rounds", 1, "spread, hot, latency and backlog: run the systems this many times in turn and report each one's median round (this machine's speed moves 10-25% between runs; compare ratios with 3 or more)")
	fs.IntVar(&c.dedupeRows, "dedupe-rows", 0, "pruned messages (dedupe records only, another tenant's) loaded into ordo's database before the runs, e.g. 20000000")
	fs.IntVar(&c.noisyMsgs, "noisy-messages", 20000, "noisy: the burst's messages, queued through SQL (the issue's; it must outlast --quiet-duration)")
	fs.IntVar(&c.noisyConvs, "noisy-conversations", 2000, "noisy: the burst's conversations (the issue's)")
	fs.IntVar(&c.noisyPacedMsgs, "noisy-paced-messages", 8000, "noisy, paced: the burst's messages (the issue's: 100 s at 80/s)")
	fs.IntVar(&c.noisyPacedConvs, "noisy-paced-conversations", 800, "noisy, paced: the burst's conversations (the issue's)")
	fs.IntVar(&c.noisyRate, "noisy-send-rate", 80, "noisy: ordo also runs with every tenant paced at this send_rate (0: unpaced only)")
	fs.IntVar(&c.quietTenants, "quiet-tenants", 3, "noisy: quiet tenants beside the burst")
	fs.IntVar(&c.quietRate, "quiet-rate", QuietRateDefault, "noisy: messages per second each quiet tenant offers over REST, each in a conversation of its own")
	fs.DurationVar(&c.quietFor, "quiet-duration", QuietDurationDefault, "noisy: how long the quiet tenants offer (keep it shorter than the burst's drain; rate × duration ≥ 300 makes a tenant's p99 other than its maximum)")
	fs.DurationVar(&c.providerDelay, "provider-delay", 50*time.Millisecond, "noisy: the fake Cloud API answers each send after this long")
	fs.IntVar(&c.cpuHog, "cpu-hog", 0, "busy processes (a tight loop each, nice 0) running beside the whole run, stopped at its end")
	fs.IntVar(&c.instrumentNice, "instrument-nice", InstrumentNiceDefault, "with --cpu-hog: the bench process's own niceness (its load generator and fake Cloud API), so that the hogs starve the systems measured and not the instrument; the systems and Postgres stay at 0, sql-floor runs in the bench process and so does not (needs root; 0: off)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return c, err
	}
	if c.cpuHog < 0 {
		return c, errors.New("--cpu-hog must be 0 or more")
	}
	if c.instrumentNice < -20 || c.instrumentNice > 0 {
		return c, errors.New("--instrument-nice must be between -20 and 0")
	}
	if c.cpuHog == 0 {
		c.instrumentNice = 0 // nothing to protect the instrument from
	}
	var err error
	if c.scenarios, err = pickList("--scenario", scenario, benchScenarios); err != nil {
		return c, err
	}
	if c.systems, err = pickList("--systems", systems, benchSystems); err != nil {
		return c, err
	}
	for name, v := range map[string]int{
		"concurrency": c.concurrency, "workers": c.workers,
		"spread-conversations": c.spreadConvs, "spread-messages": c.spreadMsgs,
		"hot-conversations": c.hotConvs, "hot-messages": c.hotMsgs,
		"latency-rate": c.latencyRate, "latency-conversations": c.latencyConvs,
		"backlog-messages": c.backlogMsgs, "backlog-conversations": c.backlogConvs, "backlog-tenants": c.backlogTenants,
		"noisy-messages": c.noisyMsgs, "noisy-conversations": c.noisyConvs, "noisy-paced-messages": c.noisyPacedMsgs,
		"noisy-paced-conversations": c.noisyPacedConvs, "quiet-tenants": c.quietTenants, "quiet-rate": c.quietRate,
		"rounds": c.rounds,
	} {
		if v < 1 {
			return c, fmt.Errorf("--%s must be at least 1", name)
		}
	}
	if c.backlogConvs < c.backlogTenants || c.backlogMsgs < c.backlogConvs {
		return c, errors.New("the backlog needs at least one conversation per tenant and one message per conversation")
	}
	if c.noisyConvs > c.noisyMsgs || c.noisyPacedConvs > c.noisyPacedMsgs {
		return c, errors.New("the noisy burst needs at least one message per conversation")
	}
	if c.noisyRate < 0 || c.quietFor < time.Second || c.providerDelay < 0 {
		return c, errors.New("--noisy-send-rate and --provider-delay must be 0 or more, --quiet-duration at least 1s")
	}
	if c.sendRate < 0 {
		return c, errors.New("--send-rate must be 0 (unpaced) or more")
	}
	if c.latencyWarmup < 0 {
		return c, errors.New("--latency-warmup must be 0 or more")
	}
	if c.latencyFor < time.Second || c.stall < time.Second {
		return c, errors.New("--latency-duration and --stall must be at least 1s")
	}
	return c, nil
}

// pickList parses "all" or a comma-separated subset of known, kept in
// known's order.
func pickList(flagName, value string, known []string) ([]string, error) {
	if value == "all" {
		return known, nil
	}
	var picked []string
	for _, v := range strings.Split(value, ",") {
		v = strings.TrimSpace(v)
		if !slices.Contains(known, v) {
			return nil, fmt.Errorf("%s: unknown %q (want %s or all)", flagName, v, strings.Join(known, ", "))
		}
		picked = append(picked, v)
	}
	var out []string
	for _, k := range known {
		if slices.Contains(picked, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// Main is `ordo-bench [flags]` (make bench); with --child first it is one
// system's process instead.
func Main(ctx context.Context, env *cli.Env, args []string) error {
	if len(args) > 0 && args[0] == "--child" {
		return runChild(ctx, env, args[1:])
	}
	if len(args) > 0 && args[0] == cpuHogArg {
		cpuHog()
	}
	cfg, err := parseBenchFlags(env, args)
	if err != nil {
		return err
	}
	release, err := proc.LockMachine(os.TempDir(), strings.Join(append([]string{"ordo-bench"}, args...), " "))
	if err != nil {
		return err
	}
	defer release()
	// The code measured is the code at the start: a run takes minutes, and
	// a commit made meanwhile must not be named as the one measured.
	commit := sourceCommit()
	if cfg.profile != "" {
		if cfg.profile, err = filepath.Abs(cfg.profile); err != nil {
			return err
		}
		if err := os.MkdirAll(cfg.profile, 0o755); err != nil {
			return err
		}
	}
	out, err := os.Create(cfg.out)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	defer out.Close()

	b, err := startBenchEnv(ctx, env, cfg)
	if err != nil {
		return err
	}
	defer b.close()

	b.printHeader()
	if cfg.cpuHog > 0 {
		stopHogs, err := startCPUHogs(cfg.cpuHog)
		if err != nil {
			return err
		}
		defer stopHogs()
		// After the hogs and Postgres started (they stay at 0); the
		// systems measured are started back at 0 (startChild).
		if err := raiseInstrument(cfg.instrumentNice); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "cpu hogs: %d busy processes beside the run, at nice 0 as the systems measured and Postgres; the bench's load generator and fake Cloud API at nice %d\n", cfg.cpuHog, cfg.instrumentNice)
	}
	var results []benchResult
	for _, sc := range cfg.scenarios {
		if sc == "claim" {
			rs, err := b.runClaim(ctx, out)
			results = append(results, rs...)
			if err != nil {
				return err
			}
			continue
		}
		if sc == "noisy" {
			rs, err := b.runNoisyAll(ctx, out)
			results = append(results, rs...)
			if err != nil {
				return err
			}
			continue
		}
		load := cfg.load(sc)
		rounds := map[string][]benchResult{}
		// With several rounds the systems take turns, so a machine that
		// slows down for a while slows every system's round alike.
		for round := 1; round <= cfg.rounds; round++ {
			for _, sys := range cfg.systems {
				of := ""
				if cfg.rounds > 1 {
					of = fmt.Sprintf(" (round %d of %d)", round, cfg.rounds)
				}
				b.logf("%s / %s: %d messages over %d conversations%s …", sc, sys, load.messages(), load.convs, of)
				r, err := b.run(ctx, load, sys)
				if err != nil {
					return fmt.Errorf("%s / %s: %w", sc, sys, err)
				}
				b.logf("%s / %s: %s", sc, sys, r.summary())
				rounds[sys] = append(rounds[sys], r)
			}
		}
		for _, sys := range cfg.systems {
			r := medianRound(rounds[sys])
			results = append(results, r)
			if err := cli.PrintJSON(out, r); err != nil {
				return err
			}
		}
	}
	var report bytes.Buffer
	printBenchTable(&report, results)
	printTargets(&report, results)
	fmt.Fprintf(&report, "\nload average at the end: %s\n", loadAverage())
	_, _ = env.Stdout.Write(report.Bytes())
	fmt.Fprintf(env.Stdout, "JSON lines: %s\n", cfg.out)
	if cfg.results != "" {
		if err := appendResults(cfg.results, commit, cfg.args, report.Bytes()); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "appended to %s\n", cfg.results)
	}
	return nil
}

// ResultsFileDefault is where `make bench` (run from the repository's
// root) keeps every run's results: measurements live there, not in the
// README or in code comments.
const ResultsFileDefault = "cmd/ordo-bench/RESULTS.md"

// appendResults appends one run's report to path under a heading naming
// when, on which commit (sourceCommit, read when the run began) and with
// which flags it ran.
func appendResults(path, commit string, args []string, report []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("--results: %w", err)
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "\n## %s, commit %s\n\n`make bench ARGS=\"%s\"` (%d CPUs)\n\n```\n%s```\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), commit, strings.Join(args, " "), runtime.NumCPU(), report)
	if err != nil {
		return fmt.Errorf("--results: %w", err)
	}
	return f.Close()
}

// sourceCommit names the code this binary was built from: its stamped
// build, or (go run stamps none) the work tree's commit, "-dirty" when it
// has changes.
func sourceCommit() string {
	if commit := cli.ReadBuild().Commit; commit != "" {
		return commit
	}
	out, _ := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=7").Output()
	return cmp.Or(strings.TrimSpace(string(out)), "unknown")
}

// runNoisyAll runs the noisy scenario for every HTTP system (sql-floor has
// no REST and no tenants) and each of its modes.
func (b *benchEnv) runNoisyAll(ctx context.Context, out io.Writer) ([]benchResult, error) {
	var results []benchResult
	for _, sys := range b.cfg.systems {
		if sys == "sql-floor" {
			continue
		}
		for _, rate := range b.cfg.noisyModes(sys) {
			b.logf("noisy / %s: one tenant's burst next to %d quiet tenants, send rate %d …", sys, b.cfg.quietTenants, rate)
			if err := b.checkpoint(ctx); err != nil {
				return results, err
			}
			r, err := b.runNoisy(ctx, sys, rate)
			if err != nil {
				return results, fmt.Errorf("noisy / %s: %w", sys, err)
			}
			results = append(results, r)
			if err := cli.PrintJSON(out, r); err != nil {
				return results, err
			}
		}
	}
	return results, nil
}

// load returns the offered load of scenario sc.
func (c benchConfig) load(sc string) benchLoad {
	l := benchLoad{scenario: sc, tenants: 1, concurrency: c.concurrency}
	switch sc {
	case "spread":
		l.convs, l.perConv = c.spreadConvs, c.spreadMsgs
	case "hot":
		l.convs, l.perConv = c.hotConvs, c.hotMsgs
	case "latency":
		l.convs, l.rate, l.duration = c.latencyConvs, c.latencyRate, c.latencyFor
	case "backlog":
		l.convs, l.tenants, l.backlog = c.backlogConvs, c.backlogTenants, true
		l.total = c.backlogMsgs
	}
	return l
}

// run measures one system under one load.
func (b *benchEnv) run(ctx context.Context, l benchLoad, system string) (benchResult, error) {
	if err := b.checkpoint(ctx); err != nil {
		return benchResult{}, err
	}
	if system == "sql-floor" {
		return b.runFloor(ctx, l)
	}
	return b.runHTTP(ctx, l, system)
}

// logf reports progress on stderr; stdout carries only the results.
func (b *benchEnv) logf(format string, args ...any) {
	fmt.Fprintf(b.env.Stderr, "bench %s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
