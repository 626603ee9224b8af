package snowflake_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/snowflake"
)

// t0 is the fake clock's start: 2020-01-01T00:00:00Z plus half a millisecond.
var t0 = time.Date(2020, 1, 1, 0, 0, 0, 500_000, time.UTC)

// fakeClock is a settable clock whose Sleep moves it forward instead of
// waiting.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Clock is c as a clock.Clock: its readings are c's, its timers real.
func (c *fakeClock) Clock() clock.Clock { return clockOf(c.Now) }

// clockOf is a clock.Clock reading now, with real timers.
func clockOf(now func() time.Time) clock.Clock { return clock.WithNow(nil, now) }

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.sleeps = append(c.sleeps, d)
	return nil
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sleeps)
}

// newGen returns a generator on the Leaf layout with worker 5, no random
// start and a fake clock at t0, after edit has changed its config.
func newGen(tb testing.TB, edit func(*snowflake.Config)) (*snowflake.Generator, *fakeClock) {
	tb.Helper()
	clock := &fakeClock{t: t0}
	cfg := snowflake.Config{Worker: 5, Clock: clock.Clock(), Sleep: clock.Sleep, RandomStart: -1}
	if edit != nil {
		edit(&cfg)
	}
	g, err := snowflake.New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return g, clock
}

func next(tb testing.TB, g *snowflake.Generator) snowflake.ID {
	tb.Helper()
	id, err := g.Next(context.Background())
	if err != nil {
		tb.Fatalf("Next: %v", err)
	}
	return g.Layout().Decompose(id)
}

func TestNewInvalid(t *testing.T) {
	tests := []struct {
		name string
		cfg  snowflake.Config
		want error
	}{
		{name: "layout", cfg: snowflake.Config{Layout: snowflake.Layout{TimeBits: 1}}, want: snowflake.ErrInvalidLayout},
		{name: "worker negative", cfg: snowflake.Config{Worker: -1}, want: snowflake.ErrInvalidConfig},
		{name: "worker too big", cfg: snowflake.Config{Worker: 1024}, want: snowflake.ErrInvalidConfig},
		{name: "random start too big", cfg: snowflake.Config{RandomStart: 4096}, want: snowflake.ErrInvalidConfig},
		{name: "lease ahead negative", cfg: snowflake.Config{LeaseAhead: -time.Second}, want: snowflake.ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := snowflake.New(tt.cfg); !errors.Is(err, tt.want) {
				t.Errorf("New = %v, want %v", err, tt.want)
			}
		})
	}
	g, err := snowflake.New(snowflake.Config{Worker: 1023})
	if err != nil {
		t.Fatalf("New(defaults): %v", err)
	}
	if g.Worker() != 1023 || g.Layout() != snowflake.LeafLayout() {
		t.Errorf("Worker, Layout = %d, %v", g.Worker(), g.Layout())
	}
}

func TestSequenceWrapWaitsForNextTick(t *testing.T) {
	g, clock := newGen(t, nil)
	dst := make([]int64, 2*4096+10)
	n, err := g.NextN(context.Background(), dst)
	if err != nil || n != len(dst) {
		t.Fatalf("NextN = %d, %v", n, err)
	}
	l := g.Layout()
	for i, id := range dst {
		d := l.Decompose(id)
		wantTick := t0.UnixMilli() + int64(i/4096)
		if d.Timestamp != wantTick || d.Sequence != int64(i%4096) || d.Worker != 5 {
			t.Fatalf("id %d = %+v, want timestamp %d sequence %d worker 5", i, d, wantTick, i%4096)
		}
		if i > 0 && id <= dst[i-1] {
			t.Fatalf("id %d = %d not above %d", i, id, dst[i-1])
		}
	}
	// The first wait is to the next ms boundary, the second a whole ms.
	want := []time.Duration{500 * time.Microsecond, time.Millisecond}
	if got := clock.Sleeps(); !slices.Equal(got, want) {
		t.Errorf("sleeps = %v, want %v", got, want)
	}
}

func TestRandomStart(t *testing.T) {
	g, clock := newGen(t, func(c *snowflake.Config) { c.RandomStart = 10 })
	seen := map[int64]bool{}
	for i := range 200 {
		clock.Set(t0.Add(time.Duration(i) * time.Millisecond))
		d := next(t, g)
		if d.Sequence < 0 || d.Sequence >= 10 {
			t.Fatalf("first sequence of a tick = %d, want [0,10)", d.Sequence)
		}
		seen[d.Sequence] = true
		if d2 := next(t, g); d2.Sequence != d.Sequence+1 || d2.Timestamp != d.Timestamp {
			t.Fatalf("second id of tick = %+v after %+v", d2, d)
		}
	}
	if len(seen) < 2 {
		t.Errorf("200 ticks all started at %v", seen)
	}

	// The default is 100, halved for small sequence fields.
	g, clock = newGen(t, func(c *snowflake.Config) {
		c.RandomStart = 0
		c.Layout = snowflake.Layout{TimeBits: 59, WorkerBits: 1, SequenceBits: 3}
		c.Worker = 1
	})
	for i := range 100 {
		clock.Set(t0.Add(time.Duration(i) * time.Millisecond))
		if d := next(t, g); d.Sequence >= 4 {
			t.Fatalf("first sequence = %d with 3 sequence bits, want < 4", d.Sequence)
		}
	}
}

func TestSmallBackwardsStepWaits(t *testing.T) {
	g, clock := newGen(t, nil)
	first := next(t, g)
	clock.Set(t0.Add(-2 * time.Millisecond))
	second := next(t, g)
	if second.Timestamp < first.Timestamp || (second.Timestamp == first.Timestamp && second.Sequence <= first.Sequence) {
		t.Errorf("after backwards step got %+v, before %+v", second, first)
	}
	// 1.5ms behind the start of the tick in use: waited twice that.
	if got, want := clock.Sleeps(), []time.Duration{3 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("sleeps = %v, want %v", got, want)
	}
}

func TestBackwardsRefused(t *testing.T) {
	t.Run("large step", func(t *testing.T) {
		g, clock := newGen(t, nil)
		next(t, g)
		clock.Set(t0.Add(-time.Second))
		id, err := g.Next(context.Background())
		if !errors.Is(err, snowflake.ErrClockBackwards) || id != 0 {
			t.Fatalf("Next = %d, %v, want ErrClockBackwards", id, err)
		}
		if len(clock.Sleeps()) != 0 {
			t.Errorf("slept %v for a large step", clock.Sleeps())
		}
		// Once the clock is back, ids flow again.
		clock.Set(t0.Add(time.Millisecond))
		next(t, g)
	})
	t.Run("still behind after the wait", func(t *testing.T) {
		var slept int
		g, clock := newGen(t, func(c *snowflake.Config) {
			c.Sleep = func(context.Context, time.Duration) error { slept++; return nil }
		})
		next(t, g)
		clock.Set(t0.Add(-time.Millisecond))
		dst := make([]int64, 3)
		n, err := g.NextN(context.Background(), dst)
		if !errors.Is(err, snowflake.ErrClockBackwards) || n != 0 || slept != 1 {
			t.Fatalf("NextN = %d, %v after %d sleeps, want ErrClockBackwards after 1", n, err, slept)
		}
	})
}

func TestLastIssued(t *testing.T) {
	last := t0.Add(10 * time.Second)
	g, clock := newGen(t, func(c *snowflake.Config) { c.LastIssued = last })
	for range 3 {
		if _, err := g.Next(context.Background()); !errors.Is(err, snowflake.ErrClockBackwards) {
			t.Fatalf("Next before LastIssued = %v, want ErrClockBackwards", err)
		}
	}
	clock.Set(last)
	d := next(t, g) // same tick as LastIssued: waits for the next one
	if !d.Time.After(last) {
		t.Errorf("id time %v not after LastIssued %v", d.Time, last)
	}
}

func TestLease(t *testing.T) {
	var leases []time.Time
	var fail error
	g, clock := newGen(t, func(c *snowflake.Config) {
		c.Lease = func(until time.Time) error {
			if fail != nil {
				return fail
			}
			leases = append(leases, until)
			return nil
		}
	})
	next(t, g)
	if want := []time.Time{t0.Add(3 * time.Second)}; !slices.Equal(leases, want) {
		t.Fatalf("leases = %v, want %v", leases, want)
	}
	clock.Set(t0.Add(3 * time.Second)) // still within the lease's last tick
	next(t, g)
	if len(leases) != 1 {
		t.Fatalf("leased again within the lease: %v", leases)
	}

	fail = errors.New("zk down")
	clock.Set(t0.Add(3*time.Second + time.Millisecond))
	id, err := g.Next(context.Background())
	if !errors.Is(err, snowflake.ErrLeaseFailed) || !errors.Is(err, fail) || id != 0 {
		t.Fatalf("Next = %d, %v, want ErrLeaseFailed wrapping %v", id, err, fail)
	}

	fail = nil
	d := next(t, g)
	if want := t0.Add(3*time.Second + time.Millisecond); d.Timestamp != want.UnixMilli() {
		t.Errorf("id after lease renewed at %v, want %v", d.Time, want)
	}
	if len(leases) != 2 || !leases[1].Equal(t0.Add(6*time.Second+time.Millisecond)) {
		t.Errorf("leases = %v", leases)
	}
}

func TestOutOfTime(t *testing.T) {
	g, clock := newGen(t, nil)
	clock.Set(g.Layout().Expires())
	if _, err := g.Next(context.Background()); !errors.Is(err, snowflake.ErrExpired) {
		t.Errorf("Next at expiry = %v, want ErrExpired", err)
	}
	g, clock = newGen(t, nil)
	clock.Set(g.Layout().Epoch.Add(-time.Millisecond))
	if _, err := g.Next(context.Background()); !errors.Is(err, snowflake.ErrOutOfRange) {
		t.Errorf("Next before epoch = %v, want ErrOutOfRange", err)
	}
}

func TestContextEnds(t *testing.T) {
	g, _ := newGen(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dst := make([]int64, 4097)
	if n, err := g.NextN(ctx, dst); !errors.Is(err, context.Canceled) || n != 0 {
		t.Errorf("NextN with canceled ctx = %d, %v", n, err)
	}

	// Canceled while waiting for the next tick: the ids of the first tick
	// are returned with the error.
	ctx, cancel = context.WithCancel(context.Background())
	g, _ = newGen(t, func(c *snowflake.Config) {
		c.Sleep = func(ctx context.Context, _ time.Duration) error {
			cancel()
			return ctx.Err()
		}
	})
	if n, err := g.NextN(ctx, dst); !errors.Is(err, context.Canceled) || n != 4096 {
		t.Errorf("NextN canceled in wait = %d, %v, want 4096, Canceled", n, err)
	}
}

func TestConcurrentUnique(t *testing.T) {
	g, _ := newGen(t, func(c *snowflake.Config) { c.RandomStart = 0 })
	const workers, rounds = 8, 300
	results := make([][]int64, workers)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var mine []int64
			batch := make([]int64, 1+w*37)
			for range rounds {
				id, err := g.Next(context.Background())
				if err != nil {
					errs <- err
					return
				}
				mine = append(mine, id)
				n, err := g.NextN(context.Background(), batch)
				if err != nil {
					errs <- err
					return
				}
				mine = append(mine, batch[:n]...)
			}
			results[w] = mine
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("generator: %v", err)
	}
	seen := map[int64]int{}
	for w, ids := range results {
		for i, id := range ids {
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("goroutine %d: id %d = %d not above %d", w, i, id, ids[i-1])
			}
			if prev, dup := seen[id]; dup {
				t.Fatalf("id %d issued to goroutines %d and %d", id, prev, w)
			}
			seen[id] = w
		}
	}
	if want := workers * rounds; len(seen) < want {
		t.Errorf("%d ids, want at least %d", len(seen), want)
	}
}
