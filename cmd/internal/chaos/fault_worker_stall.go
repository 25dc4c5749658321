package chaos

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// faultWorkerStall is SIGSTOP of a worker past its lease, then SIGCONT.
const faultWorkerStall = "worker_stall"

// workerStallKind stalls a worker Stalls times, each for Config.stallFor.
var workerStallKind = faultKind{
	name: faultWorkerStall,
	plan: func(p *planner) []fault {
		return p.place(p.cfg.Stalls, p.cfg.Duration-p.cfg.stallFor()-time.Second,
			func() time.Duration { return p.cfg.stallFor() },
			func(s slot) fault { return &workerStall{s: s} })
	},
	summary: func(n int) string { return fmt.Sprintf("%d worker stalls", n) },
}

// workerStall freezes a worker in the middle of its sends, past its lease:
// its conversations move on to other workers, and when it wakes its drains
// must find their fences moved and write nothing.
type workerStall struct {
	s       slot
	stalled *proc.Proc
	logFrom int64
}

func (f *workerStall) Kind() string { return faultWorkerStall }
func (f *workerStall) Desc() string { return fmt.Sprintf("SIGSTOP a worker for %s", f.s.pause) }
func (f *workerStall) slot() slot   { return f.s }

// Inject slows the provider down for a moment so that drains are waiting
// on sends, then stops the worker holding the most conversations.
func (f *workerStall) Inject(ctx context.Context, r *run) bool {
	r.provider.slowDown(time.Now().Add(2*time.Second), 700*time.Millisecond)
	time.Sleep(time.Second)
	held := r.heldConversations(ctx)
	order := make([]*proc.Proc, 0, len(r.workers))
	for i := range r.workers {
		order = append(order, r.workers[(f.s.target+i)%len(r.workers)])
	}
	sort.SliceStable(order, func(i, j int) bool { return held[order[i].Name()] > held[order[j].Name()] })
	for _, w := range order {
		if pid, ok := w.Stall(); ok {
			r.log.fault(faultWorkerStall, "SIGSTOP %s (pid %d) holding %d conversations, for %s (lease %s)", w.Name(), pid, held[w.Name()], f.s.pause, r.cfg.Lease)
			f.stalled = w
			return true
		}
	}
	r.log.printf("worker stall skipped: no worker up")
	return false
}

// Recover resumes the worker and reports what it logged on waking.
func (f *workerStall) Recover(_ context.Context, r *run) {
	w := f.stalled
	f.logFrom = fileSizeOf(w.LogPath())
	w.Resume()
	r.log.printf("SIGCONT %s: its drains must find their fences moved", w.Name())
	time.Sleep(3 * time.Second)
	r.log.printf("%s after SIGCONT: %s", w.Name(), summarizeLog(w.LogPath(), f.logFrom))
}
