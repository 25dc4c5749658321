package jobs_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/jobs/outage"
	"github.com/ordo-dev/ordo/jobs/whatsapp/whatsapptest"
	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/tenants"
)

// The environment that makes TestRunnerWorkerProcess a worker process.
const (
	runnerDBEnv  = "ORDO_TEST_RUNNER_WORKER_DB"
	runnerKeyEnv = "ORDO_TEST_RUNNER_WORKER_KEY"
	runnerWAEnv  = "ORDO_TEST_RUNNER_WORKER_WA"
)

// gone is the tests' RunnerGoneAfter: short, so that a killed process's
// queue is swept within seconds.
const gone = 2 * time.Second

// TestRunnerWorkerProcess is not a test: it is the worker process that
// TestKilledWorkerLeavesNothingBehind starts (this test binary, run again)
// and kills. It runs a Runner until it is killed.
func TestRunnerWorkerProcess(t *testing.T) {
	url := os.Getenv(runnerDBEnv)
	if url == "" {
		t.Skip("the worker process of TestKilledWorkerLeavesNothingBehind")
	}
	ctx := context.Background()
	keys, err := tenants.ParseMasterKeys(os.Getenv(runnerKeyEnv))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url+"&pool_max_conns=20")
	if err != nil {
		t.Fatal(err)
	}
	vault, err := tenants.NewVault(pool, keys)
	if err != nil {
		t.Fatal(err)
	}
	cfg := jobs.Config{
		Workers: 4, FetchPollInterval: 50 * time.Millisecond, RunnerGoneAfter: gone,
		WhatsAppAPIURL: os.Getenv(runnerWAEnv),
	}
	r, err := jobs.NewRunner(pool, cfg, tenants.NewStore(pool, vault), vault, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {} // until SIGKILL
}

// runnerQueues lists the runner queues in river_queue.
func runnerQueues(b *jobstest.Bundle) []string {
	rows, err := b.Pool.Query(context.Background(), `SELECT name FROM ordo.river_queue WHERE name LIKE 'ordo-run-%' ORDER BY name`)
	if err != nil {
		return []string{err.Error()}
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		names = append(names, n)
	}
	return names
}

// A real worker process is killed (SIGKILL) while it sends: its runner
// jobs stay "running" on its queue, which nobody refreshes any more.
// Another process starts: within a bounded time the dead process's queue
// and every one of its runner jobs are gone, and messages keep flowing —
// every accepted message sent, in order.
func TestKilledWorkerLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{RunnerGoneAfter: gone}})
	ctx := context.Background()

	worker := exec.Command(os.Args[0], "-test.run=^TestRunnerWorkerProcess$", "-test.count=1", "-test.timeout=5m")
	worker.Env = append(os.Environ(), runnerDBEnv+"="+b.URL, runnerKeyEnv+"="+b.MasterKey.Format(), runnerWAEnv+"="+b.WhatsApp.URL())
	worker.Stdout, worker.Stderr = os.Stderr, os.Stderr
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })

	want := map[string][]string{}
	ingest := func(round string) {
		for c := range 3 {
			conv := fmt.Sprintf("c%d", c)
			for i := range 3 {
				text := fmt.Sprintf("%s-%d", round, i)
				b.Ingest(conv, conv+"-"+text, text)
				want[conv] = append(want[conv], text)
			}
		}
	}
	ingest("before")
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(wctx, 9); err != nil {
		t.Fatalf("the worker process did not send: %v", err)
	}
	// Recorded, too: a send the provider saw but the killed worker had not
	// recorded yet is ambiguous and may go out twice (contract: effects
	// once for finished steps), which is not what this test is about.
	b.WaitFor("the worker to record its sends", 30*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) == 9
	})
	var dead []string
	b.WaitFor("the worker's runner queue", 30*time.Second, func() bool {
		dead = runnerQueues(b)
		return len(dead) == 1
	})
	if n := b.Count(`SELECT count(*) FROM ordo.river_job WHERE queue = $1 AND state = 'running'`, dead[0]); n == 0 {
		t.Fatal("the worker process had no runner job running: the test kills nothing")
	}
	if err := worker.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()

	b.Start() // the process that takes over
	b.WaitFor("the dead process's queue and runner jobs to be swept", 90*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.river_job WHERE queue = $1`, dead[0]) == 0 &&
			b.Count(`SELECT count(*) FROM ordo.river_queue WHERE name = $1`, dead[0]) == 0
	})
	if qs := runnerQueues(b); len(qs) != 1 || qs[0] == dead[0] {
		t.Errorf("runner queues after the sweep: %v; want the live process's only", qs)
	}

	ingest("after")
	wctx2, cancel2 := context.WithTimeout(ctx, 60*time.Second)
	defer cancel2()
	if err := b.WhatsApp.WaitForSends(wctx2, 18); err != nil {
		t.Fatalf("messages stopped flowing after the sweep: %v", err)
	}
	if rep := whatsapptest.Check(b.WhatsApp.Sends(), want); !rep.OK() {
		t.Fatalf("provider saw: %s", rep)
	}
}

// A graceful stop leaves nothing behind: once Stop returns, the process's
// runner queue and every runner job of it are gone, finished or not.
func TestGracefulStopLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{Config: jobs.Config{RunnerGoneAfter: gone}})
	b.Ingest("c1", "m1", "one")
	b.Ingest("c1", "m2", "two")
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(wctx, 2); err != nil {
		t.Fatal(err)
	}
	if qs := runnerQueues(b); len(qs) != 1 {
		t.Fatalf("runner queues while running: %v; want one", qs)
	}
	queue := runnerQueues(b)[0]
	if n := b.Count(`SELECT count(*) FROM ordo.river_job WHERE queue = $1`, queue); n == 0 {
		t.Fatal("no runner jobs while running: the test checks nothing")
	}
	ctx, cancelStop := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelStop()
	if err := b.Runner.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if qs := runnerQueues(b); len(qs) != 0 {
		t.Errorf("runner queues after a graceful stop: %v; want none", qs)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.river_job WHERE kind = 'ordo_runner'`); n != 0 {
		t.Errorf("%d runner jobs after a graceful stop; want none (%s)", n, riverStates(b))
	}
}

// A live process is never swept, however long it runs: its heartbeat
// keeps its queue fresh; the sweep (every RunnerGoneAfter/2) runs several
// times, and the processes keep their queues and send.
func TestLiveWorkersAreNotSwept(t *testing.T) {
	t.Parallel()
	const gone = 5 * time.Second
	b := jobstest.Setup(t, jobstest.Options{Config: jobs.Config{RunnerGoneAfter: gone}})
	b.StartAnotherRunner(jobs.Config{RunnerGoneAfter: gone, Workers: 2})
	b.WaitFor("two runner queues", 30*time.Second, func() bool { return len(runnerQueues(b)) == 2 })
	before := strings.Join(runnerQueues(b), ",")
	b.WaitFor("sweeps to run", 60*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.river_job WHERE kind = 'ordo_sweep_runners' AND state = 'completed'`) >= 4 // the last ones past the sweeper's own first RunnerGoneAfter
	})
	if after := strings.Join(runnerQueues(b), ","); after != before {
		t.Fatalf("runner queues %s became %s while both processes ran", before, after)
	}
	b.Ingest("c1", "m1", "one")
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(wctx, 1); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log sink shared by the runner's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Postgres goes away for longer than every periodic job's period and than
// RunnerGoneAfter: the periodic jobs (River's leader inserting them, any
// process working them) and River's own loops log nothing but the watch's
// line while it is away; when it is back the jobs run again, and the
// process, silent for the whole outage, is not swept as gone.
func TestPeriodicJobsQuietWhilePostgresIsAway(t *testing.T) {
	t.Parallel()
	var (
		proxy *sqltest.Proxy
		logs  syncBuffer
	)
	watch := outage.NewWatch("postgres", outage.Config{}, slog.New(slog.NewJSONHandler(&logs, nil)))
	b := jobstest.Setup(t, jobstest.Options{
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Config: jobs.Config{
			Database: watch, RunnerGoneAfter: gone, OrphanInterval: time.Second, PruneInterval: time.Second,
			Events: jobs.EventsConfig{PollInterval: time.Second},
		},
		Through: func(url string) string {
			p, through := sqltest.NewProxy(t, url)
			proxy = p
			return through
		},
	})
	completed := func(kind string) int {
		return b.Count(`SELECT count(*) FROM ordo.river_job WHERE kind = $1 AND state = 'completed'`, kind)
	}
	kinds := []string{"ordo_prune", "ordo_reconcile", "ordo_dispatch_events", "ordo_sweep_runners"}
	b.WaitFor("every periodic job to run", 30*time.Second, func() bool {
		for _, k := range kinds {
			if completed(k) == 0 {
				return false
			}
		}
		return true
	})
	queues := runnerQueues(b)

	proxy.Cut()
	before := len(logs.String())
	time.Sleep(4 * gone) // every period passes several times; the queue goes stale
	lines := strings.Split(strings.TrimSpace(logs.String()[before:]), "\n")
	t.Logf("while Postgres was away:\n%s", strings.Join(lines, "\n"))
	if len(lines) > 6 { // a line per period and job would be dozens
		t.Errorf("%d log lines while Postgres was away; want the watch's and a few of River's from before the watch knew:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !watch.Down() {
		t.Fatal("the watch does not know Postgres is away")
	}

	proxy.Restore()
	b.WaitFor("postgres back", 30*time.Second, func() bool { return !watch.Down() })
	ran := map[string]int{}
	for _, k := range kinds {
		ran[k] = completed(k)
	}
	b.WaitFor("every periodic job to run again", 30*time.Second, func() bool {
		for _, k := range kinds {
			if completed(k) <= ran[k] {
				return false
			}
		}
		return true
	})
	if got := runnerQueues(b); strings.Join(got, ",") != strings.Join(queues, ",") {
		t.Fatalf("runner queues %v after the outage; want %v (a live process is not gone)", got, queues)
	}
	b.Ingest("c1", "m1", "one")
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.WhatsApp.WaitForSends(wctx, 1); err != nil {
		t.Fatal(err)
	}
}
