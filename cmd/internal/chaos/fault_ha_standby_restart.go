package chaos

import (
	"context"
	"fmt"
)

// faultHAStandbyRestart restarts the synchronous standby's PostgreSQL
// (Patroni's POST /restart, as `patronictl restart`): in strict synchronous
// mode the primary's commits wait until Patroni names the other standby
// synchronous, or this one is back.
const faultHAStandbyRestart = "ha_standby_restart"

var haStandbyRestartKind = haKind(faultHAStandbyRestart, func(s slot) fault {
	return &haStandbyRestart{failover: failover{s: s, kind: faultHAStandbyRestart}}
}, "synchronous standby restarts")

// haStandbyRestart is one restart of the synchronous standby.
type haStandbyRestart struct {
	failover
	done chan struct{} // closed when Patroni answered the restart
}

func (f *haStandbyRestart) Kind() string { return faultHAStandbyRestart }
func (f *haStandbyRestart) Desc() string { return "restart the synchronous standby" }

func (f *haStandbyRestart) Inject(ctx context.Context, r *run) bool {
	if !f.healthyBefore(ctx, r) {
		return false
	}
	f.injected(r, fmt.Sprintf("restart of the synchronous standby %s (primary %s)", f.before.Sync, f.before.Leader))
	// Asynchronous: the recovery clock runs from the request, not from
	// Patroni's answer once the restart is done.
	f.done = make(chan struct{})
	go func() {
		defer close(f.done)
		if err := r.ha.Restart(context.WithoutCancel(ctx), r.ha.Node(f.before.Sync)); err != nil {
			r.log.printf("%s: %v", faultHAStandbyRestart, err)
		}
	}()
	return true
}

// Recover waits for Patroni's answer (the restart is done) before it waits
// for the cluster: until then the standby may still look healthy.
func (f *haStandbyRestart) Recover(ctx context.Context, r *run) {
	select {
	case <-f.done:
	case <-ctx.Done():
	}
	f.failover.Recover(ctx, r)
}
