package bench

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
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
