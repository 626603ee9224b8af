package snowflake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/leafmq/leafmq/internal/fsutil"
)

// LeaseFile wraps a Registry whose leases do not survive a restart (Static)
// so they do: every Lease is first written to a local file (written to a
// temporary file, synced, renamed), and Register reports the later of the
// file's lease and the registry's. The file belongs to one worker id: a
// Register that gets another id ignores it (and the next Lease replaces it).
type LeaseFile struct {
	Registry
	pathFor func(worker int64) string
	path    string // the registration's file, set by Register
	mu      sync.Mutex
	w       int64     // worker of the registration, -1 before
	last    time.Time // lease in the file
}

type leaseFileData struct {
	Worker int64     `json:"worker"`
	Lease  time.Time `json:"lease"`
}

// NewLeaseFile wraps reg with the lease file at path.
func NewLeaseFile(reg Registry, path string) *LeaseFile {
	return &LeaseFile{Registry: reg, pathFor: func(int64) string { return path }, w: -1}
}

// NewLeaseFiles wraps reg with one lease file per worker id, in dir, named
// prefix-<worker>.json: for a registry that hands out changing worker ids
// (KV, WORKER_NODE). The registry keeps the leases too; the files are this
// host's own memory of them, so a restart on this data directory never
// starts a worker id below a lease it had, even after an operator wiped
// the registry.
func NewLeaseFiles(reg Registry, dir, prefix string) *LeaseFile {
	return &LeaseFile{Registry: reg, pathFor: func(w int64) string {
		return filepath.Join(dir, fmt.Sprintf("%s-%d.json", prefix, w))
	}, w: -1}
}

// ClaimTTL implements ClaimTTLer with the wrapped registry's bound (0, no
// bound, if it has none).
func (f *LeaseFile) ClaimTTL() time.Duration {
	if t, ok := f.Registry.(ClaimTTLer); ok {
		return t.ClaimTTL()
	}
	return 0
}

// Register implements Registry.
func (f *LeaseFile) Register(ctx context.Context) (Registration, error) {
	r, err := f.Registry.Register(ctx)
	if err != nil {
		return r, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.w, f.last, f.path = r.Worker, time.Time{}, f.pathFor(r.Worker)
	b, err := os.ReadFile(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return r, nil
	case err != nil:
		return Registration{}, fmt.Errorf("snowflake: lease file: %w", err)
	}
	var d leaseFileData
	if err := json.Unmarshal(b, &d); err != nil {
		return Registration{}, fmt.Errorf("snowflake: lease file %s is corrupt (remove it only if the clock is known to be past every id issued): %w", f.path, err)
	}
	if d.Worker == r.Worker {
		f.last = d.Lease
		if d.Lease.After(r.LastLease) {
			r.LastLease = d.Lease
		}
	}
	return r, nil
}

// Lease implements Registry: the file first, then the registry.
func (f *LeaseFile) Lease(ctx context.Context, until time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.w < 0 {
		return ErrNotRegistered
	}
	if until.After(f.last) {
		b, _ := json.Marshal(leaseFileData{Worker: f.w, Lease: until.UTC()})
		if err := fsutil.WriteFile(f.path, b); err != nil {
			return fmt.Errorf("%w: lease file: %w", ErrRegistryUnavailable, err)
		}
		f.last = until
	}
	return f.Registry.Lease(ctx, until)
}

// ReadLeaseFiles reads the lease files NewLeaseFiles keeps in dir under
// prefix: each worker id this host held, with the last lease it recorded.
// A node reports them as its past worker ids after a restart, when its
// memory of them is gone but ids of them made ahead of the clock may still
// lie in the future. Files it cannot read are skipped.
func ReadLeaseFiles(dir, prefix string) map[int64]time.Time {
	paths, _ := filepath.Glob(filepath.Join(dir, prefix+"-*.json"))
	out := map[int64]time.Time{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var d leaseFileData
		if json.Unmarshal(b, &d) != nil || d.Worker < 0 || filepath.Base(p) != fmt.Sprintf("%s-%d.json", prefix, d.Worker) {
			continue
		}
		if d.Lease.After(out[d.Worker]) {
			out[d.Worker] = d.Lease
		}
	}
	return out
}
