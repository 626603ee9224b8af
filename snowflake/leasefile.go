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
//
// It keeps a stop record too (StopRecorder): a graceful stop writes the
// last time the worker used beside the lease. The next Register of that
// worker id reports that time instead of the lease when the registry's
// lease is still the file's (a process that used the worker id since
// leased past it: its ids come after the lease it found), and removes the
// record, durably, before it returns: a record is used once.
type LeaseFile struct {
	Registry
	pathFor func(worker int64) string
	path    string // the registration's file, set by Register
	mu      sync.Mutex
	w       int64     // worker of the registration, -1 before
	last    time.Time // lease in the file
	// above is the lease of a stop record this registration trusted: its
	// first Lease goes past it (see Lease), zero once it has.
	above time.Time
}

type leaseFileData struct {
	Worker int64       `json:"worker"`
	Lease  time.Time   `json:"lease"`
	Stop   *stopRecord `json:"stop,omitempty"`
}

// stopRecord is what a graceful stop leaves: the worker used no time after
// Used, and its lease was Lease (the file's then).
type stopRecord struct {
	Used  time.Time `json:"used"`
	Lease time.Time `json:"lease"`
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

// Held implements HeldCounter with the wrapped registry's count; an error
// wrapping errors.ErrUnsupported if it keeps none (Static).
func (f *LeaseFile) Held(ctx context.Context) (int, error) {
	if h, ok := f.Registry.(HeldCounter); ok {
		return h.Held(ctx)
	}
	return 0, fmt.Errorf("%w: the registry does not count its worker ids", errors.ErrUnsupported)
}

// LeaseTime implements LeaseTimer with the wrapped registry's (0 if it
// does not know).
func (f *LeaseFile) LeaseTime() time.Duration {
	if t, ok := f.Registry.(LeaseTimer); ok {
		return t.LeaseTime()
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
	f.w, f.last, f.path, f.above = r.Worker, time.Time{}, f.pathFor(r.Worker), time.Time{}
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
	if d.Worker != r.Worker {
		return r, nil
	}
	f.last = d.Lease
	used, stopped := f.stoppedAt(d, r)
	if d.Lease.After(r.LastLease) {
		r.LastLease = d.Lease
	}
	if d.Stop != nil {
		// Used once, and gone from the disk before anything is served: a
		// later start (after a crash of this one) finds no record.
		b, _ := json.Marshal(leaseFileData{Worker: d.Worker, Lease: d.Lease})
		if err := fsutil.WriteFile(f.path, b); err != nil {
			stopped = false
		}
	}
	if stopped {
		r.LastLease = used
		f.above = d.Lease
	}
	return r, nil
}

// stoppedAt is the time of d's stop record, if it still tells the last
// time the worker used: the record's lease is the file's, and the
// registry's lease is that lease too. A registry lease above it means a
// process leased the worker id after the stop (and may have used time up
// to its lease); one below it, or a registration that reports only this
// process's own record (Partial), means the registry cannot tell. Static
// keeps no lease across a restart: for it the file is the whole record.
// The time is at most the lease: both bound the time used.
func (f *LeaseFile) stoppedAt(d leaseFileData, r Registration) (time.Time, bool) {
	st := d.Stop
	if st == nil || st.Used.IsZero() || !st.Lease.Equal(d.Lease) || r.Partial {
		return time.Time{}, false
	}
	_, static := f.Registry.(*Static)
	if !r.LastLease.Equal(d.Lease) && !(static && r.LastLease.IsZero()) {
		return time.Time{}, false
	}
	if st.Used.After(d.Lease) {
		return d.Lease, true
	}
	return st.Used, true
}

// Lease implements Registry: the file first, then the registry. until is
// rounded up to a whole millisecond, the precision the registries keep
// (KV, WORKER_NODE), so that the registry's lease equals the file's and a
// stop record can tell whether another process leased since.
func (f *LeaseFile) Lease(ctx context.Context, until time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.w < 0 {
		return ErrNotRegistered
	}
	if ms := until.Truncate(time.Millisecond); ms.Before(until) {
		until = ms.Add(time.Millisecond)
	}
	if !f.above.IsZero() && !until.After(f.above) {
		// A trusted stop record is a claim on the registry's lease
		// staying what the record says. Raised past it before this
		// process uses any time, the registry's lease no longer matches
		// another copy of the record (a copied data directory): its
		// process then waits past every lease, this one's included
		// (TestLeaseFileStopRecordCopied).
		until = f.above.Add(time.Millisecond)
	}
	if until.After(f.last) {
		b, _ := json.Marshal(leaseFileData{Worker: f.w, Lease: until.UTC()})
		if err := fsutil.WriteFile(f.path, b); err != nil {
			return fmt.Errorf("%w: lease file: %w", ErrRegistryUnavailable, err)
		}
		f.last = until
	}
	if err := f.Registry.Lease(ctx, until); err != nil {
		return err
	}
	f.above = time.Time{}
	return nil
}

// RecordStop implements StopRecorder: it writes the stop record (used,
// and the file's lease) into the lease file of worker, synced, before it
// returns. Nothing is recorded before the first lease.
func (f *LeaseFile) RecordStop(worker int64, used time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.w < 0 || worker != f.w {
		return fmt.Errorf("%w: stop record of worker %d", ErrNotRegistered, worker)
	}
	if f.last.IsZero() || used.IsZero() {
		return nil
	}
	lease := f.last.UTC()
	b, _ := json.Marshal(leaseFileData{Worker: f.w, Lease: lease, Stop: &stopRecord{Used: used.UTC(), Lease: lease}})
	if err := fsutil.WriteFile(f.path, b); err != nil {
		return fmt.Errorf("snowflake: stop record: %w", err)
	}
	return nil
}

// StoppedWorkers lists the worker ids whose lease files in dir under
// prefix (NewLeaseFiles) hold a stop record: the ids this data directory
// stopped gracefully with, which a registry that picks among free ids
// (KV) offers first, so that a restart gets its own worker id back and
// the shorter wait with it.
func StoppedWorkers(dir, prefix string) []int64 {
	var out []int64
	for _, p := range leaseFilePaths(dir, prefix) {
		if d, ok := readLeaseFile(p, prefix); ok && d.Stop != nil {
			out = append(out, d.Worker)
		}
	}
	return out
}

// leaseFilePaths are the paths of the lease files in dir under prefix.
func leaseFilePaths(dir, prefix string) []string {
	paths, _ := filepath.Glob(filepath.Join(dir, prefix+"-*.json"))
	return paths
}

// readLeaseFile reads the lease file at p, if it is one of prefix's and
// names the worker of its name.
func readLeaseFile(p, prefix string) (leaseFileData, bool) {
	var d leaseFileData
	b, err := os.ReadFile(p)
	if err != nil || json.Unmarshal(b, &d) != nil || d.Worker < 0 || filepath.Base(p) != fmt.Sprintf("%s-%d.json", prefix, d.Worker) {
		return leaseFileData{}, false
	}
	return d, true
}

// ReadLeaseFiles reads the lease files NewLeaseFiles keeps in dir under
// prefix: each worker id this host held, with the last lease it recorded.
// A node reports them as its past worker ids after a restart, when its
// memory of them is gone but ids of them made ahead of the clock may still
// lie in the future. Files it cannot read are skipped.
func ReadLeaseFiles(dir, prefix string) map[int64]time.Time {
	out := map[int64]time.Time{}
	for _, p := range leaseFilePaths(dir, prefix) {
		d, ok := readLeaseFile(p, prefix)
		if !ok {
			continue
		}
		if d.Lease.After(out[d.Worker]) {
			out[d.Worker] = d.Lease
		}
	}
	return out
}

var _ StopRecorder = (*LeaseFile)(nil)
