package outage

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestStateBacksOffCappedAndComesBack(t *testing.T) {
	t.Parallel()
	c := Config{BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second}.WithDefaults()
	t0 := time.Unix(1000, 0)
	var s State
	for i, tc := range []struct {
		jitter   float64
		wantDown bool
		wantWait time.Duration
	}{
		{jitter: 0, wantDown: true, wantWait: 50 * time.Millisecond}, // half of 100ms
		{jitter: 0.999999, wantWait: 200 * time.Millisecond},         // about all of 200ms
		{jitter: 0, wantWait: 200 * time.Millisecond},                // half of 400ms
		{jitter: 0, wantWait: 400 * time.Millisecond},                // half of 800ms
		{jitter: 0, wantWait: 500 * time.Millisecond},                // half of the cap
		{jitter: 0, wantWait: 500 * time.Millisecond},
	} {
		var down bool
		s, down = s.Failed(c, t0, tc.jitter)
		if down != tc.wantDown {
			t.Fatalf("failure %d: wentDown %v, want %v", i+1, down, tc.wantDown)
		}
		if got := s.Wait(t0); got.Round(time.Millisecond) != tc.wantWait {
			t.Fatalf("failure %d: wait %s, want %s", i+1, got, tc.wantWait)
		}
	}
	for range 100 {
		s, _ = s.Failed(c, t0, 0.999999)
	}
	if w := s.Wait(t0); w > c.BackoffMax {
		t.Fatalf("after 106 failures the wait is %s; want at most the cap %s", w, c.BackoffMax)
	}
	if w := s.Wait(t0.Add(time.Hour)); w != 0 {
		t.Fatalf("wait %s after the next try's time; want 0", w)
	}
	s, back, downFor := s.Succeeded(t0.Add(15 * time.Second))
	if !back || downFor != 15*time.Second || s.Down || s.Wait(t0) != 0 {
		t.Fatalf("after a success: back %v, down for %s, state %+v", back, downFor, s)
	}
	if _, back, _ := s.Succeeded(t0); back {
		t.Fatal("a success while up says it came back")
	}
}

// A dependency that stays down for many tries is logged twice: when it
// goes and when it is back, whatever the number of loops and tries.
func TestWatchLogsOnceWhenItGoesAndOnceWhenItIsBack(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := NewWatch("postgres", Config{}, slog.New(slog.NewTextHandler(&buf, nil)))
	isDown := func(err error) bool { return err.Error() == "refused" }
	if w.Report(errors.New("duplicate key"), isDown) {
		t.Fatal("an error that is not an outage took the dependency down")
	}
	for range 1000 {
		if !w.Report(errors.New("refused"), isDown) {
			t.Fatal("down dependency reported up")
		}
	}
	if w.Wait() <= 0 || w.Wait() > BackoffMaxDefault {
		t.Fatalf("wait %s while down; want within (0, %s]", w.Wait(), BackoffMaxDefault)
	}
	w.Report(nil, isDown)
	w.Report(nil, isDown)
	lines := strings.Count(buf.String(), "\n")
	if lines != 2 || !strings.Contains(buf.String(), "postgres is unreachable") || !strings.Contains(buf.String(), "postgres is back") {
		t.Fatalf("logged %d lines, want 2 (down, back):\n%s", lines, buf.String())
	}
	if w.Down() || w.Wait() != 0 {
		t.Fatal("still down after a success")
	}
}

// UpFor counts from the watch's making and from each return, and is 0
// while the dependency is down: right after an outage nobody has had time
// to be heard from.
func TestWatchUpForCountsFromTheReturn(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	w := newWatch("postgres", Config{}, slog.New(slog.DiscardHandler), func() time.Time { return now })
	isDown := func(error) bool { return true }
	now = now.Add(time.Minute)
	if got := w.UpFor(); got != time.Minute {
		t.Fatalf("up for %s a minute after the start; want 1m", got)
	}
	w.Report(errors.New("refused"), isDown)
	now = now.Add(30 * time.Second)
	if got := w.UpFor(); got != 0 {
		t.Fatalf("up for %s while down; want 0", got)
	}
	w.Report(nil, isDown)
	now = now.Add(5 * time.Second)
	if got := w.UpFor(); got != 5*time.Second {
		t.Fatalf("up for %s 5 s after the return; want 5s", got)
	}
	var none *Watch
	if none.UpFor() < time.Hour {
		t.Fatal("a nil watch (nothing watched) must count as up for ever")
	}
}
