package ringbuf

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// counterFill returns a FillFunc producing 1, 2, 3, ...
func counterFill() FillFunc[uint64] {
	var next uint64
	return func(_ context.Context, dst []uint64) (int, error) {
		for i := range dst {
			next++
			dst[i] = next
		}
		return len(dst), nil
	}
}

// startedRing returns a started ring of cfg, filled once, closed at cleanup.
func startedRing(tb testing.TB, cfg Config[uint64]) *Ring[uint64] {
	tb.Helper()
	r := newRing(tb, cfg)
	r.Start()
	waitFor(tb, "initial fill", func() bool { return r.Stats().Refills >= 1 })
	return r
}

// BenchmarkTake measures Take by b.RunParallel consumers with one refill
// goroutine producing through Fill. A take that finds the ring empty yields
// and retries, so ns/op is the time per value actually taken; empty/op
// reports how often the consumers outran the refill.
func BenchmarkTake(b *testing.B) {
	r := startedRing(b, Config[uint64]{Size: 1 << 16, Fill: counterFill()})
	var empties atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var empty uint64
		for pb.Next() {
			for {
				if _, err := r.Take(); err == nil {
					break
				}
				empty++
				runtime.Gosched()
			}
		}
		empties.Add(empty)
	})
	b.ReportMetric(float64(empties.Load())/float64(b.N), "empty/op")
}

// BenchmarkTakeOneConsumer is BenchmarkTake with a single consumer (the
// benchmark goroutine) while the refill goroutine runs on the other P: the
// CachedUidGenerator setting, one caller taking ids as the ring is refilled
// behind it.
func BenchmarkTakeOneConsumer(b *testing.B) {
	r := startedRing(b, Config[uint64]{Size: 1 << 16, Fill: counterFill()})
	var empty uint64
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for {
			if _, err := r.Take(); err == nil {
				break
			}
			empty++
			runtime.Gosched()
		}
	}
	b.ReportMetric(float64(empty)/float64(b.N), "empty/op")
}

// BenchmarkTakeN measures TakeN with a batch of 1000 against one refill
// goroutine. One op is one TakeN call; values/op is how many it got on
// average and ns/value the time per value.
func BenchmarkTakeN(b *testing.B) {
	const batch = 1000
	r := startedRing(b, Config[uint64]{Size: 1 << 16, Fill: counterFill()})
	var values atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]uint64, batch)
		var n uint64
		for pb.Next() {
			k, err := r.TakeN(dst)
			if err != nil {
				runtime.Gosched()
				continue
			}
			n += uint64(k)
		}
		values.Add(n)
	})
	b.StopTimer()
	v := float64(values.Load())
	b.ReportMetric(v/float64(b.N), "values/op")
	if v > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/v, "ns/value")
	}
}

// BenchmarkPutTake moves b.N values through a ring of 1024 with p
// producers calling Put and c consumers calling Take, both yielding and
// retrying when the ring is full or empty (no Fill).
func BenchmarkPutTake(b *testing.B) {
	for _, pc := range []struct{ p, c int }{{1, 1}, {2, 2}, {4, 4}, {1, 4}, {4, 1}} {
		b.Run(fmt.Sprintf("p%dc%d", pc.p, pc.c), func(b *testing.B) {
			r, err := New(Config[uint64]{Size: 1024})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var producers, consumers sync.WaitGroup
			var done atomic.Bool
			for p := range pc.p {
				producers.Go(func() {
					for i := p; i < b.N; i += pc.p {
						for !r.Put(uint64(i)) {
							runtime.Gosched()
						}
					}
				})
			}
			for range pc.c {
				consumers.Go(func() {
					for {
						// Load done before Take: once every Put has returned,
						// an empty ring means everything was taken.
						finished := done.Load()
						if _, err := r.Take(); err != nil {
							if finished {
								return
							}
							runtime.Gosched()
						}
					}
				})
			}
			producers.Wait()
			done.Store(true)
			consumers.Wait()
			b.StopTimer()
			if s := r.Stats(); s.Takes != uint64(b.N) {
				b.Fatalf("took %d values, want %d", s.Takes, b.N)
			}
		})
	}
}

// BenchmarkCASFloor is the reference for BenchmarkTake: one successful CAS
// per op on a single shared word from b.RunParallel goroutines, the least
// any take that claims its position on a shared head cursor pays. Take
// adds the slot release store and the refill's work on top.
func BenchmarkCASFloor(b *testing.B) {
	var head struct {
		_ [cacheLine]byte
		atomic.Uint64
		_ [cacheLine - 8]byte
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for {
				pos := head.Load()
				if head.CompareAndSwap(pos, pos+1) {
					break
				}
			}
		}
	})
}
