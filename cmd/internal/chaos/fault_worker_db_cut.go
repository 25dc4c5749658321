package chaos

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// faultWorkerDBCut is a worker cut off from Postgres (its proxy holds every
// connection, forwarding nothing) past its lease, then healed. The worker
// itself runs on and still reaches the Cloud API.
const faultWorkerDBCut = "worker_db_cut"

// workerDBCutKind cuts a worker off from Postgres Partitions times, each
// for Config.stallFor.
var workerDBCutKind = faultKind{
	name: faultWorkerDBCut,
	plan: func(p *planner) []fault {
		if p.cfg.HA {
			return nil // an HA run has no proxies (network.go)
		}
		return p.place(p.cfg.Partitions, p.cfg.Duration-p.cfg.stallFor()-time.Second,
			func() time.Duration { return p.cfg.stallFor() },
			func(s slot) fault { return &workerDBCut{s: s} })
	},
	summary: func(n int) string { return fmt.Sprintf("%d worker–Postgres partitions", n) },
}

// workerDBCut partitions the worker holding the most conversations from
// Postgres. Postgres ends its silent sessions after the lease
// (idle_session_timeout), other workers take its conversations over, and
// the cut-off worker, still running, must make no call to the Cloud API
// once its lease is over: the checker reads its sends, as its own proxy to
// the Cloud API saw them, against this window.
type workerDBCut struct {
	s      slot
	worker *proc.Proc
	from   time.Time
}

func (f *workerDBCut) Kind() string { return faultWorkerDBCut }
func (f *workerDBCut) Desc() string {
	return fmt.Sprintf("cut a worker off from Postgres for %s", f.s.pause)
}
func (f *workerDBCut) slot() slot { return f.s }

// Inject slows the provider's answers for a moment, as the stall does, so
// that drains are in the middle of sends when their worker is cut off: the
// answers come, and cannot be recorded.
func (f *workerDBCut) Inject(ctx context.Context, r *run) bool {
	r.provider.slowDown(time.Now().Add(2*time.Second), 700*time.Millisecond)
	time.Sleep(time.Second)
	w := r.busiestWorker(ctx, f.s.target)
	p := r.dbProxy(w.Name())
	if p == nil {
		r.log.printf("worker-Postgres partition skipped: %s has no proxy", w.Name())
		return false
	}
	held := r.heldConversations(ctx)[w.Name()]
	p.Cut()
	f.worker, f.from = w, time.Now()
	r.log.fault(faultWorkerDBCut, "%s cut off from Postgres holding %d conversations, for %s (lease %s); it must send nothing after +%s",
		w.Name(), held, f.s.pause, r.cfg.Lease, r.cfg.Lease)
	return true
}

func (f *workerDBCut) Recover(_ context.Context, r *run) {
	logFrom := fileSizeOf(f.worker.LogPath())
	r.dbProxy(f.worker.Name()).Heal()
	r.addPartition(partitionRecord{kind: faultWorkerDBCut, worker: f.worker.Name(), from: f.from, to: time.Now()})
	r.log.printf("%s reaches Postgres again", f.worker.Name())
	time.Sleep(3 * time.Second)
	r.log.printf("%s after the partition: %s", f.worker.Name(), summarizeLog(f.worker.LogPath(), logFrom))
}

// busiestWorker is the worker whose drains hold the most conversations
// now, from target on when they hold as many.
func (r *run) busiestWorker(ctx context.Context, target int) *proc.Proc {
	held := r.heldConversations(ctx)
	order := make([]*proc.Proc, 0, len(r.workers))
	for i := range r.workers {
		order = append(order, r.workers[(target+i)%len(r.workers)])
	}
	sort.SliceStable(order, func(i, j int) bool { return held[order[i].Name()] > held[order[j].Name()] })
	return order[0]
}

// partitionRecord is one partition of a worker, as it happened.
type partitionRecord struct {
	kind     string
	worker   string
	from, to time.Time
}

func (r *run) addPartition(p partitionRecord) {
	r.windowMu.Lock()
	defer r.windowMu.Unlock()
	r.partitions = append(r.partitions, p)
}

func (r *run) partitionRecords() []partitionRecord {
	r.windowMu.Lock()
	defer r.windowMu.Unlock()
	return append([]partitionRecord(nil), r.partitions...)
}
