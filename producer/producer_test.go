package producer_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/leafmq/leafmq/wire"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newEngine(t testing.TB, store *memstore.Store, autoCreate bool) *segment.Engine {
	t.Helper()
	e, err := segment.New(segment.Config{Store: store, AutoCreate: autoCreate, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func newProducer(t testing.TB, cfg producer.Config) *producer.Producer {
	t.Helper()
	cfg.Logger = quiet()
	p, err := producer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestNewValidation(t *testing.T) {
	e := newEngine(t, memstore.New(), false)
	tests := []struct {
		name string
		cfg  producer.Config
	}{
		{"no segments", producer.Config{}},
		{"min above max", producer.Config{Segments: e, MinRing: 1024, MaxRing: 512}},
		{"min too small", producer.Config{Segments: e, MinRing: 1}},
		{"negative grow", producer.Config{Segments: e, GrowAfter: -time.Second}},
		{"padding over 100", producer.Config{Segments: e, PaddingPercent: 101}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if p, err := producer.New(tc.cfg); err == nil {
				_ = p.Close()
				t.Fatal("New accepted a bad config")
			}
		})
	}
}

func TestSegmentFillsAll(t *testing.T) {
	store := memstore.New()
	if err := store.Create(context.Background(), segment.Tag{Name: wire.MustTag("a"), Step: 100}); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, store, false)
	p := newProducer(t, producer.Config{Segments: e, MinRing: 16})
	p.Preload()
	var got []int64
	for _, n := range []int{1, 5, 16, 17, 250, 1000} {
		dst := make([]int64, n)
		if err := p.Segment(context.Background(), wire.MustTag("a"), dst); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		got = append(got, dst...)
	}
	slices.Sort(got)
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("duplicate %d", got[i])
		}
	}
	row, _ := store.Get(context.Background(), wire.MustTag("a"))
	if got[0] < 1 || got[len(got)-1] >= row.MaxID {
		t.Fatalf("ids [%d,%d] outside what the store reserved (max_id %d)", got[0], got[len(got)-1], row.MaxID)
	}
}

func TestUnknownAndAutoCreate(t *testing.T) {
	p := newProducer(t, producer.Config{Segments: newEngine(t, memstore.New(), false)})
	err := p.Segment(context.Background(), wire.MustTag("nope"), make([]int64, 1))
	if !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("unknown tag: %v", err)
	}
	if n := len(p.Rings()); n != 0 {
		t.Fatalf("an unknown tag got a ring (%d rings)", n)
	}
	if err := p.Segment(context.Background(), wire.Tag{}, make([]int64, 1)); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("zero tag: %v", err)
	}

	auto := newProducer(t, producer.Config{Segments: newEngine(t, memstore.New(), true)})
	dst := make([]int64, 3)
	if err := auto.Segment(context.Background(), wire.MustTag("fresh"), dst); err != nil {
		t.Fatal(err)
	}
	if dst[0] != 1 || dst[1] != 2 || dst[2] != 3 {
		t.Fatalf("first ids of a new tag = %v, want [1 2 3] (the probe id must not be skipped)", dst)
	}
}

// A hot tag's ring grows; a cold one stays at MinRing.
func TestRingGrowsWithTraffic(t *testing.T) {
	store := memstore.New()
	for _, tag := range []string{"hot", "cold"} {
		if err := store.Create(context.Background(), segment.Tag{Name: wire.MustTag(tag), Step: 100000}); err != nil {
			t.Fatal(err)
		}
	}
	p := newProducer(t, producer.Config{Segments: newEngine(t, store, false), MinRing: 64, MaxRing: 4096, GrowAfter: time.Second})
	p.Preload()
	dst := make([]int64, 60)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := p.Segment(context.Background(), wire.MustTag("hot"), dst); err != nil {
			t.Fatal(err)
		}
		if ringCap(p, "hot") == 4096 {
			break
		}
	}
	if c := ringCap(p, "hot"); c != 4096 {
		t.Fatalf("hot ring capacity %d, want it grown to 4096", c)
	}
	if c := ringCap(p, "cold"); c != 64 {
		t.Fatalf("cold ring capacity %d, want 64", c)
	}
}

// A ring refilled no sooner than GrowAfter after its last refill keeps its
// size; refilled sooner, it grows. The producer's clock, a fake here, says
// how long it was between refills.
func TestRingGrowsOnlyWhenRefilledSooner(t *testing.T) {
	store := memstore.New()
	if err := store.Create(context.Background(), segment.Tag{Name: wire.MustTag("t"), Step: 100000}); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Now())
	p := newProducer(t, producer.Config{Segments: newEngine(t, store, false), MinRing: 64, MaxRing: 4096,
		GrowAfter: time.Second, Clock: clk})
	p.Preload()
	dst := make([]int64, 60) // below half of the ring: a refill
	take := func() {
		t.Helper()
		if err := p.Segment(context.Background(), wire.MustTag("t"), dst); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, "the ring refilled", 10*time.Second, func() bool {
			for _, r := range p.Rings() {
				if r.Tag == "t" {
					return r.Len == r.Cap || r.Cap != 64 // grown: the test says so below
				}
			}
			return false
		})
	}
	for i := 0; i < 20 && ringCap(p, "t") == 64; i++ {
		take()
		clk.Advance(2 * time.Second)
	}
	if c := ringCap(p, "t"); c != 64 {
		t.Fatalf("ring capacity %d after refills 2s apart, want 64 (GrowAfter 1s)", c)
	}
	for i := 0; i < 20 && ringCap(p, "t") == 64; i++ {
		take() // refills at one instant of the clock
	}
	testenv.Eventually(t, "the ring grown", 10*time.Second, func() bool { return ringCap(p, "t") > 64 })
}

func ringCap(p *producer.Producer, tag string) int {
	for _, r := range p.Rings() {
		if r.Tag == tag {
			return r.Cap
		}
	}
	return 0
}

// Many goroutines, a growing ring, small segments: every id unique.
func TestConcurrentUnique(t *testing.T) {
	store := memstore.New()
	if err := store.Create(context.Background(), segment.Tag{Name: wire.MustTag("c"), Step: 5000}); err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, producer.Config{Segments: newEngine(t, store, false), MinRing: 16, MaxRing: 1024, GrowAfter: time.Second})
	var (
		mu   sync.Mutex
		all  []int64
		wg   sync.WaitGroup
		errs = make(chan error, 8)
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var mine []int64
			for i := 0; i < 400; i++ {
				dst := make([]int64, 1+(i*7+w)%40)
				if err := p.Segment(context.Background(), wire.MustTag("c"), dst); err != nil {
					errs <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
				mine = append(mine, dst...)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("duplicate %d", all[i])
		}
	}
}

// The store going down is invisible while the ring and buffers last, and
// then a clear ErrNotReady, not a hang.
func TestStoreDown(t *testing.T) {
	store := memstore.New()
	if err := store.Create(context.Background(), segment.Tag{Name: wire.MustTag("d"), Step: 1000}); err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, producer.Config{Segments: newEngine(t, store, false), MinRing: 64})
	p.Preload()
	dst := make([]int64, 10)
	if err := p.Segment(context.Background(), wire.MustTag("d"), dst); err != nil {
		t.Fatal(err)
	}
	// The ring refills on a goroutine of its own (no timer); 74 of 1000
	// ids taken do not load a second segment yet.
	testenv.Eventually(t, "the ring refilled", 10*time.Second, func() bool {
		for _, r := range p.Rings() {
			if r.Tag == "d" {
				return r.Len == r.Cap
			}
		}
		return false
	})
	store.SetDown(true)
	if err := p.Segment(context.Background(), wire.MustTag("d"), make([]int64, 500)); err != nil {
		t.Fatalf("store down, buffers full: %v", err)
	}
	start := time.Now()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		err = p.Segment(context.Background(), wire.MustTag("d"), make([]int64, 500))
	}
	if !errors.Is(err, segment.ErrNotReady) {
		t.Fatalf("buffers exhausted: %v, want ErrNotReady", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v to give up", d)
	}
	store.SetDown(false)
	testenv.Eventually(t, "recovery after the store came back", 10*time.Second, func() bool {
		err = p.Segment(context.Background(), wire.MustTag("d"), make([]int64, 5))
		return err == nil
	})
}

func TestCloseStopsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	store := memstore.New()
	for i := 0; i < 20; i++ {
		_ = store.Create(context.Background(), segment.Tag{Name: wire.MustTag(fmt.Sprint("t", i))})
	}
	e, err := segment.New(segment.Config{Store: store, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(producer.Config{Segments: e, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	p.Preload()
	_ = p.Segment(context.Background(), wire.MustTag("t1"), make([]int64, 100))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = p.Close() // idempotent
	_ = e.Close()
	if err := p.Segment(context.Background(), wire.MustTag("t2"), make([]int64, 1)); err == nil {
		// rings drain after Close; t2's may still hold ids, which is fine,
		// but a new tag must be refused
		if err := p.Segment(context.Background(), wire.MustTag("t99"), make([]int64, 1)); err == nil {
			t.Fatal("a closed producer created a ring")
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines left after Close (before: %d)\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func BenchmarkSegment(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch%d", n), func(b *testing.B) {
			store := memstore.New()
			_ = store.Create(context.Background(), segment.Tag{Name: wire.MustTag("b"), Step: 1_000_000})
			p := newProducer(b, producer.Config{Segments: newEngine(b, store, false)})
			p.Preload()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				dst := make([]int64, n)
				for pb.Next() {
					if err := p.Segment(context.Background(), wire.MustTag("b"), dst); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "ids/s")
		})
	}
}

// A tag deleted from the store loses its ring once the engine drops it.
func TestPruneDeletedTag(t *testing.T) {
	store := memstore.New()
	ctx := context.Background()
	for _, tag := range []string{"keep", "gone"} {
		if err := store.Create(ctx, segment.Tag{Name: wire.MustTag(tag), Step: 100}); err != nil {
			t.Fatal(err)
		}
	}
	e := newEngine(t, store, false)
	p := newProducer(t, producer.Config{Segments: e, PruneInterval: time.Hour})
	p.Preload()
	if n := len(p.Rings()); n != 2 {
		t.Fatalf("%d rings, want 2", n)
	}
	if n := p.Prune(); n != 0 {
		t.Fatalf("pruned %d rings of live tags", n)
	}
	if err := store.Delete(ctx, wire.MustTag("gone")); err != nil {
		t.Fatal(err)
	}
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := p.Prune(); n != 1 {
		t.Fatalf("pruned %d rings, want 1", n)
	}
	if rs := p.Rings(); len(rs) != 1 || rs[0].Tag != "keep" {
		t.Fatalf("rings left: %+v", rs)
	}
	if err := p.Segment(ctx, wire.MustTag("gone"), make([]int64, 1)); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("deleted tag: %v, want ErrUnknownTag", err)
	}
}

// slowFill draws ids from the engine and then dawdles before returning
// them: the window in which a ring's refill holds ids it has not put yet.
type slowFill struct {
	*segment.Engine
	delay time.Duration
}

func (s slowFill) Fill(ctx context.Context, tag wire.Tag, dst []int64) (int, error) {
	n, err := s.Engine.Fill(ctx, tag, dst)
	time.Sleep(s.delay)
	return n, err
}

// One client asking one id after another gets increasing ids from a node,
// also when it empties the ring while a refill is between drawing ids and
// putting them, and while the ring grows (CI saw 101 then 2: the request
// drew the next segment straight from the engine ahead of the refill's
// chunk).
func TestSequentialRequestsIncrease(t *testing.T) {
	store := memstore.New()
	if err := store.Create(context.Background(), segment.Tag{Name: wire.MustTag("o"), Step: 100}); err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, producer.Config{Segments: slowFill{newEngine(t, store, false), time.Millisecond},
		MinRing: 16, MaxRing: 256, GrowAfter: time.Second})
	var last int64
	for i := range 3000 {
		dst := make([]int64, 1+i%5)
		if err := p.Segment(context.Background(), wire.MustTag("o"), dst); err != nil {
			t.Fatal(err)
		}
		for _, id := range dst {
			if id <= last {
				t.Fatalf("request %d: id %d after %d", i, id, last)
			}
			last = id
		}
	}
}

// Clients asking one request after another, all at once, while the tag's
// ring grows: each client's ids increase. Grow moved the old ring's ids a
// chunk at a time while requests still took from it, and a request could
// take ids above a chunk in flight, whose lower ids its next request then
// got from the new ring. Grow now moves them in one take.
func TestConcurrentRequestsIncreaseWhileGrowing(t *testing.T) {
	store := memstore.New()
	p := newProducer(t, producer.Config{Segments: newEngine(t, store, true), MinRing: 16, MaxRing: 1 << 14, GrowAfter: time.Second})
	for tag := range 16 {
		name := fmt.Sprintf("g%d", tag)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var last int64
				for i := range 3000 {
					dst := make([]int64, 1+i%64)
					if err := p.Segment(context.Background(), wire.MustTag(name), dst); err != nil {
						errs <- err
						return
					}
					for _, id := range dst {
						if id <= last {
							errs <- fmt.Errorf("tag %s: id %d after %d", name, id, last)
							return
						}
						last = id
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
}
