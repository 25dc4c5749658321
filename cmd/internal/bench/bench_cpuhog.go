package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
)

// cpuHogArg, first on the command line, makes ordo-bench a CPU hog: one
// process spinning on one core until it is killed (--cpu-hog N starts N
// of them beside the run, to measure on a machine that others load).
const cpuHogArg = "--cpu-hog-child"

// cpuHog spins forever on one core.
func cpuHog() {
	runtime.GOMAXPROCS(1)
	var x uint64
	for {
		x = x*6364136223846793005 + 1442695040888963407
		if x == 0 {
			fmt.Fprintln(os.Stderr, x) // never: keeps the loop from being optimized away
		}
	}
}

// startCPUHogs starts n hogs at the default niceness (0: they compete with
// the run as equals) and returns what stops them. They die with the bench
// too (Pdeathsig), should it be killed.
func startCPUHogs(n int) (stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var hogs []*exec.Cmd
	stop = func() {
		for _, h := range hogs {
			_ = h.Process.Kill()
			_ = h.Wait()
		}
		hogs = nil
	}
	for range n {
		h := exec.Command(exe, cpuHogArg)
		h.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := h.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("--cpu-hog: %w", err)
		}
		hogs = append(hogs, h)
	}
	return stop, nil
}

// InstrumentNiceDefault is the niceness the bench process itself (the load
// generator and the fake Cloud API: the instrument) takes while hogs run
// (--instrument-nice). The systems measured, Postgres and the hogs stay at
// 0 and compete as equals; the instrument does not compete with them, as
// Meta's servers do not run on ordo's machine. (With
// it, under two hogs, a quiet send ordo started at +23 ms still reached
// the fake Cloud API at +123 ms: that wait is ordo's own.)
const InstrumentNiceDefault = -10

// raiseInstrument sets every thread of this process to nice (Linux keeps a
// niceness per thread; threads started later inherit their creator's).
// Children started afterwards must be put back (niceArgv). It needs root
// (CAP_SYS_NICE) to go below 0.
func raiseInstrument(nice int) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("--instrument-nice: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("--instrument-nice %d: %w (it needs root; --instrument-nice 0 leaves the instrument competing)", nice, err)
		}
	}
	return nil
}

// niceArgv runs argv back at niceness 0 from a process at nice (nice(1)
// adds to the caller's niceness).
func niceArgv(nice int, argv []string) []string {
	if nice == 0 {
		return argv
	}
	return append([]string{"nice", "-n", strconv.Itoa(-nice), "--"}, argv...)
}
