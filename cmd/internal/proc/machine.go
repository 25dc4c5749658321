package proc

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

// MachineLockFile, in the machine's temporary directory, is held (flock)
// by the one harness run (make bench, make chaos, make soak) measuring the
// machine. Two runs side by side share its cores: each judges the other's
// load, a chaos run's timing checks fail and a bench's ratios mean
// nothing. It names its holder for the run that is refused. The kernel
// drops the lock when the holder exits, however it exits.
const MachineLockFile = "ordo-harness.lock"

// ErrMachineBusy is wrapped by LockMachine's refusal.
var ErrMachineBusy = errors.New("another harness run holds the machine")

// LockMachine takes dir's machine lock for this process, described by what
// (its command line), or refuses with ErrMachineBusy naming the holder.
// release drops it.
func LockMachine(dir, what string) (release func(), err error) {
	path := filepath.Join(dir, MachineLockFile)
	// No O_TRUNC: the file names the holder until the lock is ours.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		return nil, fmt.Errorf("%w: %s; runs side by side share its cores and judge each other's load: wait for it to end, or stop it",
			ErrMachineBusy, holderOf(f))
	}
	holder := fmt.Sprintf("%s (pid %d, since %s)", what, os.Getpid(), time.Now().Format(time.DateTime))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(holder+"\n"), 0)
	}
	return func() { _ = f.Close() }, nil
}

// holderOf reads the holder's line, giving a holder that has only just
// taken the lock a moment to write it.
func holderOf(f *os.File) string {
	for range 20 {
		b, _ := io.ReadAll(io.NewSectionReader(f, 0, 1024))
		if s := strings.TrimSpace(string(b)); s != "" {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "a run that has not said who it is"
}
