package chaos

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildOrdo builds the product binary, race detector included, for the
// run's API and worker processes: the chaos run drives ordo through its
// binary, as an operator does.
func buildOrdo(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ordo")
	out, err := exec.Command("go", "build", "-race", "-o", bin, "github.com/ordo-dev/ordo/cmd/ordo").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -race ./cmd/ordo: %v\n%s", err, out)
	}
	return bin
}

// TestChaos is the short chaos run: 40 seconds of load with every kind of
// fault at least once (a Postgres restart included), then the checker.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes a minute or two")
	}
	t.Parallel()
	var out bytes.Buffer
	rep, err := Run(context.Background(), Config{
		Duration:      40 * time.Second,
		Conversations: 60,
		Clients:       12,
		Rate:          12,
		Quiesce:       2 * time.Minute,
		WorkerKillMin: 6 * time.Second,
		WorkerKillMax: 10 * time.Second,
		Exec:          []string{buildOrdo(t)},
		Out:           &out,
	})
	if err != nil {
		t.Fatalf("chaos run: %v\n%s", err, out.String())
	}
	if rep.Failed() > 0 {
		t.Fatalf("%d checks failed:\n%s", rep.Failed(), out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasSuffix(last, " 0 failed") {
		t.Errorf("last line %q, want \"N passed, 0 failed\"", last)
	}
	t.Log(out.String())
}
