package jobs

import (
	"context"
	"log/slog"
)

// riverLogLevel is the least level of River's own lines that reach the
// process's log. Below it River says, every 5 s per queue whose jobs
// finished, how many did ("Producer job counts": with the periodic jobs,
// always), and that a job errored, which the job's worker logs itself.
const riverLogLevel = slog.LevelWarn

// atLeast passes a handler only the records at level or above.
type atLeast struct {
	slog.Handler
	level slog.Level
}

// Enabled drops what is below the level.
func (h atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

// WithAttrs keeps the level.
func (h atLeast) WithAttrs(as []slog.Attr) slog.Handler {
	return atLeast{Handler: h.Handler.WithAttrs(as), level: h.level}
}

// WithGroup keeps the level.
func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{Handler: h.Handler.WithGroup(name), level: h.level}
}
