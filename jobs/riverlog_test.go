package jobs

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// River's info chatter stays out of the log, its warnings and errors get
// in, through groups and attributes too.
func TestRiverLogKeepsWarningsOnly(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := slog.New(atLeast{Handler: slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), level: riverLogLevel}).
		With(slog.String("component", "river")).WithGroup("g")
	l.Info("producer: Producer job counts")
	l.Debug("debug")
	l.Warn("elector: lost leadership")
	l.Error("notifier: error")
	got := buf.String()
	if strings.Contains(got, "job counts") || strings.Contains(got, "debug") {
		t.Fatalf("info or debug passed:\n%s", got)
	}
	if !strings.Contains(got, "lost leadership") || !strings.Contains(got, "notifier: error") {
		t.Fatalf("a warning or an error was dropped:\n%s", got)
	}
}
