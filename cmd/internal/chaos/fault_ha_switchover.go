package chaos

import (
	"context"
	"fmt"
)

// faultHASwitchover is a planned switchover (Patroni's POST /switchover, as
// `patronictl switchover --force`): the primary is shut down cleanly and
// the synchronous standby promoted.
const faultHASwitchover = "ha_switchover"

var haSwitchoverKind = haKind(faultHASwitchover, func(s slot) fault {
	return &haSwitchover{failover{s: s, kind: faultHASwitchover}}
}, "switchovers")

// haSwitchover is one switchover to the synchronous standby: what an
// operator does for a minor upgrade or a host's maintenance, under load.
type haSwitchover struct{ failover }

func (f *haSwitchover) Kind() string { return faultHASwitchover }
func (f *haSwitchover) Desc() string { return "switchover to the synchronous standby" }

func (f *haSwitchover) Inject(ctx context.Context, r *run) bool {
	if !f.healthyBefore(ctx, r) {
		return false
	}
	f.injected(r, fmt.Sprintf("switchover from %s to the synchronous standby %s", f.before.Leader, f.before.Sync))
	if err := r.ha.Switchover(ctx, f.before.Leader, f.before.Sync); err != nil {
		// Recover still waits for the cluster: a refused switchover is
		// seen there (the primary did not move) and in the log.
		r.log.printf("%s: %v", faultHASwitchover, err)
	}
	return true
}
