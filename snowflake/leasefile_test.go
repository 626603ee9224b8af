package snowflake_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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
	if err := json.Unmarshal(b, &d); err != nil || d.Worker != 7 || !d.Lease.Equal(until) {
		t.Fatalf("file %s = %+v (%v), want worker 7 lease %v", b, d, err, until)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v (%v), want only the lease file", entries, err)
	}

	// Restarted: a new Static knows nothing, the file does.
	lf = newLeaseFile(t, 7, path)
	if reg := register(t, lf); !reg.LastLease.Equal(until) {
		t.Fatalf("Register after restart: LastLease %v, want %v", reg.LastLease, until)
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
	leaseTo(t, lf, t0.Add(time.Minute))
	if reg := register(t, newLeaseFile(t, 4, path)); !reg.LastLease.Equal(t0.Add(time.Minute)) {
		t.Errorf("worker 4 restarted: LastLease %v, want %v", reg.LastLease, t0.Add(time.Minute))
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
