package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// faultUpgrade is a deploy of a new build, as an operator does it: `ordo
// migrate up` with the new build while the processes of the build before
// go on under load, on a schema newer than theirs, for upgradeSkew; then
// each process in turn SIGTERMed and started on the new build (a rolling
// deploy). What the old processes' calls to the new functions do, and
// what old and new processes do side by side, is held to every check of
// the run: nothing lost, sent twice (the deploy's windows too) or out of
// order. Planned once, when the run has the build before
// (Config.Previous: `make chaos-upgrade`).
const faultUpgrade = "upgrade"

// upgradeSkew is how long the build before runs on the new schema before
// its processes are replaced: many drains, claims and finishes of old code
// on new SQL.
const upgradeSkew = 15 * time.Second

var upgradeKind = faultKind{
	name: faultUpgrade,
	plan: func(p *planner) []fault {
		n := 0
		if len(p.cfg.Previous) > 0 {
			n = 1
		}
		return p.place(n, p.cfg.Duration/3,
			func() time.Duration { return 0 },
			func(s slot) fault { return &upgrade{s: s} })
	},
	summary: func(n int) string {
		if n == 0 {
			return ""
		}
		return "an upgrade from the build before"
	},
}

type upgrade struct{ s slot }

func (f *upgrade) Kind() string { return faultUpgrade }
func (f *upgrade) Desc() string {
	return "migrate up with the new build, the old processes on its schema, then each replaced"
}
func (f *upgrade) slot() slot { return f.s }
func (f *upgrade) exclusive() {}

// Inject migrates with the new build, lets the old processes run on the
// new schema, then rolls every process onto the new build.
func (f *upgrade) Inject(ctx context.Context, r *run) bool {
	r.log.fault(faultUpgrade, "ordo migrate up with the new build (%s), the build before (%s) running on", r.cfg.Exec[0], r.cfg.Previous[0])
	if out, err := r.ordoWith(ctx, r.cfg.Exec, "migrate", "up"); err != nil {
		r.log.printf("upgrade: migrate up: %v %s", err, strings.TrimSpace(string(out)))
		r.upgradeFailed = err.Error()
		return true
	}
	r.log.printf("upgrade: migrated; the build before runs on the new schema for %s", upgradeSkew)
	from := time.Now()
	select {
	case <-ctx.Done():
		return true
	case <-time.After(upgradeSkew):
	}
	r.upgradeSkew = [2]time.Time{from, time.Now()}
	r.log.printf("upgrade: SIGTERM, wait, start on the new build: api, then %d workers", len(r.workers))
	r.buildMu.Lock()
	r.build = r.cfg.Exec
	r.buildMu.Unlock()
	r.upgraded = r.roll(ctx, faultUpgrade, r.cfg.Exec)
	return true
}

// Recover has nothing to put back: every process runs the new build.
func (f *upgrade) Recover(_ context.Context, r *run) {
	r.log.printf("upgrade done")
}

// judgeUpgrade says whether the run upgraded, when it was to.
func judgeUpgrade(rep *Report, in chaosInput) {
	if in.planned[faultUpgrade] == 0 {
		return
	}
	// What the build before sent on the new schema: its drains ran there.
	skew := 0
	for _, s := range in.sends {
		if !s.At.Before(in.upgradeSkew[0]) && s.At.Before(in.upgradeSkew[1]) {
			skew++
		}
	}
	detail := fmt.Sprintf("migrated with the new build under load; the build before sent %d messages on its schema; every process replaced", skew)
	var problems []string
	switch {
	case in.upgradeFailed != "":
		problems = append(problems, "migrate up with the new build: "+in.upgradeFailed)
	case !in.upgraded:
		problems = append(problems, "the upgrade did not finish")
	case skew == 0:
		problems = append(problems, "the build before sent nothing on the new schema")
	}
	rep.add(fmt.Sprintf("upgraded from the build before under load (%s of skew)", upgradeSkew), len(problems) == 0, detail, problems...)
}
