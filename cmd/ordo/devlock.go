package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// devLockFile, in .ordo/, is held (flock) by the one `ordo dev` that owns
// the directory: its Postgres cluster, env file and demo key. It names the
// holder's pid and address for a second `ordo dev`, which refuses. The
// kernel drops the lock when the holder exits, however it exits, so a
// killed ordo dev leaves nothing to clean up.
const devLockFile = "dev.lock"

// errDevRunning is wrapped by lockDevDir's refusal.
var errDevRunning = errors.New("already running")

// devLock is a held dev lock; release it when the cluster has stopped.
type devLock struct{ f *os.File }

// lockDevDir takes dir's dev lock for this process serving at addr, or
// refuses with the holder's "already running: pid N, address A".
func lockDevDir(dir, addr string) (*devLock, error) {
	path := filepath.Join(dir, devLockFile)
	// No O_TRUNC: the file holds the holder's pid until the lock is ours.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		return nil, fmt.Errorf("%w: %s in %s; stop it (Ctrl-C in its terminal) or use its API, "+
			"or run this one from another directory", errDevRunning, readHolder(f), dir)
	}
	holder := fmt.Sprintf("pid %d, address %s\n", os.Getpid(), addr)
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(holder), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &devLock{f: f}, nil
}

// readHolder reads the lock holder's line, giving a holder that has only
// just taken the lock a moment to write it.
func readHolder(f *os.File) string {
	for range 20 {
		b, _ := io.ReadAll(io.NewSectionReader(f, 0, 256))
		if s := strings.TrimSpace(string(b)); s != "" {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "pid unknown, address unknown"
}

// release drops the lock; the file stays, naming the last holder.
func (l *devLock) release() {
	_ = l.f.Close()
}
