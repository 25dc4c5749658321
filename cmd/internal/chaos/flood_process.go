package chaos

// Starting the flood generator (flood_generator.go) as a process of its own
// with a CPU budget of its own: the attacker's machine, modelled on this
// one. By default a cgroup v1 CPU quota of Config.HostileCores
// (HostileCoresDefault, half a core): the flood then takes the same CPU
// whatever else the machine runs, a known and real flood, and never more.
// Where no cgroup can be made (not root, no cgroup v1 cpu controller), or
// with HostileCores negative, it runs at nice 19 instead: it takes only
// what the machine leaves idle, which on a busy machine may be little (the
// report gives the rate it reached either way).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// HostileCoresDefault is the flood generator's CPU quota (Config.HostileCores).
const HostileCoresDefault = 0.5

// cgroupCPURoot is where the cgroup v1 cpu controller is mounted.
const cgroupCPURoot = "/sys/fs/cgroup/cpu"

// cfsPeriod is the cgroup's CPU accounting period; the quota is a share of it.
const cfsPeriod = 100 * time.Millisecond

// floodProcess is a running flood generator.
type floodProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout bytes.Buffer
	stderr bytes.Buffer
	cgroup string // its cgroup's directory; "" when it runs at nice 19
	// budget says how its CPU is limited, for the log and the report.
	budget string
	began  time.Time
}

// floodUsage is what the generator's process used, from its start to its
// exit.
type floodUsage struct {
	CPU, Wall time.Duration
}

// cores is its CPU use in cores.
func (u floodUsage) cores() float64 {
	if u.Wall <= 0 {
		return 0
	}
	return u.CPU.Seconds() / u.Wall.Seconds()
}

// startFlood starts the generator and hands it spec. cores > 0 asks for a
// cgroup CPU quota of that many cores, nice 19 where none can be made;
// cores <= 0 asks for nice 19.
func startFlood(spec floodSpec, cores float64) (*floodProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("flood generator: %w", err)
	}
	p := &floodProcess{}
	var whyNice string
	if cores > 0 {
		if p.cgroup, err = makeCPUQuota(cores); err != nil {
			whyNice = fmt.Sprintf(" (no CPU quota: %v)", err)
		}
	}
	argv := []string{exe, FloodCommand}
	if p.cgroup == "" {
		// nice(1) sets the priority before the exec, so every thread the Go
		// runtime starts has it (setpriority on a pid reaches one thread).
		argv = append([]string{"nice", "-n", "19"}, argv...)
		p.budget = "nice 19" + whyNice
	} else {
		p.budget = fmt.Sprintf("cgroup CPU quota %.2g cores", cores)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	// It dies with the harness, like ordo's processes.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &limitedWriter{w: &p.stderr, left: 64 << 10}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		p.removeCgroup()
		return nil, err
	}
	p.began = time.Now()
	if err := p.cmd.Start(); err != nil {
		p.removeCgroup()
		return nil, fmt.Errorf("flood generator: %w", err)
	}
	if p.cgroup != "" {
		// Moves every thread of the process; those it starts later follow.
		// The generator waits for its spec before it sends anything.
		if err := os.WriteFile(filepath.Join(p.cgroup, "cgroup.procs"), []byte(strconv.Itoa(p.cmd.Process.Pid)), 0o644); err != nil {
			p.kill()
			return nil, fmt.Errorf("flood generator into %s: %w", p.cgroup, err)
		}
	}
	line, _ := json.Marshal(spec)
	if _, err := p.stdin.Write(append(line, '\n')); err != nil {
		p.kill()
		return nil, fmt.Errorf("flood generator: %w", err)
	}
	return p, nil
}

// stop ends the flood (the end of stdin) and returns what the generator
// reported and what its process used.
func (p *floodProcess) stop() (floodResult, floodUsage, error) {
	_ = p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second): // its requests time out after 30 s at most
		_ = p.cmd.Process.Kill()
		err = errors.Join(errors.New("did not end within 30s of its stdin"), <-done)
	}
	use := floodUsage{Wall: time.Since(p.began)}
	p.removeCgroup()
	if st := p.cmd.ProcessState; st != nil {
		use.CPU = st.UserTime() + st.SystemTime()
	}
	if err != nil {
		return floodResult{}, use, fmt.Errorf("flood generator: %w: %s", err, strings.TrimSpace(p.stderr.String()))
	}
	var res floodResult
	if err := json.Unmarshal(p.stdout.Bytes(), &res); err != nil {
		return floodResult{}, use, fmt.Errorf("flood generator's report %q: %w", p.stdout.String(), err)
	}
	return res, use, nil
}

func (p *floodProcess) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.removeCgroup()
}

func (p *floodProcess) removeCgroup() {
	if p.cgroup != "" {
		_ = os.Remove(p.cgroup) // an empty cgroup is removed with rmdir
	}
}

// floodCgroups numbers the generators' cgroups of this process.
var floodCgroups atomic.Int64

// makeCPUQuota makes a cgroup under the harness's own in the cgroup v1 cpu
// controller that may use cores of CPU time per wall-clock second, and
// returns its directory. Cgroups left by a harness that died (it cannot
// remove them then) are removed first.
func makeCPUQuota(cores float64) (string, error) {
	own, err := ownCPUCgroup()
	if err != nil {
		return "", err
	}
	parent := filepath.Join(cgroupCPURoot, own)
	if _, err := os.Stat(filepath.Join(parent, "cpu.cfs_quota_us")); err != nil {
		return "", fmt.Errorf("no cgroup v1 cpu controller at %s", parent)
	}
	// ordo-chaos-flood-<harness pid>-<n>
	stale, _ := filepath.Glob(filepath.Join(parent, "ordo-chaos-flood-*-*"))
	for _, d := range stale {
		owner, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), "ordo-chaos-flood-"), "-")
		if pid, err := strconv.Atoi(owner); err == nil && syscall.Kill(pid, 0) != nil {
			_ = os.Remove(d)
		}
	}
	dir := filepath.Join(parent, fmt.Sprintf("ordo-chaos-flood-%d-%d", os.Getpid(), floodCgroups.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	period := cfsPeriod.Microseconds()
	quota := int64(cores * float64(period))
	for _, f := range []struct {
		name string
		v    int64
	}{{"cpu.cfs_period_us", period}, {"cpu.cfs_quota_us", quota}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(strconv.FormatInt(f.v, 10)), 0o644); err != nil {
			_ = os.Remove(dir)
			return "", err
		}
	}
	return dir, nil
}

// ownCPUCgroup is the harness's own cgroup path in the cpu controller
// (/proc/self/cgroup, cgroup v1).
func ownCPUCgroup() (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				return parts[2], nil
			}
		}
	}
	return "", errors.New("no cgroup v1 cpu controller for this process")
}

// limitedWriter keeps the first left bytes written to it.
type limitedWriter struct {
	w    io.Writer
	left int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.left > 0 {
		n, _ := l.w.Write(p[:min(len(p), l.left)])
		l.left -= n
	}
	return len(p), nil
}
