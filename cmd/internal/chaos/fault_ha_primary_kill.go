package chaos

import (
	"context"
	"fmt"
)

// faultHAPrimaryKill is kill -9 of the primary's postmaster under a live
// Patroni, which fails over to the synchronous standby at once
// (primary_start_timeout 0) rather than recover the crashed primary in
// place; the old primary rejoins as a standby (pg_rewind).
const faultHAPrimaryKill = "ha_primary_kill"

var haPrimaryKillKind = haKind(faultHAPrimaryKill, func(s slot) fault {
	return &haPrimaryKill{failover{s: s, kind: faultHAPrimaryKill}}
}, "kills of the primary's postmaster")

// haPrimaryKill is one kill -9 of the primary's postmaster: every session
// on it is cut (the drains' advisory locks vanish with it), commits waiting
// for the synchronous standby are never answered, and ordo must find the
// new primary through its multi-host DATABASE_URL.
type haPrimaryKill struct{ failover }

func (f *haPrimaryKill) Kind() string { return faultHAPrimaryKill }
func (f *haPrimaryKill) Desc() string { return "kill -9 the primary's postmaster" }

func (f *haPrimaryKill) Inject(ctx context.Context, r *run) bool {
	if !f.healthyBefore(ctx, r) {
		return false
	}
	pid, err := r.ha.KillPostmaster(r.ha.Node(f.before.Leader))
	if err != nil {
		r.log.printf("%s skipped: %v", faultHAPrimaryKill, err)
		return false
	}
	f.injected(r, fmt.Sprintf("kill -9 of the primary %s's postmaster (pid %d); synchronous standby %s", f.before.Leader, pid, f.before.Sync))
	return true
}
