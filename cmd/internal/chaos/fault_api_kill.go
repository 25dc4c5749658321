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

// Inject kills the API; if it is down (a kill planned beside this one
// struck first while both waited for an exclusive fault, or it is being
// restarted), it waits for the API to be back, up to apiKillWait.
func (f *apiKill) Inject(ctx context.Context, r *run) bool {
	for deadline := time.Now().Add(apiKillWait); ; {
		if pid, ok := r.api.Kill(); ok {
			r.log.fault(faultAPIKill, "kill -9 api (pid %d); restart in %s", pid, f.s.pause)
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.log.printf("api kill skipped: the API was not up for %s", apiKillWait)
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// apiKillWait bounds how long an API kill waits for the API to be up.
const apiKillWait = 15 * time.Second

func (f *apiKill) Recover(_ context.Context, r *run) {
	if err := r.api.Start(); err != nil {
		r.log.printf("restart api: %v", err)
	}
}
