package main

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chaosExecVar makes this test binary act as the ordo binary: the chaos
// run's API and worker processes are this binary, race detector included.
const chaosExecVar = "ORDO_CHAOS_EXEC"

func TestMain(m *testing.M) {
	if os.Getenv(chaosExecVar) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		code := run(ctx, readEnvironment(), os.Args[1:])
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestChaos is the short chaos run: 40 seconds of load with every kind of
// fault at least once (a Postgres restart included), then the checker.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes a minute or two")
	}
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep, err := chaos(context.Background(), chaosConfig{
		Duration:      40 * time.Second,
		Conversations: 60,
		Clients:       12,
		Rate:          12,
		Quiesce:       2 * time.Minute,
		WorkerKillMin: 6 * time.Second,
		WorkerKillMax: 10 * time.Second,
		Exec:          []string{exe},
		ExecEnv:       []string{chaosExecVar + "=1"},
		Out:           &out,
	})
	if err != nil {
		t.Fatalf("chaos run: %v\n%s", err, out.String())
	}
	if rep.failed() > 0 {
		t.Fatalf("%d checks failed:\n%s", rep.failed(), out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasSuffix(last, " 0 failed") {
		t.Errorf("last line %q, want \"N passed, 0 failed\"", last)
	}
	t.Log(out.String())
}
