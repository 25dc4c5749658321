// Package proc supervises the child processes of ordo's harnesses: the
// benchmark's systems and the crash run's API and worker processes. One
// supervisor for both, so that every child dies with its parent (Pdeathsig),
// logs to its own file, and is started, signalled, stopped and restarted the
// same way.
package proc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Config is one child process.
type Config struct {
	// Name names the process in log lines and errors.
	Name string
	// Argv is the command and its arguments; Env its whole environment
	// (nil: this process's).
	Argv []string
	Env  []string
	// Dir is the working directory (empty: this process's); with
	// Credential, one that account can enter.
	Dir string
	// LogPath receives the process's stderr, and its stdout unless Stdout is
	// set; each incarnation is appended, between "=== name start/exited"
	// lines.
	LogPath string
	// Stdout, if set, is called with each line the process prints on stdout
	// (the benchmark's children announce "ready ADDR" there).
	Stdout func(line string)
	// RestartAfter, if positive, restarts a process that exited without
	// being asked to, after this pause (the crash run's processes may refuse
	// to start while Postgres restarts). Zero: an unexpected exit is final.
	RestartAfter time.Duration
	// Logf, if set, is told of each exit nobody asked for and of a failed
	// restart.
	Logf func(format string, args ...any)
	// Credential, if set, runs the process as another account (Patroni
	// starts PostgreSQL, which refuses to run as root). Default: this
	// process's.
	Credential *syscall.Credential
}

// Proc is a supervised child process. Its methods are safe for concurrent
// use.
type Proc struct {
	cfg Config

	mu         sync.Mutex
	cmd        *exec.Cmd // nil while down
	last       *exec.Cmd // the latest incarnation, up or not
	exited     chan struct{}
	exitErr    error // of the latest incarnation, once exited
	stopped    bool  // SIGSTOPped
	final      bool  // shut down: no more starts
	starts     int
	unexpected int // exits nobody asked for
}

// New returns a supervisor for cfg; nothing runs until Start.
func New(cfg Config) *Proc { return &Proc{cfg: cfg} }

// Name is Config.Name.
func (p *Proc) Name() string { return p.cfg.Name }

// LogPath is Config.LogPath.
func (p *Proc) LogPath() string { return p.cfg.LogPath }

// SetCommand replaces the first n words of the process's Argv (its
// command) by command, for its next Start: an upgrade to another build.
func (p *Proc) SetCommand(n int, command []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.Argv = append(append([]string(nil), command...), p.cfg.Argv[n:]...)
}

// Start starts the process if it is down (and not shut down for good).
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.final || p.cmd != nil {
		return nil
	}
	f, err := os.OpenFile(p.cfg.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== %s start #%d at %s\n", p.cfg.Name, p.starts+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.cfg.Argv[0], p.cfg.Argv[1:]...)
	cmd.Dir = p.cfg.Dir
	cmd.Env = p.cfg.Env
	cmd.Stdout, cmd.Stderr = f, f
	var stdout io.ReadCloser
	if p.cfg.Stdout != nil {
		cmd.Stdout = nil
		if stdout, err = cmd.StdoutPipe(); err != nil {
			f.Close()
			return err
		}
	}
	// Should the harness itself die, its children die with it.
	// (Go sets the signal after switching to Credential's account, which
	// would otherwise clear it.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: p.cfg.Credential}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.cfg.Name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.last, p.exited, p.exitErr, p.stopped = cmd, cmd, exited, nil, false
	p.starts++
	go p.watch(cmd, exited, f, stdout)
	return nil
}

// watch waits for one incarnation to exit and restarts it if nobody asked
// for the exit and the configuration says so.
func (p *Proc) watch(cmd *exec.Cmd, exited chan struct{}, f *os.File, stdout io.Reader) {
	if stdout != nil {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.cfg.Stdout(sc.Text())
		}
	}
	err := cmd.Wait() // after the last read of stdout, as exec wants
	fmt.Fprintf(f, "=== %s exited at %s: %v\n", p.cfg.Name, time.Now().Format(time.RFC3339Nano), err)
	f.Close()
	p.mu.Lock()
	p.exitErr = err
	close(exited)
	unexpected := p.cmd == cmd // Kill, Term and Stop clear p.cmd first
	if unexpected {
		p.cmd = nil
		p.unexpected++
	}
	final := p.final
	p.mu.Unlock()
	if !unexpected || final {
		return
	}
	logf := p.cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if p.cfg.RestartAfter <= 0 {
		logf("%s exited on its own (%v)", p.cfg.Name, err)
		return
	}
	logf("%s exited on its own (%v); restarting it in %s", p.cfg.Name, err, p.cfg.RestartAfter)
	time.Sleep(p.cfg.RestartAfter)
	if err := p.Start(); err != nil {
		logf("restart %s: %v", p.cfg.Name, err)
	}
}

// take claims the running incarnation for a signal that ends it: false if
// the process is down, stalled (a stall ends with Resume) or shut down.
func (p *Proc) take() (*exec.Cmd, chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil || p.stopped || p.final {
		return nil, nil, false
	}
	p.cmd = nil
	return cmd, exited, true
}

// Kill sends SIGKILL and waits for the exit; false if the process is down
// or stalled. Start brings it back.
func (p *Proc) Kill() (pid int, ok bool) {
	cmd, exited, ok := p.take()
	if !ok {
		return 0, false
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	return cmd.Process.Pid, true
}

// Term sends SIGTERM, as a deploy does, and waits up to grace for the exit,
// then SIGKILLs. It returns the pid, how the process exited (nil: cleanly),
// and false if the process was down or stalled. Start brings it back.
func (p *Proc) Term(grace time.Duration) (pid int, exitErr error, ok bool) {
	cmd, exited, ok := p.take()
	if !ok {
		return 0, nil, false
	}
	return cmd.Process.Pid, p.endGracefully(cmd, exited, grace), true
}

// endGracefully sends SIGTERM (and SIGCONT, should the process be
// stalled), waits up to grace, then SIGKILLs.
func (p *Proc) endGracefully(cmd *exec.Cmd, exited chan struct{}, grace time.Duration) error {
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		return fmt.Errorf("%s did not exit within %s of SIGTERM; killed", p.cfg.Name, grace)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Stall sends SIGSTOP; false if the process is down or already stalled.
func (p *Proc) Stall() (pid int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.stopped || p.final {
		return 0, false
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return 0, false
	}
	p.stopped = true
	return p.cmd.Process.Pid, true
}

// Resume sends SIGCONT to a stalled process.
func (p *Proc) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.stopped {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	p.stopped = false
}

// Stop shuts the process down for good: SIGTERM (graceful), SIGKILL if it
// is not gone within grace. It returns how the process exited: nil for a
// clean exit, or if it was already down.
func (p *Proc) Stop(grace time.Duration) error {
	p.mu.Lock()
	p.final = true
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	return p.endGracefully(cmd, exited, grace)
}

// Done is closed when the latest incarnation exits; nil before Start.
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// Err is how the latest incarnation exited, once Done is closed.
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Pid is the latest incarnation's process id; 0 before Start.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		return 0
	}
	return p.last.Process.Pid
}

// CPUUsed is the CPU time the latest incarnation used; valid once it
// exited.
func (p *Proc) CPUUsed() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil || p.last.ProcessState == nil {
		return 0
	}
	return p.last.ProcessState.UserTime() + p.last.ProcessState.SystemTime()
}

// Unexpected is how many exits nobody asked for there were.
func (p *Proc) Unexpected() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unexpected
}

// LogTail is the end of the process's log, for an error message.
func (p *Proc) LogTail() string {
	b, err := os.ReadFile(p.cfg.LogPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\n--- " + p.cfg.LogPath + " (end) ---\n" + string(b)
}
