package snowflake_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/snowflake"
)

// newSmallGen is newGen on smallLayout (4 ids per ms), whose Sleep fails
// the test: Borrow never waits.
func newSmallGen(tb testing.TB, edit func(*snowflake.Config)) (*snowflake.Generator, *fakeClock) {
	tb.Helper()
	return newGen(tb, func(c *snowflake.Config) {
		c.Layout = smallLayout
		c.Sleep = func(context.Context, time.Duration) error {
			tb.Error("Sleep called")
			return nil
		}
		if edit != nil {
			edit(c)
		}
	})
}

// borrow calls Borrow and fails the test on error.
func borrow(tb testing.TB, g *snowflake.Generator, n int, limit time.Time) []int64 {
	tb.Helper()
	dst := make([]int64, n)
	k, err := g.Borrow(context.Background(), dst, limit)
	if err != nil {
		tb.Fatalf("Borrow(%d, %v): %v", n, limit, err)
	}
	return dst[:k]
}

// ms0 is the start of t0's tick.
var ms0 = t0.Truncate(time.Millisecond)

func TestBorrow(t *testing.T) {
	g, clock := newSmallGen(t, nil)
	if last := g.Last(); !last.IsZero() {
		t.Errorf("Last of a new generator = %v, want zero", last)
	}
	// The tick of the clock, then the ticks after it up to limit's.
	ids := borrow(t, g, 100, t0.Add(3*time.Millisecond))
	if len(ids) != 16 {
		t.Fatalf("Borrow up to 3ms ahead = %d ids, want 16", len(ids))
	}
	for i, id := range ids {
		d := smallLayout.Decompose(id)
		want := ms0.Add(time.Duration(i/4) * time.Millisecond)
		if !d.Time.Equal(want) || d.Sequence != int64(i%4) || d.Worker != 5 {
			t.Fatalf("id %d = %+v, want time %v sequence %d worker 5", i, d, want, i%4)
		}
	}
	if want := ms0.Add(4 * time.Millisecond); !g.Last().Equal(want) {
		t.Errorf("Last = %v, want %v", g.Last(), want)
	}
	// Used up: 0 and no error, without waiting.
	if n, err := g.Borrow(context.Background(), make([]int64, 4), t0.Add(3*time.Millisecond)); n != 0 || err != nil {
		t.Fatalf("Borrow used up = %d, %v, want 0, nil", n, err)
	}
	// A limit before the clock gives nothing either.
	clock.Set(t0.Add(10 * time.Millisecond))
	if n, err := g.Borrow(context.Background(), make([]int64, 4), t0.Add(5*time.Millisecond)); n != 0 || err != nil {
		t.Fatalf("Borrow with limit behind the clock = %d, %v, want 0, nil", n, err)
	}
	// Ticks the clock has passed are skipped, not borrowed back.
	ids = borrow(t, g, 2, t0.Add(10*time.Millisecond))
	ids = append(ids, borrow(t, g, 3, t0.Add(10*time.Millisecond))...)
	for i, id := range ids[:4] {
		if d := smallLayout.Decompose(id); !d.Time.Equal(ms0.Add(10*time.Millisecond)) || d.Sequence != int64(i) {
			t.Errorf("id %d = %+v, want sequence %d of tick +10ms", i, d, i)
		}
	}
	if len(ids) != 4 {
		t.Errorf("two Borrows within one tick = %d ids, want 4", len(ids))
	}
}

func TestBorrowClockBehind(t *testing.T) {
	g, clock := newSmallGen(t, nil)
	first := borrow(t, g, 6, t0.Add(time.Second)) // tick 0, half of tick 1
	clock.Set(t0.Add(-time.Second))
	// Goes on after the last id, up to limit, whatever the clock says.
	ids := borrow(t, g, 100, t0.Add(2*time.Millisecond))
	if len(ids) != 6 {
		t.Fatalf("Borrow with the clock behind = %d ids, want 6 (rest of tick 1, tick 2)", len(ids))
	}
	if ids[0] <= first[len(first)-1] {
		t.Errorf("id %d after the clock went back, not above %d", ids[0], first[len(first)-1])
	}
	if d := smallLayout.Decompose(ids[5]); !d.Time.Equal(ms0.Add(2 * time.Millisecond)) {
		t.Errorf("last id %+v, want tick +2ms", d)
	}

	// LastIssued: nothing at or before its tick.
	g, _ = newSmallGen(t, func(c *snowflake.Config) { c.LastIssued = t0.Add(5 * time.Millisecond) })
	if want := ms0.Add(6 * time.Millisecond); !g.Last().Equal(want) {
		t.Errorf("Last with LastIssued +5ms = %v, want %v", g.Last(), want)
	}
	if n, err := g.Borrow(context.Background(), make([]int64, 4), t0.Add(5*time.Millisecond)); n != 0 || err != nil {
		t.Fatalf("Borrow up to LastIssued = %d, %v, want 0, nil", n, err)
	}
	ids = borrow(t, g, 100, t0.Add(6*time.Millisecond))
	if len(ids) != 4 || !smallLayout.Decompose(ids[0]).Time.Equal(ms0.Add(6*time.Millisecond)) {
		t.Errorf("Borrow past LastIssued = %v, want the 4 ids of tick +6ms", ids)
	}
}

func TestBorrowErrors(t *testing.T) {
	t.Run("before epoch", func(t *testing.T) {
		g, clock := newSmallGen(t, nil)
		clock.Set(g.Layout().Epoch.Add(-time.Millisecond))
		if _, err := g.Borrow(context.Background(), make([]int64, 4), t0); !errors.Is(err, snowflake.ErrOutOfRange) {
			t.Errorf("Borrow before the epoch = %v, want ErrOutOfRange", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		epoch := t0.Truncate(time.Second)
		g, clock := newSmallGen(t, func(c *snowflake.Config) {
			c.Layout = snowflake.Layout{TimeUnit: time.Second, Epoch: epoch, TimeBits: 2, WorkerBits: 59, SequenceBits: 2}
		})
		clock.Set(epoch.Add(3 * time.Second)) // the last tick
		if ids := borrow(t, g, 100, epoch.Add(time.Hour)); len(ids) != 4 {
			t.Fatalf("Borrow in the last tick = %d ids, want 4", len(ids))
		}
		if n, err := g.Borrow(context.Background(), make([]int64, 4), epoch.Add(time.Hour)); !errors.Is(err, snowflake.ErrExpired) || n != 0 {
			t.Errorf("Borrow past the last tick = %d, %v, want ErrExpired", n, err)
		}
		clock.Set(epoch.Add(5 * time.Second))
		if _, err := g.Borrow(context.Background(), make([]int64, 4), epoch.Add(time.Hour)); !errors.Is(err, snowflake.ErrExpired) {
			t.Errorf("Borrow after expiry = %v, want ErrExpired", err)
		}
	})
	t.Run("context ends waiting for the lock", func(t *testing.T) {
		inLease, release := make(chan struct{}), make(chan struct{})
		g, _ := newSmallGen(t, func(c *snowflake.Config) {
			c.Lease = func(time.Time) error { // called holding the lock
				close(inLease)
				<-release
				return nil
			}
		})
		done := make(chan error, 1)
		go func() {
			_, err := g.Next(context.Background())
			done <- err
		}()
		<-inLease
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		n, err := g.Borrow(ctx, make([]int64, 4), t0.Add(time.Second))
		close(release)
		if !errors.Is(err, context.Canceled) || n != 0 {
			t.Errorf("Borrow with the lock held and ctx canceled = %d, %v, want Canceled", n, err)
		}
		if err := <-done; err != nil {
			t.Errorf("Next: %v", err)
		}
	})
}

// TestBorrowCountsAsLease: Borrow's caller leased up to limit, so NextN
// does not lease again for those ticks.
func TestBorrowCountsAsLease(t *testing.T) {
	var leases []time.Time
	g, clock := newGen(t, func(c *snowflake.Config) {
		c.Layout = smallLayout
		c.LeaseAhead = 100 * time.Millisecond
		c.Lease = func(until time.Time) error {
			leases = append(leases, until)
			return nil
		}
	})
	borrow(t, g, 1, t0.Add(50*time.Millisecond))
	clock.Set(t0.Add(50 * time.Millisecond))
	next(t, g)
	if len(leases) != 0 {
		t.Fatalf("NextN within the borrowed limit leased %v", leases)
	}
	clock.Set(t0.Add(51 * time.Millisecond))
	next(t, g)
	if want := t0.Add(151 * time.Millisecond); len(leases) != 1 || !leases[0].Equal(want) {
		t.Errorf("leases = %v, want [%v]", leases, want)
	}
}

func TestLast(t *testing.T) {
	g, clock := newGen(t, nil)
	next(t, g)
	if want := ms0.Add(time.Millisecond); !g.Last().Equal(want) {
		t.Errorf("Last = %v, want %v", g.Last(), want)
	}
	clock.Set(t0.Add(-time.Hour)) // Last is what was used, not the clock
	if want := ms0.Add(time.Millisecond); !g.Last().Equal(want) {
		t.Errorf("Last with the clock behind = %v, want %v", g.Last(), want)
	}
	// A second layout: the start of the next second, in UTC.
	g, _ = newGen(t, func(c *snowflake.Config) { c.Layout = snowflake.UidGenLayout(t0.Truncate(time.Second)) })
	next(t, g)
	if want := t0.Truncate(time.Second).Add(time.Second); !g.Last().Equal(want) || g.Last().Location() != time.UTC {
		t.Errorf("Last on seconds = %v, want %v UTC", g.Last(), want)
	}
}

// TestBorrowConcurrent: Borrow, NextN and Last from several goroutines with
// the clock moving never issue an id twice. NextN counts ticks borrowed
// ahead of the clock as used, so it may find the clock behind them
// (ErrClockBackwards, nothing issued).
func TestBorrowConcurrent(t *testing.T) {
	g, clock := newGen(t, func(c *snowflake.Config) { c.Layout = smallLayout })
	const goroutines, rounds = 6, 300
	results := make([][]int64, goroutines)
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for w := range goroutines {
		wg.Go(func() {
			dst := make([]int64, 1+w)
			for i := range rounds {
				var n int
				var err error
				if (i+w)%3 == 0 {
					n, err = g.NextN(context.Background(), dst)
				} else {
					n, err = g.Borrow(context.Background(), dst, clock.Now().Add(2*time.Millisecond))
				}
				if err != nil && !errors.Is(err, snowflake.ErrClockBackwards) {
					errs <- err
					return
				}
				if n > 0 && g.Last().Before(smallLayout.Decompose(dst[n-1]).Time) {
					errs <- errors.New("Last before an id issued")
					return
				}
				results[w] = append(results[w], dst[:n]...)
				if i%10 == 0 {
					clock.Sleep(context.Background(), 300*time.Microsecond)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := newIssued(t)
	for w, ids := range results {
		checkIDs(t, ids, 5, t0, clock.Now().Add(2*time.Millisecond))
		seen.add("goroutine "+string(rune('0'+w)), ids...)
	}
}
