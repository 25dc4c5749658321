package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// faultWorkerKill is kill -9 of a worker, restarted after a pause.
const faultWorkerKill = "worker_kill"

// workerKillKind kills a worker every WorkerKillMin..WorkerKillMax through
// the whole load.
var workerKillKind = faultKind{
	name: faultWorkerKill,
	plan: func(p *planner) []fault {
		var out []fault
		cfg := p.cfg
		for at := p.between(2*time.Second, cfg.WorkerKillMax); at < cfg.Duration-time.Second; at += p.between(cfg.WorkerKillMin, cfg.WorkerKillMax) {
			out = append(out, &workerKill{s: slot{at: at, target: p.rng.IntN(cfg.Workers), pause: p.between(500*time.Millisecond, 3*time.Second)}})
		}
		return out
	},
	summary: func(n int) string { return fmt.Sprintf("%d worker kills", n) },
}

// workerKill is one kill -9 of a worker: a crash in the middle of its
// drains, which another worker takes over once the dead one's sessions
// are gone.
type workerKill struct {
	s      slot
	killed *proc.Proc
}

func (f *workerKill) Kind() string { return faultWorkerKill }
func (f *workerKill) Desc() string {
	return fmt.Sprintf("kill -9 worker %d for %s", f.s.target+1, f.s.pause)
}
func (f *workerKill) slot() slot { return f.s }

// skippable: one kill less is no loss, a burst of them is another fault.
func (f *workerKill) skippable() {}

// Inject kills the planned worker, or the next one that is up and not
// stalled.
func (f *workerKill) Inject(_ context.Context, r *run) bool {
	for i := range r.workers {
		w := r.workers[(f.s.target+i)%len(r.workers)]
		if pid, ok := w.Kill(); ok {
			r.log.fault(faultWorkerKill, "kill -9 %s (pid %d); restart in %s", w.Name(), pid, f.s.pause)
			f.killed = w
			return true
		}
	}
	r.log.printf("worker kill skipped: no worker up")
	return false
}

// Recover starts the killed worker again.
func (f *workerKill) Recover(_ context.Context, r *run) {
	if err := f.killed.Start(); err != nil {
		r.log.printf("restart %s: %v", f.killed.Name(), err)
	}
}
