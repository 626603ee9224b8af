package snowflake_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snowflake/registrytest"
)

// newLeaseFile is a LeaseFile at path over a new Static of worker.
func newLeaseFile(tb testing.TB, worker int64, path string) *snowflake.LeaseFile {
	tb.Helper()
	st, err := snowflake.NewStatic(smallLayout, worker)
	if err != nil {
		tb.Fatal(err)
	}
	return snowflake.NewLeaseFile(st, path)
}

func register(tb testing.TB, r snowflake.Registry) snowflake.Registration {
	tb.Helper()
	reg, err := r.Register(context.Background())
	if err != nil {
		tb.Fatalf("Register: %v", err)
	}
	return reg
}

func leaseTo(tb testing.TB, r snowflake.Registry, until time.Time) {
	tb.Helper()
	if err := r.Lease(context.Background(), until); err != nil {
		tb.Fatalf("Lease(%v): %v", until, err)
	}
}

// TestLeaseFileConformance: a Static with a lease file is durable.
func TestLeaseFileConformance(t *testing.T) {
	dir := t.TempDir()
	registrytest.Run(t, registrytest.Factory{
		New: func(t testing.TB) snowflake.Registry {
			// One file per subtest, shared by its registries.
			return newLeaseFile(t, 7, filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".json"))
		},
		Layout:  smallLayout,
		Durable: true,
	})
}

func TestLeaseFileSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deep", "er", "static-7.json") // directories made
	lf := newLeaseFile(t, 7, path)
	if reg := register(t, lf); reg.Worker != 7 || !reg.LastLease.IsZero() {
		t.Fatalf("first Register = %+v, want worker 7 without a lease", reg)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file made before any lease: %v", err)
	}
	until := t0.Add(time.Hour)
	// The file, and the registry, get whole milliseconds, rounded up (t0
	// is not one).
	kept := until.Truncate(time.Millisecond).Add(time.Millisecond)
	leaseTo(t, lf, until)
	leaseTo(t, lf, until.Add(-time.Minute)) // never backwards
	if err := lf.Close(); err != nil {
		t.Fatal(err)
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Worker int64     `json:"worker"`
		Lease  time.Time `json:"lease"`
	}
	if err := json.Unmarshal(b, &d); err != nil || d.Worker != 7 || !d.Lease.Equal(kept) {
		t.Fatalf("file %s = %+v (%v), want worker 7 lease %v", b, d, err, kept)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v (%v), want only the lease file", entries, err)
	}

	// Restarted: a new Static knows nothing, the file does.
	lf = newLeaseFile(t, 7, path)
	if reg := register(t, lf); !reg.LastLease.Equal(kept) {
		t.Fatalf("Register after restart: LastLease %v, want %v", reg.LastLease, kept)
	}
	// A registry that knows a later lease wins over the file.
	st, _ := snowflake.NewStatic(smallLayout, 7)
	later := until.Add(time.Hour)
	register(t, st)
	leaseTo(t, st, later)
	lf = snowflake.NewLeaseFile(st, path)
	if reg := register(t, lf); !reg.LastLease.Equal(later) {
		t.Errorf("Register with the registry ahead of the file: LastLease %v, want %v", reg.LastLease, later)
	}
}

// TestLeaseFileOtherWorker: a file of another worker id is ignored, then
// replaced.
func TestLeaseFileOtherWorker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	lf := newLeaseFile(t, 3, path)
	register(t, lf)
	leaseTo(t, lf, t0.Add(time.Hour))

	lf = newLeaseFile(t, 4, path)
	if reg := register(t, lf); reg.Worker != 4 || !reg.LastLease.IsZero() {
		t.Fatalf("Register of worker 4 over worker 3's file = %+v, want no lease", reg)
	}
	minute := t0.Add(time.Minute).Truncate(time.Millisecond) // a whole ms: kept as it is
	leaseTo(t, lf, minute)
	if reg := register(t, newLeaseFile(t, 4, path)); !reg.LastLease.Equal(minute) {
		t.Errorf("worker 4 restarted: LastLease %v, want %v", reg.LastLease, minute)
	}
	if reg := register(t, newLeaseFile(t, 3, path)); !reg.LastLease.IsZero() {
		t.Errorf("worker 3 after worker 4's lease: LastLease %v, want none", reg.LastLease)
	}
}

func TestLeaseFileErrors(t *testing.T) {
	t.Run("lease before register", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "lease.json")
		lf := newLeaseFile(t, 7, path)
		if err := lf.Lease(context.Background(), t0); !errors.Is(err, snowflake.ErrNotRegistered) {
			t.Errorf("Lease before Register = %v, want ErrNotRegistered", err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("file written by a refused Lease: %v", err)
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "lease.json")
		if err := os.WriteFile(path, []byte("{\"worker\": 7, \"lea"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := newLeaseFile(t, 7, path).Register(context.Background())
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("Register with a corrupt file = %v, want an error naming it", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "{\"worker\": 7, \"lea" {
			t.Errorf("corrupt file changed to %q", b)
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		path := t.TempDir() // a directory
		if _, err := newLeaseFile(t, 7, path).Register(context.Background()); err == nil {
			t.Fatal("Register with a directory for a file: no error")
		}
	})
	t.Run("unwritable", func(t *testing.T) {
		dir := t.TempDir()
		sub := filepath.Join(dir, "sub")
		st, _ := snowflake.NewStatic(smallLayout, 7)
		lf := snowflake.NewLeaseFile(st, filepath.Join(sub, "lease.json"))
		register(t, lf)
		// Its directory cannot be made any more.
		if err := os.WriteFile(sub, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := lf.Lease(context.Background(), t0.Add(time.Hour)); !errors.Is(err, snowflake.ErrRegistryUnavailable) {
			t.Fatalf("Lease with an unwritable file = %v, want ErrRegistryUnavailable", err)
		}
		// Not recorded anywhere: the registry did not get it either.
		st2 := snowflake.NewLeaseFile(st, filepath.Join(dir, "other.json"))
		if reg := register(t, st2); !reg.LastLease.IsZero() {
			t.Errorf("registry has lease %v from a Lease whose file write failed", reg.LastLease)
		}
	})
	t.Run("registry error", func(t *testing.T) {
		lf := newLeaseFile(t, 7, filepath.Join(t.TempDir(), "lease.json"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := lf.Register(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Register with a canceled context = %v", err)
		}
	})
}

// TestLeaseFileSourceRestart: a Source on a Static with a lease file,
// restarted with the clock behind its last lease, waits and never issues
// an id twice.
func TestLeaseFileSourceRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "static-7.json")
	open := func(context.Context) (snowflake.Registry, error) {
		st, err := snowflake.NewStatic(smallLayout, 7)
		if err != nil {
			return nil, err
		}
		return snowflake.NewLeaseFile(st, path), nil
	}
	clock := &fakeClock{t: t0}
	seen := newIssued(t)
	src, _, _ := startSource(t, nil, clock, func(c *snowflake.SourceConfig) {
		c.Open = open
		c.BorrowAhead = testLeaseAhead / 2
	})
	first := fill(t, src, 1000)
	seen.add("first", first...)
	checkIDs(t, first, 7, t0, t0.Add(testLeaseAhead))
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}

	clock.Set(t0) // restarted at once: the clock is behind the lease
	src, _, _ = startSource(t, nil, clock, func(c *snowflake.SourceConfig) { c.Open = open })
	if st := src.State(); st != snowflake.StateWaiting {
		t.Fatalf("State after restart = %v, want waiting", st)
	}
	if n, err := src.Fill(context.Background(), make([]int64, 4)); !errors.Is(err, snowflake.ErrNotServing) || n != 0 {
		t.Fatalf("Fill while waiting = %d, %v, want ErrNotServing", n, err)
	}
	until := t0.Add(testLeaseAhead).Truncate(time.Millisecond).Add(time.Millisecond)
	clock.Set(until)
	waitState(t, src, snowflake.StateServing)
	var ids []int64
	waitFor(t, "ids", func() bool {
		dst := make([]int64, 100)
		n, err := src.Fill(context.Background(), dst)
		if err != nil && !errors.Is(err, snowflake.ErrLeaseFailed) { // see TestSourceResumeLeasesFirst
			t.Fatalf("Fill: %v", err)
		}
		ids = dst[:n]
		return n > 0
	})
	seen.add("restarted", ids...)
	checkIDs(t, ids, 7, until, until.Add(testLeaseAhead))

	// Far behind: the start fails.
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	clock.Set(t0.Add(-time.Hour))
	cfg := sourceConfig(nil, clock, &eventLog{})
	cfg.Open = open
	if _, err := snowflake.StartSource(context.Background(), cfg); !errors.Is(err, snowflake.ErrClockBackwards) {
		t.Fatalf("StartSource an hour behind the lease file = %v, want ErrClockBackwards", err)
	}
}

// ttlStatic is a Static with a claim TTL, standing in for a registry with
// a fence (KV, ZooKeeper, WORKER_NODE).
type ttlStatic struct{ *snowflake.Static }

func (ttlStatic) ClaimTTL() time.Duration { return 7 * time.Second }

// NewLeaseFiles keeps one file per worker id: a registry that forgot a
// worker's lease (an operator wiped it) still reports, on this data
// directory, the lease this host had; another worker id starts from its
// own file. The wrapper passes the registry's ClaimTTL on.
func TestLeaseFilesPerWorker(t *testing.T) {
	dir := t.TempDir()
	wrap := func(worker int64) *snowflake.LeaseFile {
		st, err := snowflake.NewStatic(smallLayout, worker)
		if err != nil {
			t.Fatal(err)
		}
		return snowflake.NewLeaseFiles(ttlStatic{st}, dir, "kv")
	}
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	lf := wrap(3)
	register(t, lf)
	leaseTo(t, lf, until)
	if got := lf.ClaimTTL(); got != 7*time.Second {
		t.Errorf("ClaimTTL through the wrapper = %v, want 7s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "kv-3.json")); err != nil {
		t.Fatal(err)
	}
	// A new registry with no memory of worker 3 (a wiped registry).
	if got := register(t, wrap(3)); got.LastLease.Before(until) {
		t.Fatalf("worker 3 again: LastLease %v, want >= %v", got.LastLease, until)
	}
	if got := register(t, wrap(4)); !got.LastLease.IsZero() {
		t.Fatalf("worker 4: LastLease %v, want none", got.LastLease)
	}
}

// TestReadLeaseFiles: the worker ids and last leases of a directory's
// lease files; a corrupt file, or one whose name is not its worker's, is
// skipped.
func TestReadLeaseFiles(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kv-3.json", `{"worker":3,"lease":"`+at.Format(time.RFC3339Nano)+`"}`)
	write("kv-4.json", `{"worker":5,"lease":"`+at.Format(time.RFC3339Nano)+`"}`)
	write("kv-6.json", `{"worker":`)
	write("mysql-7.json", `{"worker":7,"lease":"`+at.Format(time.RFC3339Nano)+`"}`)
	got := snowflake.ReadLeaseFiles(dir, "kv")
	if len(got) != 1 || !got[3].Equal(at) {
		t.Fatalf("ReadLeaseFiles = %v, want worker 3 at %v only", got, at)
	}
}

// TestLeaseFilesGracefulRestart: a Source stopped gracefully (Close) and
// started again on the same lease files, with the clock still well behind
// its time lease, serves at once: it waits only past the last time it
// used. After a crash (the file as it was before Close: no stop record)
// the restart waits out the whole lease. No id repeats.
func TestLeaseFilesGracefulRestart(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(5)
	b.ttl = 7 * time.Second
	b.leasedBefore()
	open := func(ctx context.Context) (snowflake.Registry, error) {
		r, err := b.Open(ctx)
		if err != nil {
			return nil, err
		}
		return snowflake.NewLeaseFiles(r, dir, "kv"), nil
	}
	clock := &fakeClock{t: t0}
	seen := newIssued(t)
	start := func() *snowflake.Source {
		t.Helper()
		src, _, _ := startSource(t, b, clock, func(c *snowflake.SourceConfig) { c.Open = open })
		return src
	}
	src := start()
	waitState(t, src, snowflake.StateServing)
	var last time.Time
	take := func(from string) {
		t.Helper()
		ids := fill(t, src, 10)
		if len(ids) == 0 {
			t.Fatalf("%s: no ids", from)
		}
		seen.add(from, ids...)
		last = smallLayout.Decompose(ids[len(ids)-1]).Time
	}
	take("first")
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	lease := b.lease(5)
	if !lease.After(last.Add(testLeaseAhead / 2)) {
		t.Fatalf("lease %v, last id at %v: the test needs the lease well ahead", lease, last)
	}

	clock.Set(last.Add(2 * time.Millisecond))
	src = start()
	if st := src.State(); st != snowflake.StateServing {
		t.Fatalf("after a graceful stop, at %v (the last id at %v, the lease %v): state %v, want serving",
			clock.Now(), last, lease, st)
	}
	take("after a graceful restart")

	// A crash: the lease file as it was before Close.
	path := filepath.Join(dir, "kv-5.json")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, before, 0o644); err != nil {
		t.Fatal(err)
	}
	lease = b.lease(5)
	clock.Set(last.Add(2 * time.Millisecond))
	src = start()
	if st := src.State(); st != snowflake.StateWaiting {
		t.Fatalf("after a crash: state %v, want waiting (for the lease %v)", st, lease)
	}
	clock.Set(lease.Add(time.Millisecond))
	waitState(t, src, snowflake.StateServing)
	waitFor(t, "ids after the crash", func() bool {
		n, err := src.Fill(context.Background(), make([]int64, 1))
		return err == nil && n > 0
	})
	take("after a crash")
}

// TestLeaseFileStopRecord: the stop record shortens the wait of the next
// Register of its worker id only while nothing can have used the worker
// since the stop, and only once.
func TestLeaseFileStopRecord(t *testing.T) {
	lease := t0.Add(time.Hour).Truncate(time.Millisecond)
	used := t0.Add(time.Minute)
	for _, c := range []struct {
		name string
		// between runs after the graceful stop, on the registry that
		// remembers leases (st) and the lease file's path.
		between func(t *testing.T, st *snowflake.Static, path string)
		static  bool // the registry is a bare Static, which remembers nothing
		wipe    bool // the registry forgot the lease (a ClaimTTLer: KV, WORKER_NODE)
		used    time.Time
		want    time.Time
	}{
		{name: "graceful stop", used: used, want: used},
		{name: "used past the lease", used: lease.Add(time.Second), want: lease},
		{name: "static registry", static: true, used: used, want: used},
		{name: "leased since by another process", used: used, want: lease.Add(time.Minute),
			between: func(t *testing.T, st *snowflake.Static, _ string) { leaseTo(t, st, lease.Add(time.Minute)) }},
		{name: "registry wiped", used: used, want: lease, wipe: true},
		{name: "record edited", used: used, want: lease.Add(time.Second),
			between: func(t *testing.T, _ *snowflake.Static, path string) {
				editLeaseFile(t, path, func(d map[string]any) { d["lease"] = lease.Add(time.Second) })
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kv-7.json")
			st := newStatic(t, 7)
			wrap := func() *snowflake.LeaseFile {
				if c.static {
					return snowflake.NewLeaseFile(newStatic(t, 7), path)
				}
				return snowflake.NewLeaseFile(ttlStatic{st}, path)
			}
			lf := wrap()
			register(t, lf)
			leaseTo(t, lf, lease)
			if err := lf.RecordStop(7, c.used); err != nil {
				t.Fatal(err)
			}
			if got := snowflake.StoppedWorkers(filepath.Dir(path), "kv"); !slices.Equal(got, []int64{7}) {
				t.Errorf("StoppedWorkers = %v, want [7]", got)
			}
			if c.between != nil {
				c.between(t, st, path)
			}
			if c.wipe {
				st = newStatic(t, 7)
			}
			if got := register(t, wrap()).LastLease; !got.Equal(c.want) {
				t.Errorf("Register after the stop: LastLease %v, want %v", got, c.want)
			}
			// Used once: the next start (after a crash of that one) waits
			// out the whole lease.
			if got := snowflake.StoppedWorkers(filepath.Dir(path), "kv"); len(got) != 0 {
				t.Errorf("StoppedWorkers after the Register = %v, want none", got)
			}
			if got := register(t, wrap()).LastLease; got.Before(lease) {
				t.Errorf("Register again: LastLease %v, want at least the lease %v", got, lease)
			}
		})
	}
}

// A stop record is written only for the worker id registered, after a
// lease; a Register of another worker id ignores it.
func TestLeaseFileStopRecordOtherWorker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	lf := newLeaseFile(t, 3, path)
	if err := lf.RecordStop(3, t0); !errors.Is(err, snowflake.ErrNotRegistered) {
		t.Errorf("RecordStop before Register = %v, want ErrNotRegistered", err)
	}
	register(t, lf)
	if err := lf.RecordStop(4, t0); !errors.Is(err, snowflake.ErrNotRegistered) {
		t.Errorf("RecordStop of another worker = %v, want ErrNotRegistered", err)
	}
	if err := lf.RecordStop(3, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stop record before any lease: %v", err)
	}
	leaseTo(t, lf, t0.Add(time.Hour))
	if err := lf.RecordStop(3, t0); err != nil {
		t.Fatal(err)
	}
	if reg := register(t, newLeaseFile(t, 4, path)); !reg.LastLease.IsZero() {
		t.Errorf("worker 4 over worker 3's stop record: LastLease %v, want none", reg.LastLease)
	}
}

func newStatic(tb testing.TB, worker int64) *snowflake.Static {
	tb.Helper()
	st, err := snowflake.NewStatic(smallLayout, worker)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// editLeaseFile rewrites the lease file at path through edit.
func editLeaseFile(tb testing.TB, path string, edit func(map[string]any)) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	d := map[string]any{}
	if err := json.Unmarshal(b, &d); err != nil {
		tb.Fatal(err)
	}
	edit(d)
	if b, err = json.Marshal(d); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// A stop record copied with the data directory is trusted by the first
// process that registers the worker id after the stop, never by a second:
// a process that trusted a record leases past the recorded lease before it
// uses any time, so the registry's lease no longer matches any other copy.
// Without that, the copy's process used time inside the stopped lease
// without raising the registry's lease, and the original, restarted later
// with its clock behind, trusted its own record and used the same times
// again.
func TestLeaseFileStopRecordCopied(t *testing.T) {
	lease := t0.Add(time.Hour).Truncate(time.Millisecond)
	used := t0.Add(time.Minute)
	st := newStatic(t, 7)
	dirA, dirB := t.TempDir(), t.TempDir()
	pathA, pathB := filepath.Join(dirA, "kv-7.json"), filepath.Join(dirB, "kv-7.json")
	a := snowflake.NewLeaseFile(ttlStatic{st}, pathA)
	register(t, a)
	leaseTo(t, a, lease)
	if err := a.RecordStop(7, used); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pathA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pathB, b, 0o644); err != nil {
		t.Fatal(err)
	}
	copied := snowflake.NewLeaseFile(ttlStatic{st}, pathB)
	if got := register(t, copied).LastLease; !got.Equal(used) {
		t.Fatalf("the copy's Register: LastLease %v, want the recorded %v", got, used)
	}
	bLease := used.Add(time.Second) // inside the stopped lease
	leaseTo(t, copied, bLease)
	if got := register(t, snowflake.NewLeaseFile(ttlStatic{st}, pathA)).LastLease; got.Before(bLease) {
		t.Fatalf("the original's Register after the copy used the worker: LastLease %v, below the copy's lease %v", got, bLease)
	}
}
