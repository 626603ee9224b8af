package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrDataDirInUse: another live leafd holds the data directory.
var ErrDataDirInUse = errors.New("data directory in use")

// lockFileName is the file under DataDir that a running node holds locked.
const lockFileName = "leafd.lock"

// floorFileName is the file under DataDir where the segment engine keeps
// each tag's floor and the store's incarnation (segment.FloorFile).
const floorFileName = "segment-floors.json"

// dirLock is an exclusive advisory lock (flock) on DataDir/leafd.lock. Two
// nodes on one data directory would run two nats-servers on one JetStream
// store and two step files: the second must refuse at once. The kernel
// drops the lock when the process dies, so a kill -9 leaves no stale lock;
// the file's content (pid, name, start time) only names the holder.
type dirLock struct {
	f *os.File
}

// lockDataDir creates dir if needed and takes its lock, or fails with an
// error wrapping ErrDataDirInUse that names the holder.
func lockDataDir(dir, name string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			h := strings.TrimSpace(string(holder))
			if h == "" {
				h = "another process"
			}
			return nil, fmt.Errorf("%w: %s is held by %s; give each leafd its own --data", ErrDataDirInUse, dir, h)
		}
		return nil, fmt.Errorf("data directory %s: lock %s: %w", dir, path, err)
	}
	host, _ := os.Hostname()
	info := fmt.Sprintf("pid %d (leafd %q on %s, started %s)\n", os.Getpid(), name, host, time.Now().UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(info), 0)
	}
	return &dirLock{f: f}, nil
}

// Close releases the lock. The file stays: removing it would let a third
// process lock a new inode while a second still waits on the old one.
func (l *dirLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
	return err
}
