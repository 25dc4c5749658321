// Package lockfile is a file lock (flock) that names its holder: the one
// `ordo dev` of a directory, the one harness run of a machine. A second
// taker is refused with the holder's line. The kernel drops the lock when
// its holder exits, however it exits, so nothing is left to clean up; the
// file stays, naming the last holder.
package lockfile

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"
)

// HeldError is Take's refusal: another process holds the lock. Holder is
// its line, empty when it has not written one.
type HeldError struct{ Holder string }

func (e *HeldError) Error() string { return "held by " + cmp.Or(e.Holder, "an unknown holder") }

// Lock is a held lock; Release drops it.
type Lock struct{ f *os.File }

// Take locks path (created with perm if need be) for holder, a line that
// names this process to a later taker, or refuses with *HeldError.
func Take(path string, perm os.FileMode, holder string) (*Lock, error) {
	// No O_TRUNC: the file names the holder until the lock is ours.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, perm)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		return nil, &HeldError{Holder: readHolder(f)}
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(holder+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// readHolder reads the holder's line, giving a holder that has only just
// taken the lock a moment to write it.
func readHolder(f *os.File) string {
	for range 20 {
		b, _ := io.ReadAll(io.NewSectionReader(f, 0, 1024))
		if s := strings.TrimSpace(string(b)); s != "" {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ""
}

// Release drops the lock.
func (l *Lock) Release() { _ = l.f.Close() }
