package proc

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ordo-dev/ordo/cmd/internal/lockfile"
)

// MachineLockFile, in the machine's temporary directory, is held by the one
// harness run (make bench, make chaos, make soak) measuring the machine
// (lockfile). Two runs side by side share its cores: each judges the
// other's load, a chaos run's timing checks fail and a bench's ratios mean
// nothing.
const MachineLockFile = "ordo-harness.lock"

// ErrMachineBusy is wrapped by LockMachine's refusal.
var ErrMachineBusy = errors.New("another harness run holds the machine")

// LockMachine takes dir's machine lock for this process, described by what
// (its command line), or refuses with ErrMachineBusy naming the holder.
// release drops it.
func LockMachine(dir, what string) (release func(), err error) {
	l, err := lockfile.Take(filepath.Join(dir, MachineLockFile), 0o666,
		fmt.Sprintf("%s (pid %d, since %s)", what, os.Getpid(), time.Now().Format(time.DateTime)))
	var held *lockfile.HeldError
	if errors.As(err, &held) {
		return nil, fmt.Errorf("%w: %s; runs side by side share its cores and judge each other's load: wait for it to end, or stop it",
			ErrMachineBusy, cmp.Or(held.Holder, "a run that has not said who it is"))
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}
