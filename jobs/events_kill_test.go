package jobs_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/tenants"
)

// The environment that makes TestEventsWorkerProcess a worker process.
const (
	workerDBEnv  = "ORDO_TEST_EVENTS_WORKER_DB"
	workerKeyEnv = "ORDO_TEST_EVENTS_WORKER_KEY"
)

// TestEventsWorkerProcess is not a test: it is the worker process that
// TestEventsDeliveredAgainAfterAWorkerProcessIsKilled starts (this test
// binary, run again) and kills. It runs a Runner until it is killed.
func TestEventsWorkerProcess(t *testing.T) {
	url := os.Getenv(workerDBEnv)
	if url == "" {
		t.Skip("the worker process of TestEventsDeliveredAgainAfterAWorkerProcessIsKilled")
	}
	ctx := context.Background()
	keys, err := tenants.ParseMasterKeys(os.Getenv(workerKeyEnv))
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
		Workers: 2, FetchPollInterval: 50 * time.Millisecond, PruneInterval: -1,
		WhatsAppAPIURL: "http://127.0.0.1:9", // nothing is sent here
		Events:         jobs.EventsConfig{PollInterval: 50 * time.Millisecond, RetryBase: 50 * time.Millisecond},
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

// A real worker process is killed (SIGKILL) while its POST of an event is
// in flight — the endpoint has the event, ordo never heard back. Its
// session dies with it, and with the session the stream's lock: another
// worker delivers the event again, then the next one, in order.
func TestEventsDeliveredAgainAfterAWorkerProcessIsKilled(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{NoStart: true})
	ctx := context.Background()
	sink := &eventSink{t: t, secret: b.Secret}
	posted := make(chan struct{})
	sink.answer = func(r *http.Request, e jobs.Event, nth int) int {
		if e.Type == "tenant.sending_paused" && nth == 1 {
			close(posted)
			<-r.Context().Done() // the worker's connection closed: it was killed
			return http.StatusServiceUnavailable
		}
		return 0
	}
	srv := httptest.NewServer(sink)
	t.Cleanup(srv.Close)
	url := srv.URL
	if _, err := b.Tenants.Update(ctx, b.Tenant.Slug, tenants.UpdateParams{EventsURL: &url}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE ordo.tenants SET sending_paused_at = now(), sending_paused_reason = 'test' WHERE id = $1`,
		`UPDATE ordo.tenants SET sending_paused_at = NULL, sending_paused_reason = NULL WHERE id = $1`,
	} {
		if _, err := b.Pool.Exec(ctx, q, b.Tenant.ID); err != nil {
			t.Fatal(err)
		}
	}

	worker := exec.Command(os.Args[0], "-test.run=^TestEventsWorkerProcess$", "-test.count=1", "-test.timeout=5m")
	worker.Env = append(os.Environ(), workerDBEnv+"="+b.URL, workerKeyEnv+"="+b.MasterKey.Format())
	worker.Stdout, worker.Stderr = os.Stderr, os.Stderr
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })
	select {
	case <-posted:
	case <-time.After(60 * time.Second):
		t.Fatal("the worker process never posted the event")
	}
	if err := worker.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()

	// The worker that takes over. The killed one was River's leader, which
	// inserts the dispatch jobs: the new one leads once the old lead's
	// term runs out (about 15 s), then delivers.
	b.Start()
	b.WaitFor("every event delivered", 60*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.events`) == 0
	})
	var types []string
	for _, e := range sink.received() {
		types = append(types, e.Type)
	}
	if got, want := strings.Join(types, ","), "tenant.sending_paused,tenant.sending_paused,tenant.sending_resumed"; got != want {
		t.Errorf("deliveries %s, want %s (the paused event again after the kill, then resumed)", got, want)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.bad) > 0 {
		t.Errorf("bad deliveries: %v", sink.bad)
	}
}
