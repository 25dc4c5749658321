package pgcluster

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StopLeftover shuts down, immediately, a server still running on the
// cluster directory dir when the orderly stop failed (or Start got half way),
// so that deleting the directory leaves no server behind.
func StopLeftover(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 0 {
		return
	}
	// SIGQUIT is PostgreSQL's immediate shutdown.
	if syscall.Kill(pid, syscall.SIGQUIT) != nil {
		return
	}
	for range 100 {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}
