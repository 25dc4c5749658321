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
// (Config.Previous: `make chaos-upgrade`), in the first two thirds of the
// load and clear of the Cloud API's outage.
const faultUpgrade = "upgrade"

// upgradeSkew is how long the build before runs on the new schema before
// its processes are replaced: many drains, claims and finishes of old code
// on new SQL.
const upgradeSkew = 15 * time.Second

var upgradeKind = faultKind{
	name: faultUpgrade,
	plan: func(p *planner) []fault {
		if len(p.cfg.Previous) == 0 {
			return nil
		}
		// Away from the Cloud API's outage: the build before's workers
		// must be able to send in the skew, or its check cannot tell
		// an incompatible build from an absent Meta.
		earliest, latest := max(3*time.Second, p.cfg.Duration/10), p.cfg.Duration*2/3
		clear := func(at time.Duration) bool {
			c := p.cloudAPIOutage
			return c == nil || at+upgradeSkew+10*time.Second <= c.at || at >= c.at+c.pause
		}
		// Kept from the other rare faults too, where there is room for
		// that (an exclusive fault waits for the others anyway).
		at := p.between(earliest, latest)
		for try := 0; try < 400 && !(clear(at) && (try >= 200 || !near(at, p.special, 6*time.Second))); try++ {
			at = p.between(earliest, latest)
		}
		p.special = append(p.special, at)
		return []fault{&upgrade{s: slot{at: at}}}
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

// judgeUpgrade says whether the run upgraded, when it was to. Called by
// chaosJudge, with the ledger's lock held.
func judgeUpgrade(rep *Report, in chaosInput) {
	if in.planned[faultUpgrade] == 0 {
		return
	}
	// What the build before did on the new schema: its workers' drains
	// sent, its API accepted.
	in_ := func(at time.Time) bool { return !at.Before(in.upgradeSkew[0]) && at.Before(in.upgradeSkew[1]) }
	skew, accepted := 0, 0
	for _, s := range in.sends {
		if in_(s.At) {
			skew++
		}
	}
	if in.ledger != nil {
		for _, a := range in.ledger.acks { // chaosJudge holds the ledger's lock
			if in_(a.at) {
				accepted++
			}
		}
	}
	detail := fmt.Sprintf("migrated with the new build under load; on its schema the build before sent %d messages and accepted %d; every process replaced", skew, accepted)
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
