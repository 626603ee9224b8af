package ringbuf

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestNew(t *testing.T) {
	fill := func(context.Context, []int) (int, error) { return 0, nil }
	tests := []struct {
		name    string
		cfg     Config[int]
		wantErr string // substring; "" means no error
	}{
		{name: "zero value", cfg: Config[int]{}},
		{name: "all set", cfg: Config[int]{Size: 8, PaddingPercent: 100, RefillInterval: time.Second, Fill: fill, FillChunk: 8}},
		{name: "padding 1", cfg: Config[int]{PaddingPercent: 1}},
		{name: "negative size", cfg: Config[int]{Size: -1}, wantErr: "Size -1"},
		{name: "size too large", cfg: Config[int]{Size: MaxSize + 1}, wantErr: "Size"},
		{name: "negative padding", cfg: Config[int]{PaddingPercent: -1}, wantErr: "PaddingPercent -1"},
		{name: "padding over 100", cfg: Config[int]{PaddingPercent: 101}, wantErr: "PaddingPercent 101"},
		{name: "negative interval", cfg: Config[int]{RefillInterval: -time.Second, Fill: fill}, wantErr: "RefillInterval -1s"},
		{name: "interval without fill", cfg: Config[int]{RefillInterval: time.Second}, wantErr: "without Fill"},
		{name: "negative chunk", cfg: Config[int]{FillChunk: -2}, wantErr: "FillChunk -2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				_ = r.Close()
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New error = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("New error = %q, want it to mention %q", err, tt.wantErr)
			}
			if r != nil {
				t.Errorf("New returned a ring with an error")
			}
		})
	}
}

func TestNewSize(t *testing.T) {
	tests := []struct{ size, want int }{
		{0, DefaultSize}, {1, 2}, {2, 2}, {3, 4}, {5, 8}, {1000, 1024},
		{1024, 1024}, {1025, 2048}, {MaxSize - 1, MaxSize},
	}
	for _, tt := range tests {
		if got := roundSize(tt.size); got != tt.want {
			t.Errorf("roundSize(%d) = %d, want %d", tt.size, got, tt.want)
		}
	}
	// Through New too, for the sizes cheap to allocate.
	for _, tt := range tests[:8] {
		r := newRing(t, Config[byte]{Size: tt.size})
		if r.Cap() != tt.want {
			t.Errorf("New(Size %d).Cap() = %d, want %d", tt.size, r.Cap(), tt.want)
		}
	}
}

func TestNewDefaults(t *testing.T) {
	fill := func(context.Context, []int) (int, error) { return 0, nil }
	tests := []struct {
		name          string
		cfg           Config[int]
		wantThreshold uint64
		wantChunk     int
	}{
		{name: "no fill disables the threshold", cfg: Config[int]{Size: 16}},
		{name: "default padding", cfg: Config[int]{Size: 16, Fill: fill}, wantThreshold: 8, wantChunk: 16},
		{name: "padding 25", cfg: Config[int]{Size: 16, PaddingPercent: 25, Fill: fill}, wantThreshold: 4, wantChunk: 16},
		{name: "padding 100", cfg: Config[int]{Size: 16, PaddingPercent: 100, Fill: fill}, wantThreshold: 16, wantChunk: 16},
		{name: "threshold at least 1", cfg: Config[int]{Size: 16, PaddingPercent: 1, Fill: fill}, wantThreshold: 1, wantChunk: 16},
		{name: "default chunk capped", cfg: Config[int]{Size: 8192, Fill: fill}, wantThreshold: 4096, wantChunk: 4096},
		{name: "chunk above size", cfg: Config[int]{Size: 16, FillChunk: 100, Fill: fill}, wantThreshold: 8, wantChunk: 16},
		{name: "chunk set", cfg: Config[int]{Size: 16, FillChunk: 5, Fill: fill}, wantThreshold: 8, wantChunk: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(t, tt.cfg)
			if r.threshold != tt.wantThreshold {
				t.Errorf("threshold = %d, want %d", r.threshold, tt.wantThreshold)
			}
			if len(r.buf) != tt.wantChunk {
				t.Errorf("fill chunk = %d, want %d", len(r.buf), tt.wantChunk)
			}
		})
	}
}

func TestPutTakeFIFOAcrossLaps(t *testing.T) {
	r := newRing(t, Config[int]{Size: 4})
	next, want := 0, 0
	for lap := range 5 {
		for range 3 {
			if !r.Put(next) {
				t.Fatalf("lap %d: Put(%d) = false", lap, next)
			}
			next++
		}
		for range 3 {
			if v := mustTake(t, r); v != want {
				t.Fatalf("lap %d: Take = %d, want %d", lap, v, want)
			}
			want++
		}
	}
	if r.Len() != 0 {
		t.Errorf("Len = %d, want 0", r.Len())
	}
	if s := r.Stats(); s.Puts != 15 || s.Takes != 15 {
		t.Errorf("Stats = %+v, want 15 puts and takes", s)
	}
}

func TestPutFull(t *testing.T) {
	var rejected []int
	r := newRing(t, Config[int]{Size: 4, RejectedPut: func(v int) { rejected = append(rejected, v) }})
	for i := range 4 {
		if !r.Put(i) {
			t.Fatalf("Put(%d) = false on a ring of %d", i, r.Len())
		}
	}
	if r.Len() != 4 {
		t.Fatalf("Len = %d, want 4", r.Len())
	}
	if r.Put(99) {
		t.Fatal("Put on a full ring = true")
	}
	if !slices.Equal(rejected, []int{99}) {
		t.Errorf("RejectedPut got %v, want [99]", rejected)
	}
	if s := r.Stats(); s.RejectedPuts != 1 || s.Puts != 4 {
		t.Errorf("Stats = %+v, want 4 puts, 1 rejected", s)
	}
	// A take makes room again.
	mustTake(t, r)
	if !r.Put(100) {
		t.Error("Put after a take = false")
	}
}

func TestPutDefaultPolicyDrops(t *testing.T) {
	r := newRing(t, Config[int]{Size: 2})
	r.Put(1)
	r.Put(2)
	if r.Put(3) {
		t.Fatal("Put on a full ring = true")
	}
	if n := r.PutN([]int{4, 5}); n != 0 {
		t.Fatalf("PutN on a full ring = %d, want 0", n)
	}
	if got := r.Stats().RejectedPuts; got != 3 {
		t.Errorf("RejectedPuts = %d, want 3", got)
	}
}

func TestPutN(t *testing.T) {
	tests := []struct {
		name         string
		prefill      int
		vs           []int
		wantN        int
		wantRejected []int
	}{
		{name: "nil", vs: nil, wantN: 0},
		{name: "fits", vs: []int{1, 2, 3}, wantN: 3},
		{name: "exactly full", vs: []int{1, 2, 3, 4, 5, 6, 7, 8}, wantN: 8},
		{name: "prefix", prefill: 6, vs: []int{1, 2, 3, 4}, wantN: 2, wantRejected: []int{3, 4}},
		{name: "full", prefill: 8, vs: []int{1, 2}, wantN: 0, wantRejected: []int{1, 2}},
		{name: "longer than cap", vs: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, wantN: 8, wantRejected: []int{9, 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rejected []int
			r := newRing(t, Config[int]{Size: 8, RejectedPut: func(v int) { rejected = append(rejected, v) }})
			for i := range tt.prefill {
				r.Put(-1 - i)
			}
			if n := r.PutN(tt.vs); n != tt.wantN {
				t.Fatalf("PutN = %d, want %d", n, tt.wantN)
			}
			if !slices.Equal(rejected, tt.wantRejected) {
				t.Errorf("rejected %v, want %v", rejected, tt.wantRejected)
			}
			if got := r.Stats().RejectedPuts; got != uint64(len(tt.wantRejected)) {
				t.Errorf("RejectedPuts = %d, want %d", got, len(tt.wantRejected))
			}
			dst := make([]int, 16)
			n, _ := r.TakeN(dst)
			if n != tt.prefill+tt.wantN || !slices.Equal(dst[tt.prefill:n], tt.vs[:tt.wantN]) {
				t.Errorf("ring holds %v, want the prefix %v after %d prefilled", dst[:n], tt.vs[:tt.wantN], tt.prefill)
			}
		})
	}
}

func TestTakeEmpty(t *testing.T) {
	errCustom := errors.New("custom")
	tests := []struct {
		name    string
		policy  func() error
		wantErr error
	}{
		{name: "default", wantErr: ErrEmpty},
		{name: "custom error", policy: func() error { return errCustom }, wantErr: errCustom},
		{name: "nil from policy", policy: func() error { return nil }, wantErr: ErrEmpty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			cfg := Config[int]{Size: 4}
			if tt.policy != nil {
				cfg.RejectedTake = func() error { calls++; return tt.policy() }
			}
			r := newRing(t, cfg)
			if _, err := r.Take(); !errors.Is(err, tt.wantErr) {
				t.Errorf("Take error = %v, want %v", err, tt.wantErr)
			}
			if n, err := r.TakeN(make([]int, 3)); n != 0 || !errors.Is(err, tt.wantErr) {
				t.Errorf("TakeN = %d, %v, want 0, %v", n, err, tt.wantErr)
			}
			if tt.policy != nil && calls != 2 {
				t.Errorf("RejectedTake called %d times, want 2", calls)
			}
			if got := r.Stats().RejectedTakes; got != 2 {
				t.Errorf("RejectedTakes = %d, want 2", got)
			}
			// Emptied after having values: same again.
			r.Put(1)
			mustTake(t, r)
			if _, err := r.Take(); !errors.Is(err, tt.wantErr) {
				t.Errorf("Take after draining: error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestTakeN(t *testing.T) {
	tests := []struct {
		name    string
		put     int
		dst     int
		wantN   int
		wantErr error
	}{
		{name: "empty dst", put: 3, dst: 0, wantN: 0},
		{name: "empty ring", put: 0, dst: 4, wantN: 0, wantErr: ErrEmpty},
		{name: "fewer ready", put: 3, dst: 5, wantN: 3},
		{name: "more ready", put: 7, dst: 5, wantN: 5},
		{name: "exact", put: 5, dst: 5, wantN: 5},
		{name: "dst beyond cap", put: 8, dst: 20, wantN: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(t, Config[int]{Size: 8})
			// Start mid-ring so runs wrap around the end of the slots.
			for i := range 5 {
				r.Put(i)
				mustTake(t, r)
			}
			for i := range tt.put {
				r.Put(10 + i)
			}
			dst := make([]int, tt.dst)
			n, err := r.TakeN(dst)
			if n != tt.wantN || !errors.Is(err, tt.wantErr) {
				t.Fatalf("TakeN = %d, %v, want %d, %v", n, err, tt.wantN, tt.wantErr)
			}
			for i := range n {
				if dst[i] != 10+i {
					t.Fatalf("dst = %v, want 10, 11, ...", dst[:n])
				}
			}
			if r.Len() != tt.put-n {
				t.Errorf("Len = %d, want %d", r.Len(), tt.put-n)
			}
			if got, want := r.Stats().Takes, uint64(5+n); got != want {
				t.Errorf("Takes = %d, want %d", got, want)
			}
		})
	}
}

func TestTakeClearsSlot(t *testing.T) {
	r := newRing(t, Config[*int]{Size: 4})
	for range 2 {
		r.Put(new(int))
	}
	mustTake(t, r)
	r.TakeN(make([]*int, 4))
	for i := range r.slots {
		if r.slots[i].val != nil {
			t.Errorf("slot %d still references a taken value", i)
		}
	}
}

func TestClose(t *testing.T) {
	var rejected []int
	r := newRing(t, Config[int]{
		Size:         8,
		RejectedPut:  func(v int) { rejected = append(rejected, v) },
		RejectedTake: func() error { t.Error("RejectedTake called after Close"); return nil },
	})
	r.PutN([]int{1, 2, 3})
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r.Put(4) {
		t.Error("Put after Close = true")
	}
	if n := r.PutN([]int{5, 6}); n != 0 {
		t.Errorf("PutN after Close = %d, want 0", n)
	}
	if !slices.Equal(rejected, []int{4, 5, 6}) {
		t.Errorf("rejected %v, want [4 5 6]", rejected)
	}
	// What was put before Close drains.
	if v := mustTake(t, r); v != 1 {
		t.Errorf("Take after Close = %d, want 1", v)
	}
	dst := make([]int, 4)
	if n, err := r.TakeN(dst); n != 2 || err != nil || dst[0] != 2 || dst[1] != 3 {
		t.Errorf("TakeN after Close = %d %v %v, want [2 3]", n, dst[:n], err)
	}
	if _, err := r.Take(); !errors.Is(err, ErrClosed) {
		t.Errorf("Take on a closed, drained ring: %v, want ErrClosed", err)
	}
	if _, err := r.TakeN(dst); !errors.Is(err, ErrClosed) {
		t.Errorf("TakeN on a closed, drained ring: %v, want ErrClosed", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	s := r.Stats()
	if s.Puts != 3 || s.Takes != 3 || s.RejectedPuts != 3 || s.RejectedTakes != 2 {
		t.Errorf("Stats = %+v", s)
	}
}

// fillRecorder is a FillFunc producing 1, 2, 3, ... that records its calls.
type fillRecorder struct {
	mu    sync.Mutex
	next  int
	sizes []int
	// stop, if set, makes Fill return this instead of filling.
	stop func(dst []int) (int, error, bool)
}

func (f *fillRecorder) fill(_ context.Context, dst []int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sizes = append(f.sizes, len(dst))
	if f.stop != nil {
		if n, err, ok := f.stop(dst); ok {
			return n, err
		}
	}
	for i := range dst {
		f.next++
		dst[i] = f.next
	}
	return len(dst), nil
}

func (f *fillRecorder) calls() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sizes)
}

// goroutinesStarted returns how many goroutines f started: a goroutine is
// counted from its go statement, so a delta right after f is exact unless
// an unrelated goroutine exits meanwhile (which can only lower it).
func goroutinesStarted(f func()) int {
	before := runtime.NumGoroutine()
	f()
	return runtime.NumGoroutine() - before
}

func TestStartCloseIdempotent(t *testing.T) {
	f := &fillRecorder{}
	r := newRing(t, Config[int]{Size: 8, Fill: f.fill})
	if n := goroutinesStarted(func() { r.Start(); r.Start() }); n != 1 {
		t.Errorf("two Starts started %d goroutines, want 1", n)
	}
	waitFor(t, "initial fill", func() bool { return r.Stats().Refills == 1 })
	if n := goroutinesStarted(r.Start); n > 0 {
		t.Errorf("a third Start started %d goroutines", n)
	}
	if n := waitRefillGoroutines(t, 1); n != 1 {
		t.Errorf("%d refill goroutines after three Starts, want 1", n)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := r.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	if n := waitRefillGoroutines(t, 0); n != 0 {
		t.Errorf("%d refill goroutines after Close, want 0", n)
	}
	if n := goroutinesStarted(r.Start); n > 0 { // after Close: nothing
		t.Errorf("Start after Close started %d goroutines", n)
	}
	if got := len(f.calls()); got != 1 {
		t.Errorf("Fill called %d times, want 1", got)
	}
}

func TestStartWithoutFill(t *testing.T) {
	r := newRing(t, Config[int]{Size: 8})
	if n := goroutinesStarted(r.Start); n > 0 {
		t.Errorf("Start without Fill started %d goroutines", n)
	}
	r.Put(1)
	if v := mustTake(t, r); v != 1 {
		t.Errorf("Take = %d, want 1", v)
	}
}

func TestCloseWaitsForFill(t *testing.T) {
	entered := make(chan struct{})
	var returned atomic.Bool
	var onErr atomic.Int32
	r := newRing(t, Config[int]{
		Size: 8,
		Fill: func(ctx context.Context, dst []int) (int, error) {
			close(entered)
			<-ctx.Done()
			time.Sleep(10 * time.Millisecond) // a slow Fill must still be waited for
			returned.Store(true)
			return 0, ctx.Err()
		},
		OnFillError: func(error) { onErr.Add(1) },
	})
	r.Start()
	<-entered
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if !returned.Load() {
		t.Error("Close returned before Fill did")
	}
	if onErr.Load() != 0 || r.Stats().FillErrors != 0 {
		t.Error("the cancellation caused by Close was reported as a fill error")
	}
}

// The threshold tests leave the ring unstarted until the end, so that a
// trigger stays pending in r.kick where the test can see it.

func TestRefillThreshold(t *testing.T) {
	f := &fillRecorder{next: 100}
	r := newRing(t, Config[int]{Size: 16, PaddingPercent: 50, Fill: f.fill})
	for i := 1; i <= 16; i++ {
		r.Put(i)
	}
	// Down to the threshold (8 left): no trigger.
	for want := 1; want <= 8; want++ {
		if v := mustTake(t, r); v != want {
			t.Fatalf("Take = %d, want %d", v, want)
		}
		if len(r.kick) != 0 {
			t.Fatalf("refill triggered with %d of 16 left, threshold 8", r.Len())
		}
	}
	// Below it: triggered.
	if v := mustTake(t, r); v != 9 {
		t.Fatalf("Take = %d, want 9", v)
	}
	if len(r.kick) != 1 {
		t.Fatal("no refill triggered with 7 of 16 left, threshold 8")
	}
	// The refill tops the ring up, behind what is left.
	r.Start()
	waitFor(t, "refill", func() bool { return r.Stats().Refills == 1 })
	if got := f.calls(); !slices.Equal(got, []int{9}) {
		t.Errorf("Fill sizes %v, want [9]", got)
	}
	dst := make([]int, 20)
	n, _ := r.TakeN(dst)
	want := []int{10, 11, 12, 13, 14, 15, 16, 101, 102, 103, 104, 105, 106, 107, 108, 109}
	if !slices.Equal(dst[:n], want) {
		t.Errorf("ring holds %v, want %v", dst[:n], want)
	}
}

func TestRefillTriggeredByTakeN(t *testing.T) {
	r := newRing(t, Config[int]{Size: 16, PaddingPercent: 25, Fill: (&fillRecorder{}).fill})
	r.PutN(make([]int, 16))
	dst := make([]int, 12)
	if n, _ := r.TakeN(dst); n != 12 {
		t.Fatalf("TakeN = %d, want 12", n)
	}
	if len(r.kick) != 0 {
		t.Fatal("refill triggered with 4 of 16 left, threshold 4")
	}
	if n, _ := r.TakeN(dst[:1]); n != 1 {
		t.Fatalf("TakeN = %d, want 1", n)
	}
	if len(r.kick) != 1 {
		t.Fatal("no refill triggered with 3 of 16 left, threshold 4")
	}
}

func TestEmptyTakeTriggersRefill(t *testing.T) {
	r := newRing(t, Config[int]{Size: 16, Fill: (&fillRecorder{}).fill})
	if _, err := r.Take(); !errors.Is(err, ErrEmpty) {
		t.Fatalf("Take = %v, want ErrEmpty", err)
	}
	if len(r.kick) != 1 {
		t.Error("an empty take did not trigger a refill")
	}
	select {
	case <-r.kick:
	default:
	}
	if _, err := r.TakeN(make([]int, 2)); !errors.Is(err, ErrEmpty) {
		t.Fatalf("TakeN = %v, want ErrEmpty", err)
	}
	if len(r.kick) != 1 {
		t.Error("an empty TakeN did not trigger a refill")
	}
}

func TestNoFillNoTrigger(t *testing.T) {
	r := newRing(t, Config[int]{Size: 4})
	r.Put(1)
	mustTake(t, r)
	_, _ = r.Take()
	if len(r.kick) != 0 {
		t.Error("a ring without Fill triggered a refill")
	}
}

func TestTriggerRefillCoalesces(t *testing.T) {
	f := &fillRecorder{}
	r := newRing(t, Config[int]{Size: 8, Fill: f.fill})
	for range 100 {
		r.TriggerRefill()
	}
	if len(r.kick) != 1 {
		t.Fatalf("%d refills pending after 100 triggers, want 1", len(r.kick))
	}
	r.Start()
	waitFor(t, "fill", func() bool { return r.Stats().Refills == 1 })
	if got := f.calls(); !slices.Equal(got, []int{8}) {
		t.Errorf("Fill sizes %v, want one fill of 8", got)
	}
	// A trigger on a full ring runs a pass that needs no Fill.
	r.TriggerRefill()
	waitFor(t, "trigger consumed", func() bool { return len(r.kick) == 0 })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(f.calls()); got != 1 {
		t.Errorf("Fill called %d times for a full ring, want 1", got)
	}
}

func TestRefillChunks(t *testing.T) {
	f := &fillRecorder{}
	r := newRing(t, Config[int]{Size: 64, FillChunk: 10, Fill: f.fill})
	r.Start()
	waitFor(t, "fill", func() bool { return r.Stats().Refills == 1 })
	if got := f.calls(); !slices.Equal(got, []int{10, 10, 10, 10, 10, 10, 4}) {
		t.Errorf("Fill sizes %v, want six of 10 then 4", got)
	}
	if r.Len() != 64 {
		t.Errorf("Len = %d, want 64", r.Len())
	}
}

// lenAtUnlock is a FillLock that records, at each Unlock, how many values
// the ring holds: a refill's chunk must be in the ring before the lock is
// let go.
type lenAtUnlock struct {
	sync.Mutex
	r    *Ring[int]
	lens []int
}

func (l *lenAtUnlock) Unlock() {
	l.lens = append(l.lens, l.r.Len())
	l.Mutex.Unlock()
}

// FillLock is held from each Fill call to the put of its values.
func TestFillLock(t *testing.T) {
	lock := &lenAtUnlock{}
	held := true
	f := &fillRecorder{}
	fill := func(ctx context.Context, dst []int) (int, error) {
		if lock.TryLock() {
			lock.Mutex.Unlock()
			held = false
		}
		return f.fill(ctx, dst)
	}
	r := newRing(t, Config[int]{Size: 64, FillChunk: 10, Fill: fill, FillLock: lock})
	lock.r = r
	r.Start()
	waitFor(t, "fill", func() bool { return r.Stats().Refills == 1 })
	lock.Lock()
	defer lock.Mutex.Unlock()
	if !held {
		t.Error("Fill ran without FillLock held")
	}
	if !slices.Equal(lock.lens, []int{10, 20, 30, 40, 50, 60, 64}) {
		t.Errorf("ring lengths when FillLock was let go: %v, want each chunk put first", lock.lens)
	}
}

// recvErr receives from errs or fails t after a deadline.
func recvErr(t *testing.T, errs <-chan error) error {
	t.Helper()
	select {
	case err := <-errs:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no fill error reported")
		return nil
	}
}

// sendTo returns an OnFillError that sends to errs without ever blocking
// the refill goroutine (errors beyond its buffer are dropped).
func sendTo(errs chan<- error) func(error) {
	return func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
}

func TestScheduledRefill(t *testing.T) {
	var enabled atomic.Bool
	f := &fillRecorder{stop: func([]int) (int, error, bool) { return 0, nil, !enabled.Load() }}
	r := newRing(t, Config[int]{Size: 8, RefillInterval: time.Hour, Fill: f.fill})
	tick := make(chan time.Time)
	var stopped atomic.Bool
	r.newTicker = func(d time.Duration) (<-chan time.Time, func()) {
		if d != time.Hour {
			t.Errorf("ticker period %v, want 1h", d)
		}
		return tick, func() { stopped.Store(true) }
	}
	r.Start()
	// The initial fill finds Fill returning 0 and stops.
	waitFor(t, "initial pass", func() bool { return r.Stats().Refills == 1 })
	if r.Len() != 0 {
		t.Fatalf("Len = %d, want 0", r.Len())
	}
	enabled.Store(true)
	select { // no take, no trigger: only the tick
	case tick <- time.Now():
	case <-time.After(10 * time.Second):
		t.Fatal("the refill goroutine does not listen to the ticker")
	}
	waitFor(t, "scheduled refill", func() bool { return r.Len() == 8 && r.Stats().Refills == 2 })
	if got := r.Stats().Takes; got != 0 {
		t.Errorf("Takes = %d, want 0", got)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if !stopped.Load() {
		t.Error("ticker not stopped by Close")
	}
}

func TestScheduledRefillRealTicker(t *testing.T) {
	var enabled atomic.Bool
	f := &fillRecorder{stop: func([]int) (int, error, bool) { return 0, nil, !enabled.Load() }}
	r := newRing(t, Config[int]{Size: 8, RefillInterval: time.Millisecond, Fill: f.fill})
	r.Start()
	waitFor(t, "initial pass", func() bool { return r.Stats().Refills >= 1 })
	enabled.Store(true)
	waitFor(t, "scheduled refill", func() bool { return r.Len() == 8 })
}

func TestFillError(t *testing.T) {
	errBoom := errors.New("boom")
	var fail atomic.Bool
	fail.Store(true)
	f := &fillRecorder{stop: func([]int) (int, error, bool) {
		if fail.Load() {
			return 0, errBoom, true
		}
		return 0, nil, false
	}}
	errs := make(chan error, 10)
	r := newRing(t, Config[int]{Size: 8, FillChunk: 4, Fill: f.fill, OnFillError: sendTo(errs)})
	r.Start()
	if err := recvErr(t, errs); !errors.Is(err, errBoom) {
		t.Fatalf("OnFillError got %v, want %v", err, errBoom)
	}
	waitFor(t, "failed pass", func() bool { return r.Stats().Refills == 1 })
	if got := len(f.calls()); got != 1 {
		t.Errorf("Fill called %d times after an error, want 1 (stop until the next trigger)", got)
	}
	if got := r.Stats().FillErrors; got != 1 {
		t.Errorf("FillErrors = %d, want 1", got)
	}
	// The next trigger tries again: an empty take is one.
	fail.Store(false)
	if _, err := r.Take(); !errors.Is(err, ErrEmpty) {
		t.Fatalf("Take = %v, want ErrEmpty", err)
	}
	waitFor(t, "refill after the error", func() bool { return r.Len() == 8 })
}

func TestFillValuesWithError(t *testing.T) {
	errBoom := errors.New("boom")
	f := &fillRecorder{stop: func(dst []int) (int, error, bool) {
		dst[0], dst[1] = 41, 42
		return 2, errBoom, true
	}}
	errs := make(chan error, 10)
	r := newRing(t, Config[int]{Size: 8, Fill: f.fill, OnFillError: sendTo(errs)})
	r.Start()
	if err := recvErr(t, errs); !errors.Is(err, errBoom) {
		t.Fatalf("OnFillError got %v", err)
	}
	waitFor(t, "pass", func() bool { return r.Stats().Refills == 1 })
	dst := make([]int, 8)
	if n, _ := r.TakeN(dst); n != 2 || dst[0] != 41 || dst[1] != 42 {
		t.Errorf("ring holds %v, want the 2 values returned with the error", dst[:n])
	}
}

func TestFillBadCount(t *testing.T) {
	for _, tt := range []struct {
		name string
		n    func(dst []int) int
		want int // values kept
	}{
		{name: "negative", n: func([]int) int { return -1 }, want: 0},
		{name: "too many", n: func(dst []int) int { return len(dst) + 1 }, want: 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			errs := make(chan error, 10)
			r := newRing(t, Config[int]{
				Size: 8,
				Fill: func(_ context.Context, dst []int) (int, error) {
					for i := range dst {
						dst[i] = i + 1
					}
					return tt.n(dst), nil
				},
				OnFillError: sendTo(errs),
			})
			r.Start()
			if err := recvErr(t, errs); !errors.Is(err, ErrBadFill) {
				t.Fatalf("OnFillError got %v, want ErrBadFill", err)
			}
			waitFor(t, "pass", func() bool { return r.Stats().Refills == 1 })
			if r.Len() != tt.want {
				t.Errorf("Len = %d, want %d", r.Len(), tt.want)
			}
		})
	}
}

func TestFillZeroStops(t *testing.T) {
	f := &fillRecorder{stop: func([]int) (int, error, bool) { return 0, nil, true }}
	r := newRing(t, Config[int]{Size: 8, FillChunk: 2, Fill: f.fill})
	r.Start()
	waitFor(t, "pass", func() bool { return r.Stats().Refills == 1 })
	if got := len(f.calls()); got != 1 {
		t.Errorf("Fill called %d times in a pass after returning 0, want 1", got)
	}
}

// TestFillRacedValuesRejected: values Fill wrote that no longer fit,
// because another producer filled the ring meanwhile, go through
// RejectedPut and are counted.
func TestFillRacedValuesRejected(t *testing.T) {
	var r *Ring[int]
	var mu sync.Mutex
	var rejected []int
	r = newRing(t, Config[int]{
		Size: 8,
		Fill: func(_ context.Context, dst []int) (int, error) {
			for i := range 8 {
				r.Put(100 + i) // the racing producer
			}
			for i := range dst {
				dst[i] = i + 1
			}
			return len(dst), nil
		},
		RejectedPut: func(v int) {
			mu.Lock()
			rejected = append(rejected, v)
			mu.Unlock()
		},
	})
	r.Start()
	waitFor(t, "pass", func() bool { return r.Stats().Refills == 1 })
	mu.Lock()
	got := slices.Clone(rejected)
	mu.Unlock()
	if !slices.Equal(got, []int{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Errorf("rejected %v, want 1..8", got)
	}
	if s := r.Stats(); s.RejectedPuts != 8 || s.Puts != 8 {
		t.Errorf("Stats = %+v, want 8 puts and 8 rejected", s)
	}
	if v := mustTake(t, r); v != 100 {
		t.Errorf("Take = %d, want 100", v)
	}
}
