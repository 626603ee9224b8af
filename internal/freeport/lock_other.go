//go:build !unix

package freeport

import (
	"errors"
	"os"
)

var errLocked = errors.New("held by another process")

// lock opens path; without flock, ports are handed out once per process
// only.
func lock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
}
