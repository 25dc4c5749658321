// Package outage treats a dependency that is down — Postgres, for a process
// — as a state that every loop waits on, not as a failure of each attempt:
// the first failure takes it down (one log line), every loop then backs off
// together (capped, jittered), and the first success brings it back (one
// log line). The policy is the pure [State]; [Watch] is the thin,
// concurrent shell a process shares between its loops.
package outage

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Defaults of Config's fields.
const (
	// BackoffMinDefault is the first wait after a dependency goes down.
	BackoffMinDefault = 250 * time.Millisecond
	// BackoffMaxDefault caps the wait: a dependency that returns is seen
	// within about this long.
	BackoffMaxDefault = 4 * time.Second
	// GoneDefault and BackDefault are what the two log lines say after the
	// dependency's name.
	GoneDefault = "is unreachable; every loop waits for it"
	BackDefault = "is back"
)

// Config shapes the backoff.
type Config struct {
	// BackoffMin is the first wait; doubled per failure up to BackoffMax.
	// Default BackoffMinDefault.
	BackoffMin time.Duration
	// BackoffMax caps the wait. Default BackoffMaxDefault.
	BackoffMax time.Duration
	// Gone and Back are what the log line says after the name when the
	// dependency goes and when it is back. Defaults GoneDefault,
	// BackDefault.
	Gone, Back string
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.BackoffMin = cmp.Or(c.BackoffMin, BackoffMinDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, BackoffMaxDefault)
	c.Gone = cmp.Or(c.Gone, GoneDefault)
	c.Back = cmp.Or(c.Back, BackDefault)
	return c
}

// State is a dependency's state: up, or down since Since with Failures
// failed tries and the next try not before Next. Its methods are pure: the
// clock and the jitter come in as arguments.
type State struct {
	Down     bool
	Since    time.Time
	Failures int
	Next     time.Time
}

// Failed records a failed try at now. wentDown is true for the failure
// that took the dependency down; the next try is due after the backoff
// (jitter in [0, 1): its fraction added to half the exponential wait).
func (s State) Failed(c Config, now time.Time, jitter float64) (next State, wentDown bool) {
	if !s.Down {
		s = State{Down: true, Since: now}
		wentDown = true
	}
	s.Failures++
	wait := c.BackoffMax
	if s.Failures < 30 {
		wait = min(c.BackoffMin<<(s.Failures-1), c.BackoffMax)
	}
	wait = wait/2 + time.Duration(jitter*float64(wait/2))
	s.Next = now.Add(wait)
	return s, wentDown
}

// Succeeded records a successful try: the dependency is up; cameBack is
// true when it was down, for downFor.
func (s State) Succeeded(now time.Time) (next State, cameBack bool, downFor time.Duration) {
	if !s.Down {
		return s, false, 0
	}
	return State{}, true, now.Sub(s.Since)
}

// Wait is how long a loop should wait at now before its next try: 0 while
// the dependency is up.
func (s State) Wait(now time.Time) time.Duration {
	if !s.Down {
		return 0
	}
	return max(s.Next.Sub(now), 0)
}

// Watch is one dependency's state shared by a process's loops. The zero
// value is not usable; see NewWatch.
type Watch struct {
	name    string
	cfg     Config
	logger  *slog.Logger
	now     func() time.Time
	jitter  func() float64
	mu      sync.Mutex
	state   State
	upSince time.Time     // when the watch was made or the dependency last came back
	changed chan struct{} // closed and replaced when the dependency comes back
}

// NewWatch watches the dependency called name (in its two log lines).
func NewWatch(name string, cfg Config, logger *slog.Logger) *Watch {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return newWatch(name, cfg, logger, time.Now)
}

func newWatch(name string, cfg Config, logger *slog.Logger, now func() time.Time) *Watch {
	return &Watch{name: name, cfg: cfg.WithDefaults(), logger: logger, now: now, jitter: rand.Float64, upSince: now(), changed: make(chan struct{})}
}

// Report records the outcome of a try: err nil is a success; otherwise
// down says whether err means the dependency is unreachable (a loop's own
// errors are not the dependency's state). It logs the two transitions,
// once each, and answers whether the dependency is down now.
func (w *Watch) Report(err error, down func(error) bool) bool {
	if w == nil {
		return false
	}
	if err != nil && !down(err) {
		return w.Down()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if err == nil {
		next, back, downFor := w.state.Succeeded(now)
		w.state = next
		if back {
			w.upSince = now
			close(w.changed)
			w.changed = make(chan struct{})
			w.logger.Info(w.name+" "+w.cfg.Back, slog.Duration("down_for", downFor.Round(time.Millisecond)))
		}
		return false
	}
	next, wentDown := w.state.Failed(w.cfg, now, w.jitter())
	w.state = next
	if wentDown {
		w.logger.Warn(w.name+" "+w.cfg.Gone, slog.String("error", err.Error()))
	}
	return true
}

// Down says whether the dependency is down.
func (w *Watch) Down() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state.Down
}

// UpFor is how long the dependency has been up as far as this watch knows:
// since the watch was made or since it last came back; 0 while it is down.
// A nil watch has always been up. A decision that other processes' silence
// means they are gone waits until UpFor covers the silence: right after an
// outage everyone was silent.
func (w *Watch) UpFor() time.Duration {
	if w == nil {
		return 1<<63 - 1
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state.Down {
		return 0
	}
	return w.now().Sub(w.upSince)
}

// Wait is how long a loop should wait before its next try (0: up).
func (w *Watch) Wait() time.Duration {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state.Wait(w.now())
}

// Sleep waits out the backoff, or at least least, until ctx ends. It
// returns ctx's error, if any.
func (w *Watch) Sleep(ctx context.Context, least time.Duration) error {
	t := time.NewTimer(max(w.Wait(), least))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// QuietHandler is a slog.Handler for a library whose loops (River's
// producer and elector) retry against a database that is away
// and log each try and reconnection: while the watched dependency is down
// it drops them all; the watch's two lines say what they would.
type QuietHandler struct {
	slog.Handler
	Watch *Watch
}

// Enabled drops everything while the dependency is down.
func (h QuietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	if h.Watch.Down() {
		return false
	}
	return h.Handler.Enabled(ctx, l)
}

// WithAttrs keeps the handler quiet.
func (h QuietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return QuietHandler{Handler: h.Handler.WithAttrs(as), Watch: h.Watch}
}

// WithGroup keeps the handler quiet.
func (h QuietHandler) WithGroup(name string) slog.Handler {
	return QuietHandler{Handler: h.Handler.WithGroup(name), Watch: h.Watch}
}
