package jobs

// SetHooks lets tests force interleavings in a runner's drains.
func SetHooks(r *Runner, beforeFinish func(conv int64), afterEffect func(stepID int64)) {
	r.drainer.hooks = hooks{beforeFinish: beforeFinish, afterEffect: afterEffect}
}

// SetBeforeEffect sets the hook that runs once a step's attempt is recorded
// as running and before its external call.
func SetBeforeEffect(r *Runner, f func(stepID int64)) { r.drainer.hooks.beforeEffect = f }
