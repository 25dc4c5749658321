package proc

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// graceful is a child that announces itself on stdout and exits 0 on
// SIGTERM, as `ordo serve` does.
const graceful = `trap 'exit 0' TERM; echo "ready $$"; while :; do sleep 0.05; done`

func newShell(t *testing.T, script string, cfg Config) (*Proc, chan string) {
	t.Helper()
	lines := make(chan string, 10)
	cfg.Name = "sh"
	cfg.Argv = []string{"/bin/sh", "-c", script}
	cfg.LogPath = filepath.Join(t.TempDir(), "sh.log")
	cfg.Stdout = func(l string) { lines <- l }
	p := New(cfg)
	t.Cleanup(func() { _ = p.Stop(5 * time.Second) })
	return p, lines
}

func waitLine(t *testing.T, lines chan string) string {
	t.Helper()
	select {
	case l := <-lines:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no line from the child within 10s")
		return ""
	}
}

func TestTermIsGracefulAndStartBringsItBack(t *testing.T) {
	t.Parallel()
	p, lines := newShell(t, graceful, Config{})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if l := waitLine(t, lines); !strings.HasPrefix(l, "ready ") {
		t.Fatalf("first line %q, want ready", l)
	}
	pid, exitErr, ok := p.Term(5 * time.Second)
	if !ok || pid == 0 || exitErr != nil {
		t.Fatalf("Term = %d, %v, %v; want a pid, a clean exit, true", pid, exitErr, ok)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, lines)
	if p.Pid() == pid {
		t.Errorf("the restarted child has the old pid %d", pid)
	}
	if n := p.Unexpected(); n != 0 {
		t.Errorf("%d unexpected exits after a Term, want 0", n)
	}
}

func TestKillAndStallAreRefusedWhileStalled(t *testing.T) {
	t.Parallel()
	p, lines := newShell(t, graceful, Config{})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, lines)
	if _, ok := p.Stall(); !ok {
		t.Fatal("Stall of a running child refused")
	}
	if _, ok := p.Kill(); ok {
		t.Error("Kill of a stalled child accepted: a stall ends with Resume")
	}
	p.Resume()
	if _, ok := p.Kill(); !ok {
		t.Error("Kill after Resume refused")
	}
}

func TestAnUnexpectedExitIsRestarted(t *testing.T) {
	t.Parallel()
	logs := make(chan string, 10)
	p, lines := newShell(t, `echo "ready $$"; sleep 0.2; exit 3`, Config{
		RestartAfter: 100 * time.Millisecond,
		Logf: func(format string, args ...any) {
			select {
			case logs <- format:
			default:
			}
		},
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	first := waitLine(t, lines)
	if second := waitLine(t, lines); second == first {
		t.Fatalf("restarted child printed %q again: the same process?", second)
	}
	if l := <-logs; !strings.Contains(l, "exited on its own") {
		t.Errorf("logged %q, want the unexpected exit", l)
	}
	if p.Unexpected() < 1 {
		t.Errorf("%d unexpected exits, want at least 1", p.Unexpected())
	}
}

// A second harness run on the machine is refused while the first holds it,
// naming the first; once the first ends, the next one runs. (Session 15
// started two chaos runs at once by mistake: both ran, at twice the load,
// into one log.)
func TestASecondHarnessRunIsRefused(t *testing.T) {
	// Not parallel: this package's other tests start processes, and a child
	// between fork and exec shares the lock's open file, so the lock would
	// outlive its release for that moment (CI: "after the first ended:
	// another harness run holds the machine").
	dir := t.TempDir()
	release, err := LockMachine(dir, "ordo-chaos --seed 1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockMachine(dir, "ordo-chaos --seed 2")
	if !errors.Is(err, ErrMachineBusy) || !strings.Contains(err.Error(), "ordo-chaos --seed 1 (pid ") {
		t.Fatalf("second run: %v; want it refused, naming the first", err)
	}
	release()
	release2, err := LockMachine(dir, "ordo-bench")
	if err != nil {
		t.Fatalf("after the first ended: %v", err)
	}
	release2()
}
