package ringbuf

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// refillGoroutines counts the goroutines of all rings' refill loops,
// from a dump of every goroutine's stack.
func refillGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "ringbuf.(*Ring[...]).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitRefillGoroutines polls refillGoroutines until it equals want and
// returns the last count. A goroutine leaves the dump shortly after its
// function returns, hence the polling.
func waitRefillGoroutines(tb testing.TB, want int) int {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := refillGoroutines()
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(time.Millisecond)
	}
}

// waitGoroutines polls runtime.NumGoroutine until it is at most want and
// returns the last count.
func waitGoroutines(tb testing.TB, want int) int {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(time.Millisecond)
	}
}

// retry returns nil, after yielding, if err is ErrEmpty and ctx is live:
// the caller should try again. Otherwise it returns the error to report.
func retry(ctx context.Context, err error) error {
	if !errors.Is(err, ErrEmpty) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("still empty: %w", ctx.Err())
	}
	runtime.Gosched()
	return nil
}

// TestManyProducersConsumers: 4 producers (Put and PutN, retrying what the
// full ring refuses) and 4 consumers (Take and TakeN) move 200k unique
// values through a small ring; each value must come out exactly once.
func TestManyProducersConsumers(t *testing.T) {
	const (
		producers = 4
		consumers = 4
		total     = 200_000
	)
	r := newRing(t, Config[int]{Size: 64})
	// A broken ring would make the retry loops spin: bound them.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	errs := make(chan error, producers+consumers)
	var failedPuts atomic.Uint64
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			var vs []int
			for v := p; v < total; v += producers {
				vs = append(vs, v)
			}
			for len(vs) > 0 {
				if p%2 == 0 {
					if r.Put(vs[0]) {
						vs = vs[1:]
						continue
					}
					failedPuts.Add(1)
				} else {
					chunk := vs[:min(len(vs), 1+len(vs)%7)]
					n := r.PutN(chunk)
					vs = vs[n:]
					failedPuts.Add(uint64(len(chunk) - n)) // the rest was rejected
					if n > 0 {
						continue
					}
				}
				if ctx.Err() != nil {
					errs <- fmt.Errorf("producer %d: %d values not put: %w", p, len(vs), ctx.Err())
					return
				}
				runtime.Gosched()
			}
		})
	}
	var taken atomic.Int64
	got := make([][]int, consumers)
	for c := range consumers {
		wg.Go(func() {
			dst := make([]int, 5)
			for taken.Load() < total {
				if c%2 == 0 {
					v, err := r.Take()
					if err != nil {
						if err := retry(ctx, err); err != nil {
							errs <- err
							return
						}
						continue
					}
					got[c] = append(got[c], v)
					taken.Add(1)
					continue
				}
				n, err := r.TakeN(dst)
				if err != nil {
					if err := retry(ctx, err); err != nil {
						errs <- err
						return
					}
					continue
				}
				got[c] = append(got[c], dst[:n]...)
				taken.Add(int64(n))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := make([]int, total)
	for c := range consumers {
		for _, v := range got[c] {
			seen[v]++
		}
	}
	for v, n := range seen {
		if n != 1 {
			t.Fatalf("value %d taken %d times", v, n)
		}
	}
	s := r.Stats()
	if s.Puts != total || s.Takes != total || r.Len() != 0 {
		t.Errorf("Stats = %+v, Len %d; want %d puts and takes, empty", s, r.Len(), total)
	}
	if s.RejectedPuts != failedPuts.Load() {
		t.Errorf("RejectedPuts = %d, producers saw %d refusals", s.RejectedPuts, failedPuts.Load())
	}
}

// TestConservation: producers do not retry; every value is either taken
// (by the consumers or by draining what is left after they stop) or passed
// to RejectedPut — exactly one of those, exactly once — and the counters
// agree: taken + left in ring == put.
func TestConservation(t *testing.T) {
	const (
		producers = 4
		consumers = 4
		total     = 100_000
	)
	state := make([]atomic.Int32, total) // +1 per take, +100 per rejection
	r := newRing(t, Config[int]{Size: 32, RejectedPut: func(v int) { state[v].Add(100) }})
	var prod, cons sync.WaitGroup
	for p := range producers {
		prod.Go(func() {
			buf := make([]int, 0, 8)
			for v := p; v < total; v += producers {
				if p%2 == 0 {
					r.Put(v)
					continue
				}
				buf = append(buf, v)
				if len(buf) == cap(buf) {
					r.PutN(buf)
					buf = buf[:0]
				}
			}
			r.PutN(buf)
		})
	}
	var stop atomic.Bool
	var takenByConsumers atomic.Uint64
	for c := range consumers {
		cons.Go(func() {
			dst := make([]int, 3)
			var n uint64
			for !stop.Load() {
				if c%2 == 0 {
					if v, err := r.Take(); err == nil {
						state[v].Add(1)
						n++
					}
					continue
				}
				k, _ := r.TakeN(dst)
				for _, v := range dst[:k] {
					state[v].Add(1)
				}
				n += uint64(k)
			}
			takenByConsumers.Add(n)
		})
	}
	prod.Wait()
	stop.Store(true)
	cons.Wait()

	left := r.Len()
	dst := make([]int, r.Cap())
	n, _ := r.TakeN(dst)
	if n != left {
		t.Fatalf("drained %d values, Len said %d", n, left)
	}
	for _, v := range dst[:n] {
		state[v].Add(1)
	}
	var rejected uint64
	for v := range state {
		switch state[v].Load() {
		case 1:
		case 100:
			rejected++
		default:
			t.Fatalf("value %d: state %d, want taken once (1) or rejected once (100)", v, state[v].Load())
		}
	}
	s := r.Stats()
	if s.Puts != takenByConsumers.Load()+uint64(left) {
		t.Errorf("Puts = %d, want taken %d + left %d", s.Puts, takenByConsumers.Load(), left)
	}
	if s.Puts+s.RejectedPuts != total || s.RejectedPuts != rejected {
		t.Errorf("Stats = %+v, want %d rejected and puts + rejected = %d", s, rejected, total)
	}
	t.Logf("%d taken by consumers, %d left, %d rejected", takenByConsumers.Load(), left, rejected)
}

// TestRefillConcurrentConsumers: with a counter Fill and consumers taking
// concurrently, the values taken are exactly 1..N, each once, and every
// consumer sees them increasing.
func TestRefillConcurrentConsumers(t *testing.T) {
	const (
		consumers = 4
		total     = 100_000
	)
	r := newRing(t, Config[uint64]{Size: 256, FillChunk: 64, Fill: counterFill()})
	r.Start()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	errs := make(chan error, consumers)
	var taken atomic.Int64
	got := make([][]uint64, consumers)
	var wg sync.WaitGroup
	for c := range consumers {
		wg.Go(func() {
			dst := make([]uint64, 4)
			for taken.Load() < total {
				n := 1
				var err error
				if c%2 == 0 {
					dst[0], err = r.Take()
				} else {
					n, err = r.TakeN(dst)
				}
				if err != nil {
					if err := retry(ctx, err); err != nil {
						errs <- err
						return
					}
					continue
				}
				got[c] = append(got[c], dst[:n]...)
				taken.Add(int64(n))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var all []uint64
	for c, vs := range got {
		if !slices.IsSorted(vs) {
			t.Errorf("consumer %d saw values out of order", c)
		}
		all = append(all, vs...)
	}
	slices.Sort(all)
	for i, v := range all {
		if v != uint64(i+1) {
			t.Fatalf("sorted values taken: [%d] = %d, want %d (duplicate or gap)", i, v, i+1)
		}
	}
	s := r.Stats()
	if s.RejectedPuts != 0 {
		t.Errorf("RejectedPuts = %d, want 0 with the refill as the only producer", s.RejectedPuts)
	}
	if s.Puts < total || s.Takes != uint64(len(all)) {
		t.Errorf("Stats = %+v, want at least %d puts and %d takes", s, total, len(all))
	}
}

// TestNoGoroutineLeak: after Close, no goroutine of any ring is left,
// whatever state the refill was in.
func TestNoGoroutineLeak(t *testing.T) {
	if n := waitRefillGoroutines(t, 0); n != 0 {
		t.Fatalf("%d refill goroutines left by earlier tests", n)
	}
	before := runtime.NumGoroutine()
	rings := make([]*Ring[uint64], 20)
	for i := range rings {
		r, err := New(Config[uint64]{Size: 64, RefillInterval: time.Millisecond, Fill: counterFill()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		r.Start()
		for range i * 10 {
			_, _ = r.Take()
		}
		rings[i] = r
	}
	if n := waitRefillGoroutines(t, len(rings)); n != len(rings) {
		t.Fatalf("%d refill goroutines running, want %d", n, len(rings))
	}
	for _, r := range rings {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := waitRefillGoroutines(t, 0); n != 0 {
		t.Errorf("%d refill goroutines after Close", n)
	}
	if n := waitGoroutines(t, before); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}
