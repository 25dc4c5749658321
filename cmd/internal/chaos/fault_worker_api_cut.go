package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// faultWorkerAPICut is a worker cut off from the Cloud API (its proxy to the
// fake provider holds every connection, forwarding nothing), then healed.
// It still reaches Postgres.
const faultWorkerAPICut = "worker_api_cut"

// workerAPICutKind cuts a worker off from the Cloud API Partitions times,
// each for Config.stallFor.
var workerAPICutKind = faultKind{
	name: faultWorkerAPICut,
	plan: func(p *planner) []fault {
		if p.cfg.HA {
			return nil
		}
		return p.place(p.cfg.Partitions, p.cfg.Duration-p.cfg.stallFor()-time.Second,
			func() time.Duration { return p.cfg.stallFor() },
			func(s slot) fault { return &workerAPICut{s: s} })
	},
	summary: func(n int) string { return fmt.Sprintf("%d worker–Cloud API partitions", n) },
}

// workerAPICut partitions the busiest worker from the Cloud API: its sends
// time out (ambiguous: they may have gone out) and are retried under its
// lease, or its conversations wait; when the partition heals, requests it
// gave up on may still arrive late, as after a real partition, and are
// counted by the engine as the ambiguous sends they were.
type workerAPICut struct {
	s      slot
	worker *proc.Proc
	from   time.Time
}

func (f *workerAPICut) Kind() string { return faultWorkerAPICut }
func (f *workerAPICut) Desc() string {
	return fmt.Sprintf("cut a worker off from the Cloud API for %s", f.s.pause)
}
func (f *workerAPICut) slot() slot { return f.s }

func (f *workerAPICut) Inject(ctx context.Context, r *run) bool {
	w := r.busiestWorker(ctx, f.s.target)
	p := r.sendProxy(w.Name())
	if p == nil {
		r.log.printf("worker-Cloud API partition skipped: %s has no proxy", w.Name())
		return false
	}
	p.Cut()
	f.worker, f.from = w, time.Now()
	r.log.fault(faultWorkerAPICut, "%s cut off from the Cloud API for %s", w.Name(), f.s.pause)
	return true
}

func (f *workerAPICut) Recover(_ context.Context, r *run) {
	logFrom := fileSizeOf(f.worker.LogPath())
	r.sendProxy(f.worker.Name()).Heal()
	r.addPartition(partitionRecord{kind: faultWorkerAPICut, worker: f.worker.Name(), from: f.from, to: time.Now()})
	r.log.printf("%s reaches the Cloud API again", f.worker.Name())
	time.Sleep(3 * time.Second)
	r.log.printf("%s after the partition: %s", f.worker.Name(), summarizeLog(f.worker.LogPath(), logFrom))
}
