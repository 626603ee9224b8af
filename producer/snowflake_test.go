package producer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/ringbuf"
	"github.com/leafmq/leafmq/snowflake"
)

// fakeIDs is a SnowflakeIDs that counts 1, 2, 3…. Told to, its Fill finds
// no ids (the clock must move on), fails, or blocks until its ctx ends.
type fakeIDs struct {
	next  atomic.Int64
	fills atomic.Int64 // Fill calls
	zero  atomic.Bool
	block atomic.Bool

	mu  sync.Mutex
	err error
}

func (f *fakeIDs) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *fakeIDs) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *fakeIDs) Fill(ctx context.Context, dst []int64) (int, error) {
	f.fills.Add(1)
	if f.block.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	if err := f.failure(); err != nil {
		return 0, err
	}
	if f.zero.Load() {
		return 0, nil
	}
	f.count(dst)
	return len(dst), nil
}

// Next ignores zero: it stands for a Fill that waited for the clock.
func (f *fakeIDs) Next(_ context.Context, dst []int64) error {
	if err := f.failure(); err != nil {
		return err
	}
	f.count(dst)
	return nil
}

func (f *fakeIDs) count(dst []int64) {
	end := f.next.Add(int64(len(dst)))
	for i := range dst {
		dst[i] = end - int64(len(dst)) + int64(i) + 1
	}
}

// newSource starts a real snowflake source on worker 1 of Leaf's layout;
// cfg sets the rest.
func newSource(t testing.TB, cfg snowflake.SourceConfig) *snowflake.Source {
	t.Helper()
	layout := snowflake.LeafLayout()
	cfg.Open = func(context.Context) (snowflake.Registry, error) {
		return snowflake.NewStatic(layout, 1)
	}
	cfg.Layout = layout
	cfg.Logger = quiet()
	src, err := snowflake.StartSource(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

func newSnowflake(t testing.TB, cfg producer.SnowflakeConfig) *producer.Snowflake {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	s, err := producer.NewSnowflake(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitUntil polls cond until it holds, failing the test after a generous
// deadline (a bound on a hang, not a timing assertion).
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, 10*time.Second, cond)
}

func waitFull(t testing.TB, s *producer.Snowflake) {
	t.Helper()
	waitUntil(t, "the ring to fill", func() bool { st := s.Stats(); return st.Len == st.Cap })
}

func TestNewSnowflakeValidation(t *testing.T) {
	ids := &fakeIDs{}
	tests := []struct {
		name string
		cfg  producer.SnowflakeConfig
		want error // nil: any error
	}{
		{"no ids", producer.SnowflakeConfig{}, nil},
		{"negative max age", producer.SnowflakeConfig{IDs: ids, MaxAge: -time.Second}, nil},
		{"negative direct over", producer.SnowflakeConfig{IDs: ids, DirectOver: -1}, nil},
		{"negative size", producer.SnowflakeConfig{IDs: ids, Size: -1}, ringbuf.ErrInvalidConfig},
		{"size too large", producer.SnowflakeConfig{IDs: ids, Size: ringbuf.MaxSize + 1}, ringbuf.ErrInvalidConfig},
		{"padding over 100", producer.SnowflakeConfig{IDs: ids, PaddingPercent: 101}, ringbuf.ErrInvalidConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Logger = quiet()
			s, err := producer.NewSnowflake(tc.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("NewSnowflake accepted a bad config")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSnowflakeDefaults(t *testing.T) {
	s := newSnowflake(t, producer.SnowflakeConfig{IDs: &fakeIDs{}})
	waitFull(t, s)
	if st := s.Stats(); st.Cap != 65536 {
		t.Fatalf("stats = %+v, want a ring of 65536", st)
	}
}

// Small requests come from the ring, in the order the ring was filled.
func TestSnowflakeSmallFromRing(t *testing.T) {
	ids := &fakeIDs{}
	s := newSnowflake(t, producer.SnowflakeConfig{IDs: ids, Size: 1024, DirectOver: 64, MaxAge: time.Hour})
	waitFull(t, s)
	before := s.Stats().Ring.Takes

	dst := make([]int64, 64) // exactly DirectOver: still the ring
	if err := s.Next(context.Background(), dst); err != nil {
		t.Fatal(err)
	}
	for i, id := range dst {
		if id != int64(i+1) {
			t.Fatalf("Next: ids[%d] = %d, want the ring's first ids 1..64", i, id)
		}
	}
	if n := s.Try(dst[:3]); n != 3 || dst[0] != 65 || dst[2] != 67 {
		t.Fatalf("Try = %d %v, want 3 ids from 65", n, dst[:3])
	}
	if got := s.Stats().Ring.Takes - before; got != 67 {
		t.Fatalf("ring takes = %d, want 67", got)
	}
	if err := s.Next(context.Background(), nil); err != nil {
		t.Fatalf("Next of no ids: %v", err)
	}
	if n := s.Try(nil); n != 0 {
		t.Fatalf("Try of no ids = %d", n)
	}
}

// Requests larger than DirectOver go straight to the engine and leave the
// ring alone.
func TestSnowflakeLargeBypassesRing(t *testing.T) {
	ids := &fakeIDs{}
	s := newSnowflake(t, producer.SnowflakeConfig{IDs: ids, Size: 1024, DirectOver: 64, MaxAge: time.Hour})
	waitFull(t, s)
	before := s.Stats()
	dst := make([]int64, 65)
	if n := s.Try(dst); n != 65 {
		t.Fatalf("Try(65) = %d", n)
	}
	if err := s.Next(context.Background(), make([]int64, 100_000)); err != nil {
		t.Fatal(err)
	}
	after := s.Stats()
	if after.Ring.Takes != before.Ring.Takes || after.Len != before.Len {
		t.Fatalf("a large request touched the ring: before %+v, after %+v", before, after)
	}
	if dst[0] <= 1024 {
		t.Fatalf("Try(65) started at %d, an id the ring holds", dst[0])
	}
}

// A request far larger than a tick (4096 ids of Leaf's layout) waits tick
// by tick in the source and still gets all its ids.
func TestSnowflakeLargeFromSource(t *testing.T) {
	src := newSource(t, snowflake.SourceConfig{})
	s := newSnowflake(t, producer.SnowflakeConfig{IDs: src, Size: 4096})
	dst := make([]int64, 100_000)
	if err := s.Next(context.Background(), dst); err != nil {
		t.Fatal(err)
	}
	assertUnique(t, dst)
	for _, id := range dst {
		if w := src.Layout().Decompose(id).Worker; w != 1 {
			t.Fatalf("id %d has worker %d, want 1", id, w)
		}
	}
}

// A small request the ring cannot cover gets the rest from the engine.
func TestSnowflakeRingShort(t *testing.T) {
	ids := &fakeIDs{}
	s := newSnowflake(t, producer.SnowflakeConfig{IDs: ids, Size: 16, DirectOver: 64, MaxAge: time.Hour})
	waitFull(t, s)
	dst := make([]int64, 50)
	if err := s.Next(context.Background(), dst); err != nil {
		t.Fatal(err)
	}
	assertUnique(t, dst)
	for i := range 16 {
		if dst[i] != int64(i+1) {
			t.Fatalf("ids[%d] = %d, want the ring's 16 ids first", i, dst[i])
		}
	}
}

func assertUnique(t testing.TB, ids []int64) {
	t.Helper()
	seen := make(map[int64]bool, len(ids))
	for _, id := range ids {
		if id <= 0 {
			t.Fatalf("id %d is not positive", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %d", id)
		}
		seen[id] = true
	}
}

// While the engine finds no ids (the clock must move on) Try hands out
// nothing and Next waits on the engine; once the engine has ids again the
// ring fills by itself, with nobody taking from it.
func TestSnowflakeRefillsAfterEmptyFill(t *testing.T) {
	ids := &fakeIDs{}
	ids.zero.Store(true)
	s := newSnowflake(t, producer.SnowflakeConfig{IDs: ids, Size: 1024})
	waitUntil(t, "a first Fill", func() bool { return ids.fills.Load() > 0 })
	if n := s.Try(make([]int64, 5)); n != 0 {
		t.Fatalf("Try = %d with an engine that has no ids", n)
	}
	dst := make([]int64, 5)
	if err := s.Next(context.Background(), dst); err != nil || dst[4] == 0 {
		t.Fatalf("Next = %v %v", dst, err)
	}
	ids.zero.Store(false)
	waitFull(t, s)
}

func TestSnowflakeFillErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		warn bool
	}{
		{"registry down", errors.New("registry down"), true},
		{"not serving", fmt.Errorf("%w: waiting: clock behind", snowflake.ErrNotServing), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var log syncBuffer
			ids := &fakeIDs{}
			ids.setErr(tc.err)
			s := newSnowflake(t, producer.SnowflakeConfig{IDs: ids, Size: 1024,
				Logger: slog.New(slog.NewTextHandler(&log, nil))})
			// The ring counts a failed refill before it reports it: wait for both.
			waitUntil(t, "a failed refill", func() bool {
				return s.Stats().Ring.FillErrors > 0 && (!tc.warn || strings.Contains(log.String(), "snowflake ring refill failed"))
			})
			if n := s.Try(make([]int64, 5)); n != 0 {
				t.Fatalf("Try = %d from a failing engine", n)
			}
			if err := s.Next(context.Background(), make([]int64, 5)); !errors.Is(err, tc.err) {
				t.Fatalf("Next: %v, want %v", err, tc.err)
			}
			if got := strings.Contains(log.String(), "snowflake ring refill failed"); got != tc.warn {
				t.Fatalf("warned = %v, want %v; log:\n%s", got, tc.warn, log.String())
			}
			ids.setErr(nil)
			waitFull(t, s)
		})
	}
}

// syncBuffer is a bytes.Buffer safe for the ring's goroutines to log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Concurrent callers of Next and Try, of sizes on both sides of DirectOver,
// never get the same id twice.
func TestSnowflakeConcurrentUnique(t *testing.T) {
	const (
		callers = 8
		total   = 200_000
	)
	sources := []struct {
		name string
		ids  func(t *testing.T) producer.SnowflakeIDs
	}{
		{"fake", func(*testing.T) producer.SnowflakeIDs { return &fakeIDs{} }},
		{"source", func(t *testing.T) producer.SnowflakeIDs { return newSource(t, snowflake.SourceConfig{}) }},
	}
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			s := newSnowflake(t, producer.SnowflakeConfig{IDs: src.ids(t), Size: 4096, DirectOver: 64})
			results := make(chan []int64, callers)
			errs := make(chan error, callers)
			var wg sync.WaitGroup
			for c := range callers {
				wg.Go(func() {
					got := make([]int64, 0, total/callers)
					sizes := []int{1, 7, 64, 65, 300}
					for i := 0; len(got) < total/callers; i++ {
						n := min(sizes[(c+i)%len(sizes)], total/callers-len(got))
						dst := make([]int64, n)
						if i%2 == 0 {
							if err := s.Next(context.Background(), dst); err != nil {
								errs <- err
								return
							}
						} else {
							dst = dst[:s.Try(dst)]
						}
						got = append(got, dst...)
					}
					results <- got
				})
			}
			wg.Wait()
			close(errs)
			close(results)
			for err := range errs {
				t.Fatal(err)
			}
			var all []int64
			for got := range results {
				all = append(all, got...)
			}
			if len(all) != total {
				t.Fatalf("got %d ids, want %d", len(all), total)
			}
			assertUnique(t, all)
		})
	}
}

// Ids that sit in the ring longer than MaxAge are thrown away and replaced
// by fresh ones, with nobody taking from the ring.
func TestSnowflakeDropsStaleIDs(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		ids := &fakeIDs{}
		s := newSnowflake(t, producer.SnowflakeConfig{IDs: ids, Size: 1024, MaxAge: 50 * time.Millisecond})
		waitFull(t, s)
		firstFill := ids.next.Load() // every id in the ring is at most this
		old := takeUntilFresh(t, s, func(id int64) bool { return id > firstFill })
		if st := s.Stats(); st.Dropped == 0 || old >= st.Cap/2 {
			t.Fatalf("stats %+v after taking %d old ids: the ring was not freshened", st, old)
		}
	})
	t.Run("time of", func(t *testing.T) {
		// Ids up to 100 are an hour old, the rest an hour ahead (borrowed):
		// only the old ones go, and the ring keeps its order.
		// The ring's clock is a fake: each 25ms step is a freshen pass
		// (MaxAge/2), and each pass asks TimeOf about the ring's head.
		ids := &fakeIDs{}
		now := time.Now()
		clk := clock.NewFake(now)
		var asked atomic.Int64
		timeOf := func(id int64) time.Time {
			asked.Add(1)
			if id <= 100 {
				return now.Add(-time.Hour)
			}
			return now.Add(time.Hour)
		}
		s := newSnowflake(t, producer.SnowflakeConfig{IDs: ids, Size: 1024, MaxAge: 50 * time.Millisecond,
			TimeOf: timeOf, Clock: clk, Timer: clk})
		waitFull(t, s)
		waitUntil(t, "old ids to be dropped", func() bool {
			clk.Advance(25 * time.Millisecond)
			return s.Stats().Dropped >= 100
		})
		for range 8 { // more freshen passes: nothing else goes
			before := asked.Load()
			clk.Advance(25 * time.Millisecond)
			waitUntil(t, "a freshen pass", func() bool { return asked.Load() > before })
		}
		// The last pass put the fresh head back.
		waitUntil(t, "the ring to hold the fresh ids", func() bool { return s.Stats().Len == 1024-100 })
		if st := s.Stats(); st.Dropped != 100 || st.Len != 1024-100 {
			t.Fatalf("stats %+v, want exactly the 100 old ids dropped", st)
		}
		left := make([]int64, 1024-100)
		if n := s.Try(left[:64]); n != 64 {
			t.Fatalf("took %d ids", n)
		}
		for i := 64; i < len(left); i += 64 {
			s.Try(left[i:min(i+64, len(left))])
		}
		slices.Sort(left)
		for i, id := range left {
			if id != int64(101+i) {
				t.Fatalf("ids left in the ring: %d at %d, want 101-1024", id, i)
			}
		}
	})
	t.Run("source", func(t *testing.T) {
		// Never ahead of the clock, so an id's time is when it was made.
		src := newSource(t, snowflake.SourceConfig{BorrowAhead: -1})
		layout := src.Layout()
		s := newSnowflake(t, producer.SnowflakeConfig{IDs: src, Size: 4096, MaxAge: 50 * time.Millisecond})
		waitUntil(t, "ids in the ring", func() bool { return s.Stats().Len > 0 })
		// Every id in the ring now is of an earlier tick than mark.
		mark := time.Now().Truncate(layout.TimeUnit).Add(layout.TimeUnit)
		waitUntil(t, "ids to be dropped", func() bool { return s.Stats().Dropped > 0 })
		old := takeUntilFresh(t, s, func(id int64) bool { return !layout.Decompose(id).Time.Before(mark) })
		if st := s.Stats(); old >= st.Cap/2 {
			t.Fatalf("took %d old ids before a fresh one (stats %+v)", old, st)
		}
	})
}

// takeUntilFresh takes one id at a time until fresh says yes and returns
// how many it took before. Taking alone refills the ring only after half of
// it is gone.
func takeUntilFresh(t testing.TB, s *producer.Snowflake, fresh func(int64) bool) int {
	t.Helper()
	old := 0
	waitUntil(t, "a fresh id", func() bool {
		var dst [1]int64
		if s.Try(dst[:]) == 0 {
			return false
		}
		if fresh(dst[0]) {
			return true
		}
		old++
		return false
	})
	return old
}

// Close stops every goroutine, even while a refill waits in the engine, and
// may be called again.
func TestSnowflakeCloseStopsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	ids := &fakeIDs{}
	s, err := producer.NewSnowflake(producer.SnowflakeConfig{IDs: ids, Size: 1024, DirectOver: 1024, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	waitFull(t, s)
	ids.block.Store(true)
	fills := ids.fills.Load()
	// From the ring, leaving it below its padding threshold: a refill
	// starts and blocks in Fill.
	if err := s.Next(context.Background(), make([]int64, 600)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a blocked refill", func() bool { return ids.fills.Load() > fills })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	waitUntil(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })
}

// A tiny MaxAge must not make freshen's ticker interval 0 (time.NewTicker
// panics on it, in the ring's goroutine, which would kill the process).
func TestSnowflakeTinyMaxAge(t *testing.T) {
	s, err := producer.NewSnowflake(producer.SnowflakeConfig{IDs: &fakeIDs{}, Size: 16, MaxAge: time.Nanosecond, Logger: quiet()})
	if err != nil {
		return // refusing it is fine too
	}
	defer s.Close()
	if err := s.Next(context.Background(), make([]int64, 3)); err != nil {
		t.Fatal(err)
	}
}

// holderIDs is a SnowflakeIDs and SnowflakeHolder whose worker can be lost
// or changed; its ids are of the worker it holds, with increasing
// sequences.
type holderIDs struct {
	mu     sync.Mutex
	worker int64 // -1: none (lost)
	seq    int64
}

func (h *holderIDs) set(worker int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.worker = worker
}

func (h *holderIDs) Holds() (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.worker, h.worker >= 0
}

func (h *holderIDs) Layout() snowflake.Layout { return snowflake.LeafLayout() }

func (h *holderIDs) Fill(_ context.Context, dst []int64) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.worker < 0 {
		return 0, fmt.Errorf("%w: lost", snowflake.ErrNotServing)
	}
	l := snowflake.LeafLayout()
	for i := range dst {
		h.seq++
		id, err := l.Compose(t0Snowflake.Add(time.Duration(h.seq/4096)*time.Millisecond), h.worker, h.seq%4096)
		if err != nil {
			return i, err
		}
		dst[i] = id
	}
	return len(dst), nil
}

func (h *holderIDs) Next(ctx context.Context, dst []int64) error {
	_, err := h.Fill(ctx, dst)
	return err
}

var t0Snowflake = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestSnowflakeLostWorkerEmptiesRing (fencing): once the Source
// lost the claim of worker w, no id of w still in the ring is taken: not
// while it holds no worker, not after it registered another one.
func TestSnowflakeLostWorkerEmptiesRing(t *testing.T) {
	h := &holderIDs{worker: 1}
	s := newSnowflake(t, producer.SnowflakeConfig{IDs: h, Size: 1024, MaxAge: time.Hour})
	waitFull(t, s)
	dst := make([]int64, 64)
	if n := s.Try(dst); n != 64 {
		t.Fatalf("Try before the loss = %d, want 64", n)
	}
	l := snowflake.LeafLayout()
	check := func(when string, ids []int64) {
		t.Helper()
		for _, id := range ids {
			if w := l.Decompose(id).Worker; w == 1 {
				t.Fatalf("%s: took id %d of worker 1, whose claim was lost", when, id)
			}
		}
	}

	h.set(-1) // the claim is lost; the ring is full of worker 1's ids
	if n := s.Try(dst); n != 0 {
		check("while no worker is held", dst[:n])
		t.Fatalf("Try while no worker is held = %d ids", n)
	}
	if err := s.Next(context.Background(), dst[:1]); err == nil {
		check("Next while no worker is held", dst[:1])
		t.Fatal("Next while no worker is held: no error")
	}

	h.set(2) // registered again, as worker 2
	got := 0
	waitUntil(t, "ids of worker 2", func() bool {
		n := s.Try(dst)
		check("after registering worker 2", dst[:n])
		got += n
		return got > 0
	})
	for range 40 {
		n := s.Try(dst)
		check("after registering worker 2", dst[:n])
	}
	if st := s.Stats(); st.LostWorker == 0 {
		t.Errorf("Stats.LostWorker = 0 after a lost worker's ids were thrown away")
	}
}

// ttlStatic is a Static registry with a claim TTL, so a Source fences it.
type ttlStatic struct{ *snowflake.Static }

func (ttlStatic) ClaimTTL() time.Duration { return time.Second }

// settable is a settable Monotonic clock.
type settable struct {
	mu sync.Mutex
	t  time.Time
}

func (c *settable) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *settable) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestSnowflakeRingFencedAfterFreeze: a process wakes from a freeze longer
// than its registry's claim TTL with a full ring; the first take, before
// any goroutine of the Source has run, gets no id of the worker whose
// claim lapsed (another process may hold it by now).
func TestSnowflakeRingFencedAfterFreeze(t *testing.T) {
	layout := snowflake.LeafLayout()
	mono := &settable{t: time.Now()}
	opened := false
	src, err := snowflake.StartSource(context.Background(), snowflake.SourceConfig{
		Open: func(context.Context) (snowflake.Registry, error) {
			if opened {
				return nil, errors.New("test: no second registration")
			}
			opened = true
			st, err := snowflake.NewStatic(layout, 5)
			return ttlStatic{st}, err
		},
		Layout:     layout,
		LeaseAhead: time.Minute, // the wall-clock lease outlasts the test
		// No borrowing ahead: a worker with no lease on record then has
		// no stopped holder's ids to wait out.
		BorrowAhead: -1,
		Monotonic:   clock.WithNow(nil, mono.Now),
		Logger:      quiet(),
		NewWorker:   func(context.Context, int64) bool { return true }, // no other process
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	s := newSnowflake(t, producer.SnowflakeConfig{IDs: src, Size: 1024, MaxAge: time.Hour})
	waitFull(t, s)

	mono.add(2 * time.Second) // SIGSTOP for 2s, then SIGCONT
	dst := make([]int64, 64)
	if n := s.Try(dst); n != 0 {
		t.Fatalf("Try after the claim lapsed = %d ids (worker %d)", n, layout.Decompose(dst[0]).Worker)
	}
	if err := s.Next(context.Background(), dst[:1]); !errors.Is(err, snowflake.ErrClaimLapsed) {
		t.Fatalf("Next after the claim lapsed = %v, want ErrClaimLapsed", err)
	}
}

// The count of ids handed out is what callers got, not what the ring's own
// upkeep took (the status page showed 8.96M "taken" after 7 ids were
// issued: dropping stale ids takes from the ring too).
func TestSnowflakeServedCountsHandedOut(t *testing.T) {
	ids := &fakeIDs{}
	s := newSnowflake(t, producer.SnowflakeConfig{IDs: ids, Size: 1024, DirectOver: 64, MaxAge: 20 * time.Millisecond})
	waitFull(t, s)
	dst := make([]int64, 1)
	for range 7 {
		if err := s.Next(context.Background(), dst); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, "the ring freshened", 5*time.Second, func() bool { return s.Stats().Dropped > 0 })
	st := s.Stats()
	if st.Served != 7 {
		t.Fatalf("Served = %d after 7 ids, want 7 (ring takes %d)", st.Served, st.Ring.Takes)
	}
	big := make([]int64, 100) // over DirectOver: straight from the engine
	if err := s.Next(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Served != 107 {
		t.Fatalf("Served = %d after 107 ids", st.Served)
	}
}
