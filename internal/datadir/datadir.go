package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/leafmq/leafmq/internal/fsutil"
)

// ErrInUse: another live leafd holds the data directory.
var ErrInUse = errors.New("data directory in use")

// lockFileName is the file under the data directory that names the node
// holding it.
const lockFileName = "leafd.lock"

// FloorFileName is the file under the data directory where the segment
// engine keeps each tag's floor and the store's incarnation
// (segment.FloorFile).
const FloorFileName = "segment-floors.json"

// Lock holds exclusive advisory locks (flock) on the data directory
// itself and, for the embedded nats-server, on its JetStream store
// directory. Two nodes on one store would run two nats-servers on one
// JetStream directory, each compare-and-swap seeing only its own server's
// memory: the second must refuse at once. The locks are on the directories'
// inodes, so removing a file cannot free them and a store reached through a
// symlink (a data dir copied with its jetstream link) is the same lock. The
// kernel drops them when the process dies, so a kill -9 leaves no stale
// lock; leafd.lock only names the holder (pid, name, start time).
type Lock struct {
	dir  string
	dirs []*os.File // dirs[0]: dir's own lock
	info *os.File
}

// Acquire creates dir (and store, if not empty) as needed and locks them,
// or fails with an error wrapping ErrInUse that names the holder. name is
// the node's, written to leafd.lock.
func Acquire(dir, store, name string) (*Lock, error) {
	l := &Lock{dir: dir}
	for _, d := range []string{dir, store} {
		if d == "" {
			continue
		}
		if err := l.lock(dir, d); err != nil {
			_ = l.Close()
			return nil, err
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	l.info = f
	host, _ := os.Hostname()
	info := fmt.Sprintf("pid %d (leafd %q on %s, started %s)\n", os.Getpid(), name, host, time.Now().UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(info), 0)
	}
	return l, nil
}

// lock takes the flock of directory d (dir's own, or its store).
func (l *Lock) lock(dir, d string) error {
	if err := os.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("data directory %s: %w", d, err)
	}
	f, err := os.Open(d) // follows symlinks: the lock is the target's
	if err != nil {
		return fmt.Errorf("data directory %s: %w", d, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("data directory %s: lock: %w", d, err)
		}
		return fmt.Errorf("%w: %s is held by %s; give each leafd its own --data", ErrInUse, d, holder(dir, d))
	}
	l.dirs = append(l.dirs, f)
	return nil
}

// holder names the process that holds d, from the leafd.lock file of the
// data directory d belongs to (for a store reached through a symlink, the
// directory above its target).
func holder(dir, d string) string {
	candidates := []string{filepath.Join(dir, lockFileName)}
	if real, err := filepath.EvalSymlinks(d); err == nil {
		candidates = append([]string{filepath.Join(filepath.Dir(real), lockFileName)}, candidates...)
	}
	for _, c := range candidates {
		if b, err := os.ReadFile(c); err == nil && strings.TrimSpace(string(b)) != "" {
			return strings.TrimSpace(string(b))
		}
	}
	return "another process"
}

// Close releases the locks; a nil Lock has none. The files stay: removing
// leafd.lock would only lose the holder's name.
func (l *Lock) Close() error {
	if l == nil {
		return nil
	}
	var errs []error
	if l.info != nil {
		_ = l.info.Truncate(0)
		errs = append(errs, l.info.Close())
		l.info = nil
	}
	for _, f := range l.dirs {
		errs = append(errs, f.Close()) // closing the descriptor releases its flock
	}
	l.dirs = nil
	return errors.Join(errs...)
}

// instanceFileName is the file under the data directory that names the
// process that runs on it: its instance (its key in wire.MembersBucket)
// and where it ran (instanceRecord).
const instanceFileName = "instance.json"

// instanceRecord places an instance: the host's boot (Linux's boot_id,
// new at every boot and on every host, shared by the containers of one
// kernel) and the data directory's device and inode (another directory,
// a copy among them, has others).
type instanceRecord struct {
	Instance string `json:"instance"`
	Boot     string `json:"boot"`
	Dev      uint64 `json:"dev"`
	Ino      uint64 `json:"ino"`
}

// bootID reads the kernel's boot id; "" where there is none.
var bootID = func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// TakeOver records instance as the one running on the locked data
// directory and returns the instance that ran on it before, if that one is
// known to be dead: it ran in this very directory (same device and inode)
// during this boot of this kernel, and this process holds the directory's
// flock, which the kernel frees only when its holder exits. Its members
// key may then go at once instead of lapsing. A record from elsewhere (a
// data directory copied to another host, or beside another live node on
// this one, or an earlier boot) gives "": that instance may be alive. A
// nil Lock (a node running without one) gives "" and records nothing.
func (l *Lock) TakeOver(instance string) string {
	if l == nil || len(l.dirs) == 0 {
		return ""
	}
	here, ok := l.place()
	if !ok {
		return ""
	}
	path := filepath.Join(l.dir, instanceFileName)
	var prev instanceRecord
	if b, err := os.ReadFile(path); err != nil || json.Unmarshal(b, &prev) != nil ||
		prev.Boot != here.Boot || prev.Dev != here.Dev || prev.Ino != here.Ino || prev.Instance == instance {
		prev.Instance = ""
	}
	here.Instance = instance
	b, _ := json.Marshal(here)
	_ = fsutil.WriteFile(path, b) // not written: the next start waits this instance's key out
	return prev.Instance
}

// place is where the locked data directory is: this boot, its device and
// inode; ok is false where the boot cannot be told.
func (l *Lock) place() (instanceRecord, bool) {
	boot := bootID()
	if boot == "" {
		return instanceRecord{}, false
	}
	fi, err := l.dirs[0].Stat()
	if err != nil {
		return instanceRecord{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return instanceRecord{}, false
	}
	return instanceRecord{Boot: boot, Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, true // Dev and Ino are not uint64 on every platform
}
