//go:build unix

package freeport

import (
	"errors"
	"os"
	"syscall"
)

var errLocked = errors.New("held by another process")

// lock opens path and takes an exclusive lock on it without waiting; the
// lock lasts until the file is closed or the process exits.
func lock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, err
	}
	return f, nil
}
