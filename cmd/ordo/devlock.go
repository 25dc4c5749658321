package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ordo-dev/ordo/cmd/internal/lockfile"
)

// devLockFile, in .ordo/, is held by the one `ordo dev` that owns the
// directory: its Postgres cluster, env file and demo key. It names the
// holder's pid and address for a second `ordo dev`, which refuses
// (lockfile: a killed ordo dev leaves nothing to clean up).
const devLockFile = "dev.lock"

// errDevRunning is wrapped by lockDevDir's refusal.
var errDevRunning = errors.New("already running")

// lockDevDir takes dir's dev lock for this process serving at addr, or
// refuses with the holder's "already running: pid N, address A". Release
// it when the cluster has stopped.
func lockDevDir(dir, addr string) (*lockfile.Lock, error) {
	l, err := lockfile.Take(filepath.Join(dir, devLockFile), 0o600, fmt.Sprintf("pid %d, address %s", os.Getpid(), addr))
	var held *lockfile.HeldError
	if errors.As(err, &held) {
		return nil, fmt.Errorf("%w: %s in %s; stop it (Ctrl-C in its terminal) or use its API, "+
			"or run this one from another directory", errDevRunning, cmp.Or(held.Holder, "pid unknown, address unknown"), dir)
	}
	return l, err
}
