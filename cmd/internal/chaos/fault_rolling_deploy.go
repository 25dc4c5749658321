package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/proc"
)

// faultRollingDeploy is a deploy: every process in turn gets SIGTERM, is
// waited for and started again, the API first, then each worker.
const faultRollingDeploy = "rolling_deploy"

// deployHold is how long the provider holds back its answers around a
// worker's SIGTERM, so that the signal finds sends in flight: far below the
// run's send timeout, so that the hold itself makes nothing ambiguous even
// on a loaded machine (a hold near the timeout made a send time out on a
// shared machine, and it passed for the deploy's duplicate).
const deployHold = 300 * time.Millisecond

// deployGrace is how long a SIGTERMed process has to exit before it is
// killed: past `ordo serve`'s shutdown period (the workers' stop timeout plus
// server.ShutdownMargin).
const deployGrace = 40 * time.Second

// rollingDeployKind rolls a deploy over every process RollingDeploys times.
var rollingDeployKind = faultKind{
	name: faultRollingDeploy,
	plan: func(p *planner) []fault {
		return p.place(p.cfg.RollingDeploys, p.cfg.Duration*3/4,
			func() time.Duration { return 0 },
			func(s slot) fault { return &rollingDeploy{s: s} })
	},
	summary: func(n int) string {
		if n == 0 {
			return ""
		}
		return fmt.Sprintf("%d rolling deploys", n)
	},
}

// rollingDeploy is one deploy under load. The contract says SIGTERM
// finishes in-flight steps and exits, so a deploy causes no duplicate: the
// checker holds every send delivered while a process was shutting down, and
// delivered again later, against it (check.go, windowDuplicates).
type rollingDeploy struct{ s slot }

func (f *rollingDeploy) Kind() string { return faultRollingDeploy }
func (f *rollingDeploy) Desc() string { return "SIGTERM, wait, restart: the API, then each worker" }
func (f *rollingDeploy) slot() slot   { return f.s }

// exclusive: no kill, stall or restart inside a deploy's windows, so that a
// duplicate found there is the deploy's.
func (f *rollingDeploy) exclusive() {}

// Inject SIGTERMs each process in turn, waits for it to exit and starts it
// again, recording each shutdown's window for the checker.
func (f *rollingDeploy) Inject(ctx context.Context, r *run) bool {
	r.log.fault(faultRollingDeploy, "SIGTERM, wait for the exit, restart: api, then %d workers one at a time", len(r.workers))
	r.roll(ctx, faultRollingDeploy, nil)
	return true
}

// roll SIGTERMs each process in turn, waits for it to exit and starts it
// again — with next's command when next is set (an upgrade) — recording
// each worker's shutdown window under kind for the checker; false when
// the run ended first.
func (r *run) roll(ctx context.Context, kind string, next []string) bool {
	for _, p := range append([]*proc.Proc{r.api}, r.workers...) {
		if ctx.Err() != nil {
			return false
		}
		from := time.Now()
		if p != r.api {
			// Sends in flight when the signal comes: the provider holds its
			// answers back a moment (recorded as delivered, answered late,
			// well within the send timeout), as the stall does.
			r.provider.slowDown(from.Add(deployHold+time.Second), deployHold)
			time.Sleep(deployHold / 2)
		}
		if next != nil {
			// Before the signal: a process down meanwhile (restarting after
			// a crash) comes back on the new build too.
			p.SetCommand(len(r.cfg.Previous), next)
		}
		term := time.Now()
		pid, exitErr, ok := p.Term(deployGrace)
		exited := time.Now()
		if !ok {
			r.log.printf("deploy: %s is down or stalled; skipped", p.Name())
			continue
		}
		if p != r.api {
			// Only workers send: the API's shutdown (its in-flight
			// requests, seconds on a loaded machine) is no send's window,
			// and a send that timed out meanwhile would pass for its
			// duplicate.
			r.recordWindow(faultWindow{kind: kind, what: p.Name() + " was shutting down", from: from, term: term, exit: exited})
		}
		how := "exited cleanly"
		if exitErr != nil {
			how = exitErr.Error()
		}
		r.log.printf("deploy: SIGTERM %s (pid %d): %s after %s", p.Name(), pid, how, exited.Sub(term).Round(time.Millisecond))
		if err := p.Start(); err != nil {
			r.log.printf("deploy: restart %s: %v", p.Name(), err)
		}
		if p == r.api {
			if err := r.waitAPI(ctx, time.Minute); err != nil {
				r.log.printf("deploy: %v", err)
			}
		} else {
			time.Sleep(time.Second) // the new worker takes its share before the next goes
		}
	}
	r.settleHold()
	return true
}

// settleHold waits until every answer the provider held back went out and
// had a moment to be recorded: until then the fault's windows hold sends
// in flight, and a kill that cut one would pass for the fault's doing.
func (r *run) settleHold() {
	time.Sleep(time.Until(r.provider.heldUntil().Add(deployGap)))
}

// Recover has nothing to put back: every process was started again.
func (f *rollingDeploy) Recover(_ context.Context, r *run) {
	r.log.printf("deploy done")
}

// faultWindow is the time a fault that must cause no duplicate was at
// work: from the moment the provider began holding answers back (from),
// through the act itself (term: SIGTERM, the operator's command), to its
// end (exit). The checker holds sends first delivered inside it against the
// fault (check.go, windowDuplicates).
type faultWindow struct {
	kind             string
	what             string // "worker-1 was shutting down", for the report
	from, term, exit time.Time
}

func (r *run) recordWindow(w faultWindow) {
	r.windowMu.Lock()
	defer r.windowMu.Unlock()
	r.windows = append(r.windows, w)
}

// faultWindows returns the recorded windows of one kind.
func (r *run) faultWindows(kind string) []faultWindow {
	r.windowMu.Lock()
	defer r.windowMu.Unlock()
	var out []faultWindow
	for _, w := range r.windows {
		if w.kind == kind {
			out = append(out, w)
		}
	}
	return out
}
