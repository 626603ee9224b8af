package segment_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/wire"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
)

func TestNewValidates(t *testing.T) {
	s := memstore.New()
	tests := []struct {
		name string
		cfg  segment.Config
		ok   bool
	}{
		{"defaults", segment.Config{Store: s}, true},
		{"all set", segment.Config{Store: s, LoadFactor: 0.5, MaxStep: 10, StepWindow: time.Second,
			RefreshInterval: -1, NegativeTTL: time.Second, ReadyWait: time.Millisecond, DefaultStep: 5}, true},
		{"no store", segment.Config{}, false},
		{"load factor negative", segment.Config{Store: s, LoadFactor: -0.1}, false},
		{"load factor one", segment.Config{Store: s, LoadFactor: 1}, false},
		{"load factor above one", segment.Config{Store: s, LoadFactor: 1.5}, false},
		{"load factor NaN", segment.Config{Store: s, LoadFactor: math.NaN()}, false},
		{"max step negative", segment.Config{Store: s, MaxStep: -1}, false},
		{"max step too big", segment.Config{Store: s, MaxStep: segment.MaxStep + 1}, false},
		{"step window negative", segment.Config{Store: s, StepWindow: -time.Second}, false},
		{"negative ttl negative", segment.Config{Store: s, NegativeTTL: -time.Second}, false},
		{"ready wait negative", segment.Config{Store: s, ReadyWait: -time.Second}, false},
		{"backoff negative", segment.Config{Store: s, RetryBackoff: -time.Second}, false},
		{"backoff cap below backoff", segment.Config{Store: s, RetryBackoff: time.Second, MaxRetryBackoff: time.Millisecond}, false},
		{"default step negative", segment.Config{Store: s, DefaultStep: -1}, false},
		{"default step too big", segment.Config{Store: s, DefaultStep: segment.MaxStep + 1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := segment.New(tc.cfg)
			if tc.ok {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if err := e.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				return
			}
			if !errors.Is(err, segment.ErrInvalid) {
				t.Fatalf("New = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestStartPreloads(t *testing.T) {
	s := newTestStore()
	for _, name := range []string{"b", "a", "c"} {
		s.create(t, name, 100)
	}
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1})
	start(t, e)
	if got := e.Tags(); !slices.Equal(got, []wire.Tag{wire.MustTag("a"), wire.MustTag("b"), wire.MustTag("c")}) {
		t.Fatalf("Tags = %v", got)
	}
	if got := s.Allocations(); got != 3 {
		t.Fatalf("allocations after Start = %d, want 3", got)
	}
	// The first request must not touch the store: block it and ask.
	s.setBlocked(true)
	defer s.setBlocked(false)
	for _, name := range []string{"a", "b", "c"} {
		if !e.Known(wire.MustTag(name)) {
			t.Fatalf("Known(%q) = false", name)
		}
		if id := next(t, e, name); id != 1 {
			t.Fatalf("first id of %q = %d, want 1", name, id)
		}
	}
}

func TestStartListFails(t *testing.T) {
	s := memstore.New()
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("a")}); err != nil {
		t.Fatal(err)
	}
	s.SetDown(true)
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1})
	if err := e.Start(context.Background()); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Start with store down = %v, want ErrUnavailable", err)
	}
	s.SetDown(false)
	start(t, e) // may be retried
	if err := e.Start(context.Background()); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("second Start = %v, want ErrInvalid", err)
	}
}

func TestStartPreloadFailureDoesNotFailStart(t *testing.T) {
	s := newTestStore()
	s.create(t, "a", 10)
	e := newEngine(t, segment.Config{Store: &failNext{testStore: s}, RefreshInterval: -1})
	start(t, e)
	st := state(t, e, "a")
	if st.LastError == "" || st.Segments[0].Ready {
		t.Fatalf("State = %+v, want a load error and no segment", st)
	}
}

// failNext fails every id call.
type failNext struct{ *testStore }

func (f *failNext) Advance(context.Context, wire.Tag, int, int64) (segment.Alloc, error) {
	return segment.Alloc{}, fmt.Errorf("%w: test", segment.ErrUnavailable)
}

func TestMarkCount(t *testing.T) {
	tests := []struct {
		size int64
		f    float64
		want int64
	}{
		{2000, 0.1, 200},
		{100, 0.1, 10},
		{10, 0.1, 1},
		{5, 0.1, 1},
		{7, 0.5, 4},
		{1, 0.5, 1},
		{3, 0.999, 3},
		{1_000_000, 0.3, 300_000},
		{1000, 0.7, 700},
	}
	for _, tc := range tests {
		if got := segment.MarkCount(tc.size, tc.f); got != tc.want {
			t.Errorf("MarkCount(%d, %v) = %d, want %d", tc.size, tc.f, got, tc.want)
		}
	}
}

// TestLoadAtMark: the next segment starts loading when exactly
// ceil(LoadFactor*step) ids have been used, and only once per segment.
func TestLoadAtMark(t *testing.T) {
	tests := []struct {
		name string
		lf   float64
		step int
		mark int
	}{
		{"default 10%", 0, 2000, 200},
		{"10% of 100", 0.1, 100, 10},
		{"25%", 0.25, 100, 25},
		{"half of 7", 0.5, 7, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore()
			s.create(t, "t", tc.step)
			rec := newRecorder()
			e := newEngine(t, segment.Config{Store: s, LoadFactor: tc.lf, RefreshInterval: -1, OnLoad: rec.OnLoad})
			start(t, e)
			rec.next(t)
			for i := 1; i < tc.mark; i++ {
				if id := next(t, e, "t"); id != int64(i) {
					t.Fatalf("id %d = %d", i, id)
				}
			}
			if st := state(t, e, "t"); st.Loading || s.Allocations() != 1 {
				t.Fatalf("after %d ids: loading %v, allocations %d; want no load yet", tc.mark-1, st.Loading, s.Allocations())
			}
			next(t, e, "t")
			ev := rec.next(t)
			if ev.Err != nil || ev.Start != int64(tc.step)+1 {
				t.Fatalf("load event = %+v, want the second segment", ev)
			}
			waitFor(t, "next segment ready", func() bool { return nextReady(e, "t") })
			for i := tc.mark + 1; i <= tc.step; i++ {
				next(t, e, "t")
			}
			if got := s.Allocations(); got != 2 {
				t.Fatalf("allocations after draining the first segment = %d, want 2 (one load per segment)", got)
			}
		})
	}
}

func TestLoadAtMarkReserveCrossing(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 100)
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1})
	start(t, e)
	// One reservation spanning the mark (10) starts the load...
	first, n, err := e.Reserve(context.Background(), wire.MustTag("t"), 15)
	if err != nil || first != 1 || n != 15 {
		t.Fatalf("Reserve = %d, %d, %v; want 1, 15", first, n, err)
	}
	waitFor(t, "second allocation", func() bool { return s.Allocations() == 2 })
	// ...and later ones in the same segment do not.
	for range 8 {
		if _, _, err := e.Reserve(context.Background(), wire.MustTag("t"), 10); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Allocations(); got != 2 {
		t.Fatalf("allocations = %d, want 2", got)
	}
}

func TestSwitchOnExhaustion(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 10)
	e := newEngine(t, segment.Config{Store: s, LoadFactor: 0.5, RefreshInterval: -1, Clock: newClock()})
	start(t, e)
	// One engine on the store: ids run on without a gap across segments
	// (steps 10, 20, 40, ... as loads come quickly).
	firstOfSegment := map[int64]bool{11: true, 31: true, 71: true, 151: true}
	cur := state(t, e, "t").Current
	loads := 1
	for i := int64(1); i <= 200; i++ {
		if firstOfSegment[i] {
			loads++
			waitLoads(t, e, "t", loads)
		}
		if id := next(t, e, "t"); id != i {
			t.Fatalf("id = %d, want %d", id, i)
		}
		switch st := state(t, e, "t"); {
		case firstOfSegment[i+1]:
			// Exhausted: a load that lands now becomes current at once.
		case firstOfSegment[i]:
			if st.Current == cur {
				t.Fatalf("id %d: Current still %d, want a switch", i, cur)
			}
			cur = st.Current
		case st.Current != cur:
			t.Fatalf("id %d: Current moved to %d without exhaustion", i, st.Current)
		}
	}
}

func TestNotReadyWhenStoreDown(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 10)
	sl := newStepSleeper()
	rec := newRecorder()
	e := newEngine(t, segment.Config{Store: s, LoadFactor: 0.5, RefreshInterval: -1,
		Sleep: sl.Sleep, RetryBackoff: 7 * time.Millisecond, OnLoad: rec.OnLoad})
	start(t, e)
	rec.next(t)
	s.SetDown(true)
	for i := int64(1); i <= 5; i++ { // the 5th id starts the (failing) load
		if id := next(t, e, "t"); id != i {
			t.Fatalf("id = %d, want %d", id, i)
		}
	}
	call := sl.next(t)
	if call.d != 7*time.Millisecond {
		t.Fatalf("first backoff = %v, want 7ms", call.d)
	}
	if ev := rec.next(t); !errors.Is(ev.Err, segment.ErrUnavailable) {
		t.Fatalf("failed load event = %+v, want Err wrapping ErrUnavailable", ev)
	}
	for i := int64(6); i <= 10; i++ { // outage invisible while the buffer lasts
		if id := next(t, e, "t"); id != i {
			t.Fatalf("id = %d, want %d", id, i)
		}
	}
	began := time.Now()
	_, err := e.Next(context.Background(), wire.MustTag("t"))
	if !errors.Is(err, segment.ErrNotReady) || !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Next with both buffers empty = %v, want ErrNotReady and ErrUnavailable", err)
	}
	if took := time.Since(began); took > time.Second {
		t.Fatalf("failing Next took %v; want fail fast", took)
	}
	if st := state(t, e, "t"); st.LastError == "" || !st.Loading {
		t.Fatalf("State = %+v, want the load error and a loader backing off", st)
	}

	s.SetDown(false)
	close(call.release)
	if ev := rec.next(t); ev.Err != nil || ev.Start != 11 {
		t.Fatalf("retry load = %+v, want [11,...)", ev)
	}
	if id := next(t, e, "t"); id != 11 {
		t.Fatalf("id after recovery = %d, want 11", id)
	}
}

func TestNotReadyWhenStoreBlocked(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 10)
	const wait = 30 * time.Millisecond
	e := newEngine(t, segment.Config{Store: s, LoadFactor: 0.5, RefreshInterval: -1, ReadyWait: wait})
	start(t, e)
	s.setBlocked(true)
	for i := int64(1); i <= 10; i++ {
		if id := next(t, e, "t"); id != i {
			t.Fatalf("id = %d, want %d", id, i)
		}
	}
	began := time.Now()
	_, err := e.Next(context.Background(), wire.MustTag("t"))
	took := time.Since(began)
	if !errors.Is(err, segment.ErrNotReady) || errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Next with a hanging store = %v, want ErrNotReady only", err)
	}
	if took < wait || took > wait+2*time.Second {
		t.Fatalf("Next took %v, want about ReadyWait %v", took, wait)
	}
	s.setBlocked(false)
	waitFor(t, "recovery", func() bool {
		id, err := e.Next(context.Background(), wire.MustTag("t"))
		if err == nil && id != 11 {
			t.Fatalf("id after recovery = %d, want 11", id)
		}
		return err == nil
	})
}

func TestNextStepRule(t *testing.T) {
	const w = 15 * time.Minute
	tests := []struct {
		name                   string
		step, minStep, maxStep int
		since                  time.Duration
		want                   int
	}{
		{"quick doubles", 10, 10, 1000, 0, 20},
		{"a third of the window doubles", 10, 10, 1000, w / 3, 20},
		{"an eighth of the window grows 8x", 10, 10, 1000, w / 8, 80},
		{"much faster grows 16x at most", 10, 10, 10_000, 10 * time.Second, 160},
		{"16x clamps at the cap", 100, 10, 1000, 10 * time.Second, 1000},
		{"a second is a rate", 10, 10, 10_000, time.Second, 160},
		{"under a second is a burst: doubles", 10, 10, 10_000, time.Second - 1, 20},
		{"a burst of a millisecond doubles", 10, 10, 10_000, time.Millisecond, 20},
		{"just below window doubles", 10, 10, 1000, w - 1, 20},
		{"at window same", 10, 10, 1000, w, 10},
		{"just below twice window same", 40, 10, 1000, 2*w - 1, 40},
		{"at twice window halves", 40, 10, 1000, 2 * w, 20},
		{"long idle halves", 40, 10, 1000, 24 * time.Hour, 20},
		{"halving stops at table step", 10, 10, 1000, 2 * w, 10},
		{"halving below table step keeps", 15, 10, 1000, 2 * w, 15},
		{"doubling to the cap", 500, 10, 1000, 0, 1000},
		{"doubling past the cap clamps", 600, 10, 1000, 0, 1000},
		{"at the cap keeps", 1000, 10, 1000, 0, 1000},
		{"default cap", segment.DefaultMaxStep/2 + 1, 2000, segment.DefaultMaxStep, 0, segment.DefaultMaxStep},
		{"clock went back doubles", 10, 10, 1000, -time.Hour, 20},
		{"raised table step is the floor", 10, 40, 1000, w, 40},
		{"huge step no overflow", segment.MaxStep, 1, segment.MaxStep, 0, segment.MaxStep},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := segment.NextStepFunc(tc.step, tc.minStep, tc.maxStep, tc.since, w); got != tc.want {
				t.Fatalf("nextStep(%d, min %d, max %d, %v) = %d, want %d", tc.step, tc.minStep, tc.maxStep, tc.since, got, tc.want)
			}
		})
	}
}

// stepDriver consumes ids of one tag until a load happens, with the fake
// clock moved first, and returns the load event.
type stepDriver struct {
	t     *testing.T
	e     *segment.Engine
	s     *testStore
	clock *clock.Fake
	rec   *recorder
	want  int64 // next id expected
}

func (d *stepDriver) load(after time.Duration) segment.LoadEvent {
	d.t.Helper()
	// The previous loader emits its event just before it installs the
	// segment and finishes: wait for that.
	waitFor(d.t, "previous loader to finish", func() bool { return !state(d.t, d.e, "t").Loading })
	d.clock.Advance(after)
	loads := state(d.t, d.e, "t").Loads
	for range 10_000_000 {
		if id := next(d.t, d.e, "t"); id != d.want {
			d.t.Fatalf("id = %d, want %d", id, d.want)
		}
		d.want++
		if st := state(d.t, d.e, "t"); st.Loading || st.Loads > loads {
			ev := d.rec.next(d.t)
			if ev.Err != nil {
				d.t.Fatalf("load failed: %v", ev.Err)
			}
			return ev
		}
	}
	d.t.Fatal("no load")
	return segment.LoadEvent{}
}

func TestDynamicStep(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 10)
	clock := newClock()
	rec := newRecorder()
	e := newEngine(t, segment.Config{Store: s, LoadFactor: 0.5, MaxStep: 80, StepWindow: 15 * time.Minute,
		RefreshInterval: -1, Clock: clock, OnLoad: rec.OnLoad})
	start(t, e)
	if ev := rec.next(t); ev.Step != 10 || ev.PrevStep != 0 || ev.Start != 1 || ev.End != 11 {
		t.Fatalf("first load = %+v, want table step 10, [1,11)", ev)
	}
	d := &stepDriver{t: t, e: e, s: s, clock: clock, rec: rec, want: 1}
	steps := []struct {
		after          time.Duration
		prev, wantStep int
	}{
		{8 * time.Minute, 10, 20},
		{15*time.Minute - time.Second, 20, 40},
		{15 * time.Minute, 40, 40},
		{30*time.Minute - time.Second, 40, 40},
		{30 * time.Minute, 40, 20},
		{time.Hour, 20, 10},
		{time.Hour, 10, 10}, // not below the table step
		{0, 10, 20},
		{0, 20, 40},
		{0, 40, 80},
		{0, 80, 80}, // 160 would exceed MaxStep
	}
	for i, st := range steps {
		ev := d.load(st.after)
		if ev.PrevStep != st.prev || ev.Step != st.wantStep || ev.End-ev.Start != int64(st.wantStep) {
			t.Fatalf("load %d (after %v) = %+v, want step %d -> %d", i+2, st.after, ev, st.prev, st.wantStep)
		}
		if got := state(t, e, "t"); got.Step != st.wantStep || !got.LastLoad.Equal(clock.Now()) {
			t.Fatalf("State after load %d = %+v", i+2, got)
		}
	}
	// Every range came from the store, in order.
	allocs := s.Allocs()
	evs := rec.Events()
	if len(allocs) != len(evs) {
		t.Fatalf("%d allocs, %d events", len(allocs), len(evs))
	}
	for i := range allocs {
		if allocs[i].Start() != evs[i].Start || allocs[i].End() != evs[i].End {
			t.Fatalf("event %d = [%d,%d), store granted [%d,%d)", i, evs[i].Start, evs[i].End, allocs[i].Start(), allocs[i].End())
		}
	}
}

func TestTableStepChange(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 10)
	clock := newClock()
	rec := newRecorder()
	e := newEngine(t, segment.Config{Store: s, LoadFactor: 0.5, RefreshInterval: -1, Clock: clock, OnLoad: rec.OnLoad})
	start(t, e)
	rec.next(t)
	d := &stepDriver{t: t, e: e, s: s, clock: clock, rec: rec, want: 1}
	ctx := context.Background()

	// Raised: the load that reads the new step records it as minStep; the
	// next load uses it as a floor.
	if err := s.SetStep(ctx, wire.MustTag("t"), 40); err != nil {
		t.Fatal(err)
	}
	if ev := d.load(20 * time.Minute); ev.Step != 10 {
		t.Fatalf("load after SetStep(40) = %+v, want step 10 (decided before the read)", ev)
	}
	if st := state(t, e, "t"); st.MinStep != 40 {
		t.Fatalf("MinStep = %d, want 40", st.MinStep)
	}
	if ev := d.load(20 * time.Minute); ev.Step != 40 {
		t.Fatalf("next load = %+v, want step 40 (the new table step)", ev)
	}

	// Lowered: halving may now go below the old table step.
	if err := s.SetStep(ctx, wire.MustTag("t"), 10); err != nil {
		t.Fatal(err)
	}
	if ev := d.load(time.Hour); ev.Step != 40 {
		t.Fatalf("load = %+v, want 40 (minStep was still 40)", ev)
	}
	if st := state(t, e, "t"); st.MinStep != 10 {
		t.Fatalf("MinStep = %d, want 10", st.MinStep)
	}
	if ev := d.load(time.Hour); ev.Step != 20 {
		t.Fatalf("load = %+v, want 20", ev)
	}
}

func TestReserve(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 100)
	e := newEngine(t, segment.Config{Store: s, LoadFactor: 0.5, RefreshInterval: -1})
	start(t, e)
	ctx := context.Background()
	tests := []struct {
		max         int
		first       int64
		n           int
		waitForNext bool
	}{
		{7, 1, 7, false},
		{7, 8, 7, false},
		{1, 15, 1, false},
		{1000, 16, 85, false},  // the rest of the segment only
		{5, 101, 5, true},      // the next segment
		{500, 106, 195, false}, // the rest of a segment of 200: loaded ms after the first, the step doubled
	}
	for _, tc := range tests {
		if tc.waitForNext {
			waitLoads(t, e, "t", 2)
		}
		first, n, err := e.Reserve(ctx, wire.MustTag("t"), tc.max)
		if err != nil || first != tc.first || n != tc.n {
			t.Fatalf("Reserve(%d) = %d, %d, %v; want %d, %d", tc.max, first, n, err, tc.first, tc.n)
		}
	}
	for _, bad := range []int{0, -1} {
		if _, _, err := e.Reserve(ctx, wire.MustTag("t"), bad); !errors.Is(err, segment.ErrInvalid) {
			t.Fatalf("Reserve(%d) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestInvalidTag(t *testing.T) {
	s := newTestStore()
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, AutoCreate: true})
	// A bad name never becomes a wire.Tag (wire.ParseTag); the zero Tag,
	// which names no tag, is refused before the store is asked.
	if _, err := e.Next(context.Background(), wire.Tag{}); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("Next(zero Tag) = %v, want ErrInvalid", err)
	}
	if s.Gets() != 0 {
		t.Fatalf("the zero Tag reached the store (%d Gets)", s.Gets())
	}
}

// TestConcurrentUnique runs two engines (two nodes) on one store, many
// goroutines each, tiny steps so that loads and switches race with takes.
func TestConcurrentUnique(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 7)
	var engines []*segment.Engine
	for range 2 {
		e := newEngine(t, segment.Config{Store: s, LoadFactor: 0.3, MaxStep: 64, RefreshInterval: -1})
		start(t, e)
		engines = append(engines, e)
	}
	const workers, ops = 8, 1500
	type result struct {
		ids []int64
		err error
	}
	results := make(chan result, 2*workers)
	var wg sync.WaitGroup
	for _, e := range engines {
		for w := range workers {
			wg.Go(func() {
				var r result
				rnd := rand.New(rand.NewPCG(uint64(w), 1))
				for i := range ops {
					if i%2 == 0 {
						id, err := e.Next(context.Background(), wire.MustTag("t"))
						if err != nil {
							r.err = err
							break
						}
						r.ids = append(r.ids, id)
						continue
					}
					first, n, err := e.Reserve(context.Background(), wire.MustTag("t"), 1+rnd.IntN(5))
					if err != nil {
						r.err = err
						break
					}
					for k := range n {
						r.ids = append(r.ids, first+int64(k))
					}
				}
				results <- r
			})
		}
	}
	wg.Wait()
	close(results)
	seen := make(map[int64]bool)
	for r := range results {
		if r.err != nil {
			t.Fatal(r.err)
		}
		for _, id := range r.ids {
			if seen[id] {
				t.Fatalf("id %d handed out twice", id)
			}
			seen[id] = true
		}
	}
	row, err := s.Get(context.Background(), wire.MustTag("t"))
	if err != nil {
		t.Fatal(err)
	}
	allocs := s.Allocs()
	for id := range seen {
		if id < 1 || id >= row.MaxID {
			t.Fatalf("id %d outside [1, max_id %d)", id, row.MaxID)
		}
		if !slices.ContainsFunc(allocs, func(a segment.Alloc) bool { return id >= a.Start() && id < a.End() }) {
			t.Fatalf("id %d is in no range the store granted", id)
		}
	}
	if len(seen) < 2*workers*ops {
		t.Fatalf("only %d ids", len(seen))
	}
}

func TestOutageInvisibleWhileBuffersLast(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 100)
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, Clock: newClock()})
	start(t, e)
	for i := int64(1); i <= 10; i++ {
		next(t, e, "t")
	}
	waitFor(t, "next segment", func() bool { return nextReady(e, "t") })
	s.SetDown(true)
	// [1,101) and [101,301) (doubled step) are in the buffers: 290 ids left.
	for i := int64(11); i <= 300; i++ {
		if id := next(t, e, "t"); id != i {
			t.Fatalf("id during outage = %d, want %d", id, i)
		}
	}
	if _, err := e.Next(context.Background(), wire.MustTag("t")); !errors.Is(err, segment.ErrNotReady) || !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Next with buffers drained = %v, want ErrNotReady wrapping ErrUnavailable", err)
	}
	s.SetDown(false)
	waitFor(t, "recovery", func() bool {
		id, err := e.Next(context.Background(), wire.MustTag("t"))
		if err == nil && id != 301 {
			t.Fatalf("first id after the outage = %d, want 301", id)
		}
		return err == nil
	})
}

func TestBackoff(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 10)
	sl := newStepSleeper()
	rec := newRecorder()
	e := newEngine(t, segment.Config{Store: s, LoadFactor: 0.5, RefreshInterval: -1, Sleep: sl.Sleep,
		RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 80 * time.Millisecond, OnLoad: rec.OnLoad})
	start(t, e)
	rec.next(t)
	s.SetDown(true)
	for range 5 {
		next(t, e, "t")
	}
	for _, want := range []time.Duration{10, 20, 40, 80, 80, 80} {
		c := sl.next(t)
		if c.d != want*time.Millisecond {
			t.Fatalf("backoff = %v, want %v", c.d, want*time.Millisecond)
		}
		if ev := rec.next(t); !errors.Is(ev.Err, segment.ErrUnavailable) || ev.Tag != "t" {
			t.Fatalf("event = %+v, want a failure", ev)
		}
		close(c.release)
	}
	s.SetDown(false)
	for {
		ev := rec.next(t)
		if ev.Err == nil {
			break
		}
		close(sl.next(t).release) // a retry that raced SetDown(false)
	}
	waitFor(t, "loader to finish", func() bool { return !state(t, e, "t").Loading })
	if st := state(t, e, "t"); st.LastError != "" || !st.Segments[1-st.Current].Ready {
		t.Fatalf("State after recovery = %+v", st)
	}
}

func TestRefresher(t *testing.T) {
	s := newTestStore()
	s.create(t, "a", 10)
	clk := newClock() // the refresher ticks when the test moves it
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: 5 * time.Millisecond, Clock: clk})
	start(t, e)
	testenv.Armed(t, clk, 1) // the refresher's ticker
	s.create(t, "b", 10)
	if e.Known(wire.MustTag("b")) {
		t.Fatal("b added before a refresh")
	}
	clk.Advance(5 * time.Millisecond)
	waitFor(t, "b added and preloaded", func() bool {
		st, ok := e.State("b")
		return ok && st.Loads == 1
	})
	if err := s.Delete(context.Background(), wire.MustTag("a")); err != nil {
		t.Fatal(err)
	}
	if !e.Known(wire.MustTag("a")) {
		t.Fatal("a dropped before a refresh")
	}
	clk.Advance(5 * time.Millisecond)
	waitFor(t, "a dropped", func() bool { return !e.Known(wire.MustTag("a")) })
	if _, err := e.Next(context.Background(), wire.MustTag("a")); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Next(deleted tag) = %v, want ErrUnknownTag", err)
	}
	if got := e.Tags(); !slices.Equal(got, []wire.Tag{wire.MustTag("b")}) {
		t.Fatalf("Tags = %v, want [b]", got)
	}
}

func TestRefreshManual(t *testing.T) {
	s := newTestStore()
	s.create(t, "a", 10)
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1})
	start(t, e)
	s.create(t, "c", 10)
	if err := s.Delete(context.Background(), wire.MustTag("a")); err != nil {
		t.Fatal(err)
	}
	if e.Known(wire.MustTag("c")) || !e.Known(wire.MustTag("a")) {
		t.Fatal("cache changed without a refresh")
	}
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !e.Known(wire.MustTag("c")) || e.Known(wire.MustTag("a")) {
		t.Fatalf("after Refresh: Tags = %v, want [c]", e.Tags())
	}
	s.SetDown(true)
	if err := e.Refresh(context.Background()); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Refresh with store down = %v", err)
	}
	if !e.Known(wire.MustTag("c")) {
		t.Fatal("a failed refresh emptied the cache")
	}
}

func TestDeletedTagDroppedOnLoad(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 10)
	e := newEngine(t, segment.Config{Store: s, LoadFactor: 0.5, RefreshInterval: -1})
	start(t, e)
	if err := s.Delete(context.Background(), wire.MustTag("t")); err != nil {
		t.Fatal(err)
	}
	for range 5 { // the 5th starts a load, which finds no row
		next(t, e, "t")
	}
	waitFor(t, "tag dropped", func() bool { return !e.Known(wire.MustTag("t")) })
	if _, err := e.Next(context.Background(), wire.MustTag("t")); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Next = %v, want ErrUnknownTag", err)
	}
}

func TestNegativeCache(t *testing.T) {
	s := newTestStore()
	clock := newClock()
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, NegativeTTL: 5 * time.Second, Clock: clock})
	start(t, e)
	ctx := context.Background()
	for range 5 {
		if _, err := e.Next(ctx, wire.MustTag("ghost")); !errors.Is(err, segment.ErrUnknownTag) {
			t.Fatalf("Next(ghost) = %v, want ErrUnknownTag", err)
		}
	}
	if got := s.Gets(); got != 1 {
		t.Fatalf("store Gets = %d, want 1 within NegativeTTL", got)
	}
	s.create(t, "ghost", 10)
	clock.Advance(5*time.Second - time.Nanosecond)
	if _, err := e.Next(ctx, wire.MustTag("ghost")); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Next(ghost) before the TTL = %v, want the cached ErrUnknownTag", err)
	}
	clock.Advance(time.Nanosecond)
	if id := next(t, e, "ghost"); id != 1 {
		t.Fatalf("id = %d, want 1", id)
	}
	if got := s.Gets(); got != 2 {
		t.Fatalf("store Gets = %d, want 2", got)
	}
	if !e.Known(wire.MustTag("ghost")) {
		t.Fatal("found tag not cached")
	}
}

func TestNegativeCacheConcurrentMisses(t *testing.T) {
	s := newTestStore()
	clk := newClock()
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, Clock: clk})
	s.setBlocked(true)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			_, err := e.Next(context.Background(), wire.MustTag("ghost"))
			errs <- err
		})
	}
	waitFor(t, "a lookup", func() bool { return s.Gets() > 0 })
	testenv.Armed(t, clk, 20) // every caller waits for the lookup (its ColdWait timer)
	s.setBlocked(false)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, segment.ErrUnknownTag) {
			t.Fatalf("Next = %v, want ErrUnknownTag", err)
		}
	}
	if got := s.Gets(); got != 1 {
		t.Fatalf("store Gets = %d for 20 concurrent misses, want 1", got)
	}
}

func TestNegativeCacheBounded(t *testing.T) {
	s := newTestStore()
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, Clock: newClock()})
	segment.SetNegativeCap(e, 3)
	for i := range 20 {
		if _, err := e.Next(context.Background(), wire.MustTag(fmt.Sprintf("ghost%d", i))); !errors.Is(err, segment.ErrUnknownTag) {
			t.Fatal(err)
		}
		if n := segment.NegativeLen(e); n > 3 {
			t.Fatalf("negative cache holds %d names, cap 3", n)
		}
	}
}

func TestLookupStoreDown(t *testing.T) {
	s := newTestStore()
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, Clock: newClock()})
	s.SetDown(true)
	_, err := e.Next(context.Background(), wire.MustTag("x"))
	if !errors.Is(err, segment.ErrNotReady) || !errors.Is(err, segment.ErrUnavailable) || errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Next with store down = %v, want ErrNotReady+ErrUnavailable", err)
	}
	s.SetDown(false)
	s.create(t, "x", 10)
	if id := next(t, e, "x"); id != 1 { // not negatively cached
		t.Fatalf("id = %d, want 1", id)
	}
}

func TestLookupStoreBlocked(t *testing.T) {
	s := newTestStore()
	s.create(t, "x", 10)
	const wait = 20 * time.Millisecond
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, ReadyWait: wait})
	s.setBlocked(true)
	began := time.Now()
	_, err := e.Next(context.Background(), wire.MustTag("x"))
	if !errors.Is(err, segment.ErrNotReady) {
		t.Fatalf("Next with a hanging store = %v, want ErrNotReady", err)
	}
	if took := time.Since(began); took < wait || took > wait+2*time.Second {
		t.Fatalf("took %v, want about %v", took, wait)
	}
	s.setBlocked(false)
	waitFor(t, "x served", func() bool {
		_, err := e.Next(context.Background(), wire.MustTag("x"))
		return err == nil
	})
}

func TestAutoCreate(t *testing.T) {
	t.Run("creates", func(t *testing.T) {
		s := newTestStore()
		e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, AutoCreate: true, DefaultStep: 30})
		start(t, e)
		if id := next(t, e, "fresh"); id != 1 {
			t.Fatalf("id = %d, want 1", id)
		}
		row, err := s.Get(context.Background(), wire.MustTag("fresh"))
		if err != nil || row.Step != 30 || row.MaxID != 31 {
			t.Fatalf("row = %+v, %v; want step 30, max_id 31", row, err)
		}
	})
	t.Run("another node was quicker", func(t *testing.T) {
		s := &racingCreate{testStore: newTestStore()}
		e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, AutoCreate: true})
		if id := next(t, e, "fresh"); id != 1 {
			t.Fatalf("id = %d, want 1", id)
		}
	})
	t.Run("refused by CreateCheck", func(t *testing.T) {
		// A live node has served the tag: the store lost it.
		s := newTestStore()
		lost := fmt.Errorf("%w: node b has received ids of it up to 7001", segment.ErrTagDeleted)
		e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, AutoCreate: true,
			CreateCheck: func(_ context.Context, tag wire.Tag) error {
				if tag == wire.MustTag("lost") {
					return lost
				}
				return nil
			}})
		if _, err := e.Next(context.Background(), wire.MustTag("lost")); !errors.Is(err, segment.ErrTagDeleted) {
			t.Fatalf("Next of a tag a live node served = %v, want ErrTagDeleted", err)
		}
		if _, err := s.Get(context.Background(), wire.MustTag("lost")); !errors.Is(err, segment.ErrUnknownTag) {
			t.Fatal("tag created although CreateCheck refused")
		}
		if id := next(t, e, "fresh"); id != 1 {
			t.Fatalf("id = %d, want 1", id)
		}
	})
	t.Run("created by another node during the check", func(t *testing.T) {
		// A slow check hears the floor of the node that
		// created and loaded the tag meanwhile. The tag is in the store
		// now: load it, not a 404 "deleted" (cached for NegativeTTL).
		s := newTestStore()
		e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, AutoCreate: true,
			CreateCheck: func(ctx context.Context, tag wire.Tag) error {
				if err := s.Create(ctx, segment.Tag{Name: tag, Step: 10}); err != nil {
					return err
				}
				if _, err := s.Advance(ctx, tag, 10, 0); err != nil { // the other node's first range: 1..10
					return err
				}
				return &segment.PeerFloorError{Tag: tag, Node: "b", Floor: 11}
			}})
		if id := next(t, e, "busy"); id != 11 {
			t.Fatalf("id = %d, want 11 (after the other node's range)", id)
		}
	})
	t.Run("created again below a live node's floor meanwhile", func(t *testing.T) {
		// The store has the tag, but below the floor a live node heard:
		// someone made it again at 1. Refused.
		s := newTestStore()
		e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, AutoCreate: true,
			CreateCheck: func(ctx context.Context, tag wire.Tag) error {
				if err := s.Create(ctx, segment.Tag{Name: tag, Step: 10}); err != nil {
					return err
				}
				return &segment.PeerFloorError{Tag: tag, Node: "b", Floor: 4131}
			}})
		if _, err := e.Next(context.Background(), wire.MustTag("lost")); !errors.Is(err, segment.ErrTagDeleted) {
			t.Fatalf("Next of a tag made again below a live node's floor = %v, want ErrTagDeleted", err)
		}
	})
	t.Run("off", func(t *testing.T) {
		s := newTestStore()
		e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1})
		if _, err := e.Next(context.Background(), wire.MustTag("fresh")); !errors.Is(err, segment.ErrUnknownTag) {
			t.Fatalf("Next = %v, want ErrUnknownTag", err)
		}
		if _, err := s.Get(context.Background(), wire.MustTag("fresh")); !errors.Is(err, segment.ErrUnknownTag) {
			t.Fatal("tag created without AutoCreate")
		}
	})
}

// racingCreate lets another "node" create the row just before our Create.
type racingCreate struct{ *testStore }

func (r *racingCreate) Create(ctx context.Context, tag segment.Tag) error {
	if err := r.testStore.Create(ctx, segment.Tag{Name: tag.Name, Step: 5}); err != nil {
		return err
	}
	return r.testStore.Create(ctx, tag)
}

func TestSkipIDsBelowOne(t *testing.T) {
	s := newTestStore()
	s.shift = 15 // grants [1,11) as [-14,-4), then [11,31) as [-4,16)
	s.create(t, "t", 10)
	rec := newRecorder()
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, Clock: newClock(), OnLoad: rec.OnLoad})
	start(t, e)
	for i := int64(1); i <= 15; i++ {
		if id := next(t, e, "t"); id != i {
			t.Fatalf("id = %d, want %d", id, i)
		}
	}
	if ev := rec.next(t); ev.Start != -14 || ev.End != -4 {
		t.Fatalf("first load = %+v, want [-14,-4)", ev)
	}
	if ev := rec.next(t); ev.Start != -4 || ev.End != 16 {
		t.Fatalf("second load = %+v, want [-4,16)", ev)
	}
}

func TestStoreWithoutPositiveIDs(t *testing.T) {
	s := newTestStore()
	s.shift = 1 << 40
	s.create(t, "t", 10)
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, MaxStep: 10})
	start(t, e)
	_, err := e.Next(context.Background(), wire.MustTag("t"))
	if !errors.Is(err, segment.ErrNotReady) || !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("Next = %v, want ErrNotReady wrapping ErrInvalid", err)
	}
}

func TestState(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 100)
	clock := newClock()
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, Clock: clock})
	start(t, e)
	next(t, e, "t")
	next(t, e, "t")
	got := state(t, e, "t")
	want := segment.TagState{
		Tag:      "t",
		Segments: [2]segment.SegmentState{{Value: 3, Max: 101, Step: 100, Ready: true}},
		Step:     100,
		MinStep:  100,
		LastLoad: clock.Now(),
		Loads:    1,
		Headroom: math.MaxInt64 - 100, // 101 … 2^63-1
	}
	if got != want {
		t.Fatalf("State = %+v\nwant    %+v", got, want)
	}
	if _, ok := e.State("nope"); ok {
		t.Fatal("State of an unknown tag")
	}
}

func TestContextCanceled(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 10)
	e := newEngine(t, segment.Config{Store: s, LoadFactor: 0.5, RefreshInterval: -1, ReadyWait: time.Minute})
	start(t, e)

	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Next(canceled, wire.MustTag("t")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next(canceled ctx) = %v", err)
	}

	s.setBlocked(true)
	defer s.setBlocked(false)
	for range 10 {
		next(t, e, "t")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	began := time.Now()
	if _, err := e.Next(ctx, wire.MustTag("t")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %v, want DeadlineExceeded", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("Next took %v despite the deadline", took)
	}
	// Same for a lookup.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := e.Next(ctx2, wire.MustTag("other")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next(other) = %v, want DeadlineExceeded", err)
	}
}

func TestCloseStopsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	s := newTestStore()
	for i := range 5 {
		s.create(t, fmt.Sprintf("t%d", i), 10)
	}
	clk := newClock()
	e, err := segment.New(segment.Config{Store: s, LoadFactor: 0.5, RefreshInterval: time.Millisecond,
		ReadyWait: time.Minute, Logger: slog.New(slog.DiscardHandler), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	start(t, e)
	// A loader hangs in the store, a caller waits for it, a lookup hangs.
	s.setBlocked(true)
	defer s.setBlocked(false)
	for range 10 {
		next(t, e, "t0")
	}
	errs := make(chan error, 2)
	go func() { _, err := e.Next(context.Background(), wire.MustTag("t0")); errs <- err }()
	go func() { _, err := e.Next(context.Background(), wire.MustTag("unknown")); errs <- err }()
	// The refresher's ticker and both callers' waits are armed; the
	// refresher then runs once and hangs in the store too.
	testenv.Armed(t, clk, 3)
	clk.Advance(time.Millisecond)

	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, segment.ErrClosed) {
			t.Fatalf("waiting Next = %v, want ErrClosed", err)
		}
	}
	waitFor(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })

	if err := e.Close(); !errors.Is(err, segment.ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
	ctx := context.Background()
	if _, err := e.Next(ctx, wire.MustTag("t1")); !errors.Is(err, segment.ErrClosed) {
		t.Fatalf("Next after Close = %v", err)
	}
	if err := e.Start(ctx); !errors.Is(err, segment.ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
	if err := e.Refresh(ctx); !errors.Is(err, segment.ErrClosed) {
		t.Fatalf("Refresh after Close = %v", err)
	}
}

// No client can make the engine hold more than MaxTags tags: neither by
// asking for new ones (AutoCreate) nor through a huge table.
func TestMaxTags(t *testing.T) {
	s := newTestStore()
	for _, name := range []string{"e", "d", "c", "b"} {
		s.create(t, name, 100)
	}
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, AutoCreate: true, MaxTags: 3})
	start(t, e)
	if got := e.Tags(); !slices.Equal(got, []wire.Tag{wire.MustTag("b"), wire.MustTag("c"), wire.MustTag("d")}) {
		t.Fatalf("Tags = %v, want the first 3 by name", got)
	}
	for _, tag := range []string{"e", "new"} {
		_, err := e.Next(context.Background(), wire.MustTag(tag))
		if !errors.Is(err, segment.ErrTagLimit) || !strings.Contains(err.Error(), "maximum of 3 tags") {
			t.Fatalf("Next(%q) = %v, want ErrTagLimit", tag, err)
		}
	}
	if _, err := s.Get(context.Background(), wire.MustTag("new")); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("a tag beyond the limit was created in the store: %v", err)
	}
	if id := next(t, e, "b"); id != 1 {
		t.Fatalf("cached tag: id %d", id)
	}
	if _, err := segment.New(segment.Config{Store: s, MaxTags: -1}); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("MaxTags -1: %v", err)
	}
}

// A request for a tag not yet in the cache while the store does not answer
// gets ErrNotReady (a retryable 503) before a client's 1 s deadline: the
// availability goal counts answers within 1 s, and a refusal that comes
// later reaches the client as silence.
func TestColdLookupRefusedWithinASecond(t *testing.T) {
	s := newTestStore()
	clk := newClock()
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, Clock: clk, ReadyWait: segment.DefaultReadyWait})
	s.setBlocked(true)
	defer s.setBlocked(false)
	before := clk.Timers()
	errc := make(chan error, 1)
	go func() {
		_, err := e.Next(context.Background(), wire.MustTag("slow"))
		errc <- err
	}()
	testenv.Armed(t, clk, before+1) // the caller waits on its ColdWait timer
	clk.Advance(900 * time.Millisecond)
	select {
	case err := <-errc:
		if !errors.Is(err, segment.ErrNotReady) {
			t.Fatalf("Next = %v, want ErrNotReady", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer 900 ms after a cold lookup began with the store silent")
	}
}
