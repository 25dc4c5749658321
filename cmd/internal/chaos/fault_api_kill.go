package chaos

import (
	"context"
	"fmt"
	"time"
)

// faultAPIKill is kill -9 of the API process, restarted after a pause.
const faultAPIKill = "api_kill"

// apiKillKind kills the API process APIKills times; its clients retry.
var apiKillKind = faultKind{
	name: faultAPIKill,
	plan: func(p *planner) []fault {
		return p.place(p.cfg.APIKills, p.cfg.Duration-3*time.Second,
			func() time.Duration { return p.between(300*time.Millisecond, 2*time.Second) },
			func(s slot) fault { return &apiKill{s: s} })
	},
	summary: func(n int) string { return fmt.Sprintf("%d API kills", n) },
}

// apiKill is one kill -9 of the API process: requests in flight are cut
// off, and what was answered 2xx must be there after the restart.
type apiKill struct{ s slot }

func (f *apiKill) Kind() string { return faultAPIKill }
func (f *apiKill) Desc() string { return fmt.Sprintf("kill -9 the API for %s", f.s.pause) }
func (f *apiKill) slot() slot   { return f.s }

func (f *apiKill) Inject(_ context.Context, r *run) bool {
	pid, ok := r.api.Kill()
	if ok {
		r.log.fault(faultAPIKill, "kill -9 api (pid %d); restart in %s", pid, f.s.pause)
	}
	return ok
}

func (f *apiKill) Recover(_ context.Context, r *run) {
	if err := r.api.Start(); err != nil {
		r.log.printf("restart api: %v", err)
	}
}
