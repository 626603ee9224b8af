package snowflake_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/snowflake"
)

func TestRegionLayoutParse(t *testing.T) {
	dc := snowflake.LeafDCLayout()
	for _, spec := range []string{"leaf-dc", "41+5+5+12"} {
		l, err := snowflake.ParseLayout(spec, "", "")
		if err != nil {
			t.Fatalf("ParseLayout(%q): %v", spec, err)
		}
		if !sameLayout(l, dc) || l.RegionBits != 5 || l.WorkerBits != 10 {
			t.Fatalf("ParseLayout(%q) = %+v, want %+v", spec, l, dc)
		}
		if l.MaxWorker() != 31 || l.MaxRegion() != 31 || l.MaxWorkerField() != 1023 {
			t.Errorf("%q: MaxWorker, MaxRegion, MaxWorkerField = %d, %d, %d, want 31, 31, 1023",
				spec, l.MaxWorker(), l.MaxRegion(), l.MaxWorkerField())
		}
		if got, want := l.String(), "1+41+5+5+12 1ms since 2010-11-04T01:42:54.657Z"; got != want {
			t.Errorf("%q: String = %q, want %q", spec, got, want)
		}
	}
	// Print and parse again: the bits of String are a 4-part spec.
	for _, spec := range []string{"41+3+7+12", "39+1+9+14", "28+4+18+13"} {
		l, err := snowflake.ParseLayout(spec, "", "")
		if err != nil {
			t.Fatalf("ParseLayout(%q): %v", spec, err)
		}
		bits, _, _ := strings.Cut(l.String(), " ")
		if bits != "1+"+spec {
			t.Fatalf("String of %q = %q", spec, l.String())
		}
		again, err := snowflake.ParseLayout(strings.TrimPrefix(bits, "1+"), "", "")
		if err != nil || !sameLayout(again, l) {
			t.Fatalf("ParseLayout(String bits of %q) = %+v, %v, want %+v", spec, again, err, l)
		}
	}
	// Without region bits the form is the 3-part one, as before.
	if got := snowflake.LeafLayout().String(); !strings.HasPrefix(got, "1+41+10+12 ") {
		t.Errorf("LeafLayout String = %q", got)
	}
	for _, spec := range []string{"41+0+10+12", "41+10+0+12", "41+5+5+11", "41+5+5+12+1"} {
		if _, err := snowflake.ParseLayout(spec, "", ""); !errors.Is(err, snowflake.ErrInvalidLayout) {
			t.Errorf("ParseLayout(%q) = %v, want ErrInvalidLayout", spec, err)
		}
	}
	bad := snowflake.LeafLayout()
	bad.RegionBits = 10 // no bit left for the worker
	if err := bad.Validate(); !errors.Is(err, snowflake.ErrInvalidLayout) {
		t.Errorf("10 region bits of 10 worker bits: %v, want ErrInvalidLayout", err)
	}
	bad.RegionBits = -1
	if err := bad.Validate(); !errors.Is(err, snowflake.ErrInvalidLayout) {
		t.Errorf("-1 region bits: %v, want ErrInvalidLayout", err)
	}
}

func TestForRegions(t *testing.T) {
	leaf := snowflake.LeafLayout()
	for _, tc := range []struct {
		n, bits int
		prefix  string
	}{
		{1, 0, "1+41+10+12 "},
		{2, 1, "1+41+1+9+12 "},
		{3, 2, "1+41+2+8+12 "},
		{4, 2, "1+41+2+8+12 "},
		{5, 3, "1+41+3+7+12 "},
		{512, 9, "1+41+9+1+12 "},
	} {
		l, err := leaf.ForRegions(tc.n)
		if err != nil {
			t.Fatalf("leaf ForRegions(%d): %v", tc.n, err)
		}
		if l.RegionBits != tc.bits || !strings.HasPrefix(l.String(), tc.prefix) {
			t.Errorf("leaf ForRegions(%d) = %d region bits, %q; want %d, %q", tc.n, l.RegionBits, l, tc.bits, tc.prefix)
		}
		if l.MaxRegion()+1 < int64(tc.n) {
			t.Errorf("leaf ForRegions(%d): MaxRegion %d", tc.n, l.MaxRegion())
		}
	}
	if _, err := leaf.ForRegions(1024); !errors.Is(err, snowflake.ErrInvalidLayout) || !strings.Contains(err.Error(), "1024 regions") {
		t.Errorf("leaf ForRegions(1024) = %v, want ErrInvalidLayout naming the 1024 regions", err)
	}
	if _, err := leaf.ForRegions(0); !errors.Is(err, snowflake.ErrInvalidLayout) {
		t.Errorf("ForRegions(0) = %v, want ErrInvalidLayout", err)
	}
	dc := snowflake.LeafDCLayout()
	if l, err := dc.ForRegions(32); err != nil || l.RegionBits != 5 {
		t.Errorf("leaf-dc ForRegions(32) = %+v, %v, want its own 5 region bits", l, err)
	}
	if l, err := dc.ForRegions(3); err != nil || l.RegionBits != 5 {
		t.Errorf("leaf-dc ForRegions(3) = %+v, %v, want its own 5 region bits", l, err)
	}
	if _, err := dc.ForRegions(33); !errors.Is(err, snowflake.ErrInvalidLayout) || !strings.Contains(err.Error(), "room for 32 regions") {
		t.Errorf("leaf-dc ForRegions(33) = %v, want ErrInvalidLayout: room for 32 regions", err)
	}
}

func TestRegionDecode(t *testing.T) {
	l := snowflake.LeafDCLayout()
	field, err := l.WorkerField(3, 17)
	if err != nil || field != 3<<5|17 {
		t.Fatalf("WorkerField(3, 17) = %d, %v, want %d", field, err, 3<<5|17)
	}
	if r, w := l.SplitWorkerField(field); r != 3 || w != 17 {
		t.Errorf("SplitWorkerField(%d) = %d, %d, want 3, 17", field, r, w)
	}
	when := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	id, err := l.Compose(when, field, 42)
	if err != nil {
		t.Fatal(err)
	}
	// Leaf's /decodeSnowflakeId sees the whole field as its workerId.
	if w := (id >> 12) & 1023; w != field {
		t.Errorf("Leaf workerId = %d, want %d", w, field)
	}
	want := snowflake.ID{Time: when, Timestamp: when.UnixMilli(), Worker: field, Region: 3, LocalWorker: 17, Sequence: 42}
	if got := l.Decompose(id); got != want {
		t.Errorf("Decompose = %+v, want %+v", got, want)
	}
	d := snowflake.DecodeReply(l, id)
	if d.Worker != field || d.Region == nil || *d.Region != 3 || d.RegionWorker == nil || *d.RegionWorker != 17 ||
		d.Layout != l.String() {
		t.Errorf("DecodeReply = %+v, want worker %d, region 3, worker 17 in the region", d, field)
	}
	if d := snowflake.DecodeReply(snowflake.LeafLayout(), id); d.Region != nil || d.RegionWorker != nil {
		t.Errorf("DecodeReply without region bits has region %v, worker %v", d.Region, d.RegionWorker)
	}
	for _, c := range [][2]int64{{32, 0}, {-1, 0}, {0, 32}, {0, -1}} {
		if _, err := l.WorkerField(c[0], c[1]); !errors.Is(err, snowflake.ErrOutOfRange) {
			t.Errorf("WorkerField(%d, %d) = %v, want ErrOutOfRange", c[0], c[1], err)
		}
	}
	// Without region bits the field is the worker, in region 0 only.
	if f, err := snowflake.LeafLayout().WorkerField(0, 1023); err != nil || f != 1023 {
		t.Errorf("leaf WorkerField(0, 1023) = %d, %v", f, err)
	}
	if _, err := snowflake.LeafLayout().WorkerField(1, 0); !errors.Is(err, snowflake.ErrOutOfRange) {
		t.Errorf("leaf WorkerField(1, 0) = %v, want ErrOutOfRange", err)
	}
}

// TestGeneratorRegions: two generators of one local worker in two regions,
// on one clock, never make the same id, and their ids decode to their
// region and worker.
func TestGeneratorRegions(t *testing.T) {
	l := snowflake.LeafDCLayout()
	clk := &fakeClock{t: t0}
	gen := func(region int64) *snowflake.Generator {
		g, err := snowflake.New(snowflake.Config{Layout: l, Worker: 3, Region: region, Clock: clk.Clock(), Sleep: clk.Sleep})
		if err != nil {
			t.Fatalf("New(region %d): %v", region, err)
		}
		if g.Worker() != 3 || g.Region() != region || g.WorkerField() != region<<5|3 {
			t.Fatalf("generator of region %d: Worker, Region, WorkerField = %d, %d, %d", region, g.Worker(), g.Region(), g.WorkerField())
		}
		return g
	}
	a, b := gen(1), gen(2)
	seen := map[int64]int64{}
	for range 5 {
		for _, g := range []*snowflake.Generator{a, b} {
			ids := make([]int64, 3000)
			if _, err := g.NextN(context.Background(), ids); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				if r, dup := seen[id]; dup {
					t.Fatalf("id %d made in regions %d and %d", id, r, g.Region())
				}
				seen[id] = g.Region()
				if d := l.Decompose(id); d.Region != g.Region() || d.LocalWorker != 3 || d.Worker != g.WorkerField() {
					t.Fatalf("id %d of region %d decodes to %+v", id, g.Region(), d)
				}
			}
		}
		clk.Set(clk.Now().Add(time.Millisecond))
	}
	// Borrowed ids carry the field too.
	ids := make([]int64, 10)
	if n, err := b.Borrow(context.Background(), ids, clk.Now().Add(time.Second)); err != nil || n != 10 {
		t.Fatalf("Borrow = %d, %v", n, err)
	}
	if d := l.Decompose(ids[0]); d.Region != 2 || d.LocalWorker != 3 {
		t.Errorf("borrowed id decodes to %+v", d)
	}
	for _, cfg := range []snowflake.Config{
		{Layout: l, Region: 32},
		{Layout: l, Region: -1},
		{Layout: l, Worker: 32},
		{Layout: snowflake.LeafLayout(), Region: 1},
	} {
		if _, err := snowflake.New(cfg); !errors.Is(err, snowflake.ErrInvalidConfig) {
			t.Errorf("New(region %d, worker %d, %v) = %v, want ErrInvalidConfig", cfg.Region, cfg.Worker, cfg.Layout, err)
		}
	}
}

// TestSourceRegion: a Source's worker id is its ids' worker field, region
// and registry worker together; the live processes are asked about that.
func TestSourceRegion(t *testing.T) {
	l := snowflake.LeafDCLayout()
	var mu sync.Mutex
	var asked []int64
	src, err := snowflake.StartSource(context.Background(), snowflake.SourceConfig{
		Open: func(context.Context) (snowflake.Registry, error) {
			return snowflake.NewStatic(l, 3)
		},
		Layout: l,
		Region: 2,
		Logger: discard,
		Holder: func(_ context.Context, w int64) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, w)
			return "", nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close() }()
	want := int64(2<<5 | 3)
	mu.Lock()
	if len(asked) != 1 || asked[0] != want {
		t.Errorf("Holder asked about %v, want [%d]", asked, want)
	}
	mu.Unlock()
	if src.Worker() != want {
		t.Errorf("Worker = %d, want %d", src.Worker(), want)
	}
	ids := make([]int64, 5)
	n, err := src.Fill(context.Background(), ids)
	if err != nil || n == 0 {
		t.Fatalf("Fill = %d, %v", n, err)
	}
	if d := l.Decompose(ids[0]); d.Region != 2 || d.LocalWorker != 3 {
		t.Errorf("id decodes to %+v, want region 2 worker 3", d)
	}
	if w, ok := src.Holds(); !ok || w != want {
		t.Errorf("Holds = %d, %v, want %d", w, ok, want)
	}
	if _, err := snowflake.StartSource(context.Background(), snowflake.SourceConfig{
		Open:   func(context.Context) (snowflake.Registry, error) { return snowflake.NewStatic(l, 3) },
		Layout: l, Region: 32, Logger: discard,
	}); !errors.Is(err, snowflake.ErrInvalidConfig) {
		t.Errorf("StartSource in region 32 of %v: %v, want ErrInvalidConfig", l, err)
	}
}

// TestSourceRegionStopRecord: a graceful stop in a region other than 0
// records the stop in the lease file of the registry's worker (the worker
// within the region), so that a restart waits only past the time used,
// not the whole lease: the claim's worker field (region bits included)
// is not the registry's worker.
func TestSourceRegionStopRecord(t *testing.T) {
	l := snowflake.LeafDCLayout()
	dir := t.TempDir()
	src, err := snowflake.StartSource(context.Background(), snowflake.SourceConfig{
		Open: func(context.Context) (snowflake.Registry, error) {
			st, err := snowflake.NewStatic(l, 3)
			if err != nil {
				return nil, err
			}
			return snowflake.NewLeaseFiles(st, dir, "static"), nil
		},
		Layout: l,
		Region: 2,
		Logger: discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 5)
	if n, err := src.Fill(context.Background(), ids); err != nil || n == 0 {
		t.Fatalf("Fill = %d, %v", n, err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if got := snowflake.StoppedWorkers(dir, "static"); !slices.Equal(got, []int64{3}) {
		t.Errorf("StoppedWorkers after a graceful stop in region 2 = %v, want [3]", got)
	}
}
