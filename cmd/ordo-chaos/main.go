// Command ordo-chaos is the crash and fault run (make chaos): the product
// binary, `ordo`, under load while its processes and Postgres are killed,
// stalled, restarted and deployed, then an independent checker. It ends
// with "N passed, N failed" and exits 1 if a check failed. Package chaos
// holds the harness.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/chaos"
	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == chaos.FloodCommand {
		// The hostile flood's generator, started by the run itself.
		if err := chaos.FloodMain(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "ordo-chaos %s: %v\n", chaos.FloodCommand, err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	env := cli.ReadEnv()
	var (
		c    chaos.Config
		ordo string
		fs   = cli.NewFlagSet(env, "ordo-chaos")
	)
	fs.StringVar(&ordo, "ordo", "bin/ordo", "the product binary the run starts (make chaos builds it)")
	previous := fs.String("previous", "", "the binary of the build before --ordo's: the run starts on it and upgrades to --ordo once under load, migrate first (make chaos-upgrade builds it)")
	fs.DurationVar(&c.Duration, "duration", 3*time.Minute, "how long load is offered and faults injected")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of every random choice (0: from the clock)")
	fs.IntVar(&c.Workers, "workers", 3, "worker processes")
	fs.IntVar(&c.Tenants, "tenants", 3, "tenants")
	fs.IntVar(&c.Conversations, "conversations", 300, "conversations over all tenants")
	fs.IntVar(&c.Clients, "clients", 40, "concurrent clients")
	fs.Float64Var(&c.Rate, "rate", 40, "messages offered per second")
	fs.DurationVar(&c.Quiesce, "quiesce", 3*time.Minute, "bound on the wait for every accepted message to settle")
	fs.IntVar(&c.RollingDeploys, "rolling-deploys", 1, "rolling SIGTERM deploys of every process under load (a duplicate they cause fails the run)")
	fs.IntVar(&c.OperatorResolves, "operator-resolves", 2, "dead letters replayed or skipped while their conversations are busy")
	fs.IntVar(&c.SQLBatch, "sql-batch", 20, "an application enqueuing through ordo.enqueue_message, this many conversations per transaction, some rolled back (0: none)")
	fs.DurationVar(&c.HostileFor, "hostile", 20*time.Second, "how long strangers flood the webhook with 200 concurrent unsigned 8 MB posts, once, while the load flows (0: no flood)")
	fs.Float64Var(&c.HostileCores, "hostile-cores", chaos.HostileCoresDefault, "the CPU the flood's own process may use, in cores (a cgroup v1 CPU quota: the attacker's machine); negative: nice 19 instead")
	fs.DurationVar(&c.PGAway, "pg-away", chaos.PGAwayDefault, "how long Postgres is stopped, once, under load (negative: no outage; not with --ha)")
	fs.DurationVar(&c.HandlerOutage, "handler-outage", 0, fmt.Sprintf("how long the tenants' handler is away, once: refusing connections, then n8n's 404 (0: %s when --duration is at least %s, else half of --duration; negative: none)", chaos.HandlerOutageFull, chaos.HandlerOutageFullFrom))
	fs.DurationVar(&c.CloudAPIOutage, "cloudapi-outage", chaos.CloudAPIOutageDefault, "how long the Cloud API answers every send 503 (131016), once, in a run long enough for it and 30 s of load after (negative: none)")
	fs.BoolVar(&c.HA, "ha", false, "run the database as a Patroni cluster (etcd, a primary, two standbys, synchronous replication; patroni and etcd-server installed with apt-get if missing) and inject failovers instead of Postgres restarts")
	fs.IntVar(&c.Failovers, "failovers", 0, fmt.Sprintf("with --ha, how many of each failover fault (0: one per %s of load, at least one)", chaos.FailoverEvery))
	fs.StringVar(&c.SoakDir, "soak", "", "make the run a soak (make soak): faults every few minutes, load at half of --capacity, a sample each --sample-every; its table (report.md) and plot (soak.png) are written to this directory")
	capacity := fs.Float64("capacity", chaos.SoakCapacityDefault, "with --soak, the run's capacity in msg/s: the soak offers half of it, REST clients and SQL application together, unless --rate is given")
	fs.DurationVar(&c.SoakSampleEvery, "sample-every", chaos.SoakSampleEveryDefault, "with --soak, how often RSS, goroutines, open files, table sizes, dead tuples and p99 are sampled")
	fs.StringVar(&c.Dir, "dir", "", "directory for the cluster and the logs (default: a temporary one, kept if the run fails)")
	if err := cli.ParseFlags(fs, os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if c.SoakDir != "" {
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		if !given["sql-batch"] {
			c.SQLBatch = chaos.SoakSQLBatchDefault
		}
		if !given["rate"] {
			c.Rate = chaos.SoakRESTRate(*capacity, c.SQLBatch)
		}
	}
	bin, err := filepath.Abs(ordo)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "ordo-chaos: --ordo: %v (build it: go build -o bin/ordo ./cmd/ordo)\n", err)
		os.Exit(2)
	}
	release, err := proc.LockMachine(os.TempDir(), strings.Join(append([]string{"ordo-chaos"}, os.Args[1:]...), " "))
	if err != nil {
		fmt.Fprintf(env.Stderr, "ordo-chaos: %v\n", err)
		os.Exit(2)
	}
	defer release()
	c.Exec, c.Out = []string{bin}, env.Stdout
	if *previous != "" {
		prev, err := filepath.Abs(*previous)
		if err == nil {
			_, err = os.Stat(prev)
		}
		if err != nil {
			fmt.Fprintf(env.Stderr, "ordo-chaos: --previous: %v (make chaos-upgrade builds it)\n", err)
			os.Exit(2)
		}
		c.Previous = []string{prev}
	}
	rep, err := chaos.Run(ctx, c)
	if err != nil {
		fmt.Fprintf(env.Stderr, "ordo-chaos: %v\n", err)
		os.Exit(1)
	}
	if rep.Failed() > 0 {
		fmt.Fprintf(env.Stderr, "ordo-chaos: %d of %d checks failed\n", rep.Failed(), rep.Checks())
		os.Exit(1)
	}
}
