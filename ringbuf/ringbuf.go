package ringbuf

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrEmpty is what Take and TakeN return when the ring is empty and
	// Config.RejectedTake is nil.
	ErrEmpty = errors.New("ringbuf: empty")
	// ErrClosed is what Take and TakeN return once the ring is closed and
	// drained.
	ErrClosed = errors.New("ringbuf: closed")
	// ErrInvalidConfig is wrapped by the errors New returns.
	ErrInvalidConfig = errors.New("ringbuf: invalid config")
	// ErrBadFill is wrapped by the error passed to Config.OnFillError when
	// a FillFunc reports a count outside [0, len(dst)].
	ErrBadFill = errors.New("ringbuf: fill returned an invalid count")
)

const (
	// DefaultSize is the capacity used when Config.Size is 0.
	DefaultSize = 1024
	// DefaultPaddingPercent is the padding threshold used when
	// Config.PaddingPercent is 0.
	DefaultPaddingPercent = 50
	// MaxSize is the largest capacity New accepts (after rounding).
	MaxSize = 1 << 30

	maxDefaultFillChunk = 4096
)

// cacheLine is the padding unit between the hot cursors. 128 rather than
// 64 bytes because x86 adjacent-line prefetching pulls lines in pairs.
const cacheLine = 128

// FillFunc writes up to len(dst) fresh values into dst and returns how many
// it wrote. It is called only from the ring's own refill goroutine (never
// concurrently with itself). ctx is cancelled by Close; a FillFunc that
// blocks must return when it is. Like io.Reader, a FillFunc may return
// values and an error together: the values are kept, then the error is
// reported.
type FillFunc[T any] func(ctx context.Context, dst []T) (int, error)

// Config configures a Ring. The zero value of every field means its
// default.
type Config[T any] struct {
	// Size is the capacity, rounded up to a power of two. Default 1024,
	// minimum 2, maximum MaxSize.
	Size int
	// PaddingPercent sets the padding threshold: a take that leaves fewer
	// than Size*PaddingPercent/100 values (at least 1) triggers a refill.
	// Default 50; valid 1..100.
	PaddingPercent int
	// RefillInterval, when positive, also refills on this period. It
	// requires Fill. Default 0: no scheduled refill.
	RefillInterval time.Duration
	// Fill is the source of values for refills. Default nil: no automatic
	// refill, the ring is fed by Put and PutN only.
	Fill FillFunc[T]
	// FillChunk is the most values asked of one Fill call. Default
	// min(Size, 4096); values above Size are lowered to Size.
	FillChunk int
	// RejectedPut is called with each value that Put, PutN or a refill
	// cannot place because the ring is full or closed. Default nil: the
	// value is dropped. Either way it is counted in Stats.RejectedPuts.
	RejectedPut func(v T)
	// RejectedTake is called when Take or TakeN finds the ring empty (and
	// not closed); its error is returned. Default nil, and a nil error from
	// it, both give ErrEmpty.
	RejectedTake func() error
	// OnFillError, if set, is called from the refill goroutine when Fill
	// returns an error. The refill then stops until the next trigger.
	OnFillError func(err error)
	// FillLock, if set, is held around each Fill call and the put of the
	// values it returned. Whoever holds it sees every value a refill has
	// drawn from its source either in the ring or not yet drawn: a caller
	// that takes the ring's last values and then draws from the same
	// source under the lock gets values that come after all of them.
	// Default nil: no lock.
	FillLock sync.Locker
}

// Stats is a snapshot of a Ring's counters. Puts and Takes are derived
// from the cursors, so they cost the hot path nothing; the snapshot is not
// atomic across fields.
type Stats struct {
	Puts          uint64 // values placed, by Put, PutN and refills
	Takes         uint64 // values taken, by Take and TakeN
	RejectedPuts  uint64 // values refused because the ring was full or closed
	RejectedTakes uint64 // Take/TakeN calls that returned no value
	Refills       uint64 // refill passes that called Fill at least once
	FillErrors    uint64 // errors returned by Fill (or ErrBadFill)
}

// slot is one cell of the ring. seq tells which lap the cell is in:
//
//	seq == pos          free, a producer at position pos may write it
//	seq == pos+1        holds the value for position pos, a consumer may take it
//	seq == pos+size     released by the consumer of pos, free for pos+size
type slot[T any] struct {
	seq atomic.Uint64
	val T
}

// Ring is a bounded multi-producer multi-consumer lock-free FIFO with an
// optional refill goroutine. Create it with New. All methods are safe for
// concurrent use.
//
// Layout: head and tail each sit alone between paddings, so consumers
// CASing head and producers CASing tail do not invalidate each other's
// line, nor the read-mostly fields every operation loads, which follow on
// lines of their own.
type Ring[T any] struct {
	_ [cacheLine]byte
	// head is the next position to take. Written by consumers (CAS).
	head atomic.Uint64
	_    [cacheLine - 8]byte
	// tail is the next position to put. Written by producers (CAS).
	tail atomic.Uint64
	_    [cacheLine - 8]byte

	// Read-mostly after New.
	slots []slot[T]
	mask  uint64
	// threshold is the padding threshold; 0 when there is no Fill, which
	// turns the hot-path check into a compare that is never true.
	threshold    uint64
	kick         chan struct{} // 1-buffered: at most one pending refill
	closed       atomic.Bool   // written once, by Close
	rejectedPut  func(T)
	rejectedTake func() error
	_            [cacheLine]byte

	// Cold counters, each bumped only off the fast path.
	rejectedPuts  atomic.Uint64
	rejectedTakes atomic.Uint64
	refills       atomic.Uint64
	fillErrors    atomic.Uint64

	fill        FillFunc[T]
	fillLock    sync.Locker
	onFillError func(error)
	interval    time.Duration
	buf         []T // refill scratch, owned by the refill goroutine

	// newTicker returns a tick channel and its stop function; replaced in
	// tests to drive the scheduled refill without sleeping.
	newTicker func(time.Duration) (<-chan time.Time, func())

	mu      sync.Mutex // guards started, cancel; held across Close's wait
	started bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New validates cfg, applies defaults and returns an unstarted ring. Call
// Start to run the refill goroutine when cfg.Fill is set.
func New[T any](cfg Config[T]) (*Ring[T], error) {
	switch {
	case cfg.Size < 0:
		return nil, fmt.Errorf("%w: Size %d is negative", ErrInvalidConfig, cfg.Size)
	case cfg.Size > MaxSize:
		return nil, fmt.Errorf("%w: Size %d exceeds %d", ErrInvalidConfig, cfg.Size, MaxSize)
	case cfg.PaddingPercent < 0 || cfg.PaddingPercent > 100:
		return nil, fmt.Errorf("%w: PaddingPercent %d is outside 1..100", ErrInvalidConfig, cfg.PaddingPercent)
	case cfg.RefillInterval < 0:
		return nil, fmt.Errorf("%w: RefillInterval %v is negative", ErrInvalidConfig, cfg.RefillInterval)
	case cfg.RefillInterval > 0 && cfg.Fill == nil:
		return nil, fmt.Errorf("%w: RefillInterval %v set without Fill", ErrInvalidConfig, cfg.RefillInterval)
	case cfg.FillChunk < 0:
		return nil, fmt.Errorf("%w: FillChunk %d is negative", ErrInvalidConfig, cfg.FillChunk)
	}
	size := roundSize(cfg.Size)
	pct := cfg.PaddingPercent
	if pct == 0 {
		pct = DefaultPaddingPercent
	}
	chunk := cfg.FillChunk
	if chunk == 0 {
		chunk = min(size, maxDefaultFillChunk)
	}
	chunk = min(chunk, size)

	r := &Ring[T]{
		slots:        make([]slot[T], size),
		mask:         uint64(size - 1),
		kick:         make(chan struct{}, 1),
		rejectedPut:  cfg.RejectedPut,
		rejectedTake: cfg.RejectedTake,
		fill:         cfg.Fill,
		fillLock:     cfg.FillLock,
		onFillError:  cfg.OnFillError,
		interval:     cfg.RefillInterval,
		newTicker:    realTicker,
	}
	for i := range r.slots {
		r.slots[i].seq.Store(uint64(i))
	}
	if cfg.Fill != nil {
		r.threshold = max(1, uint64(size*pct/100))
		r.buf = make([]T, chunk)
	}
	return r, nil
}

// roundSize applies the default and minimum and rounds n up to a power of
// two. n must be in [0, MaxSize].
func roundSize(n int) int {
	switch {
	case n == 0:
		return DefaultSize
	case n <= 2:
		return 2
	}
	return 1 << bits.Len64(uint64(n-1))
}

func realTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// Start starts the refill goroutine, if the ring has a Fill, and triggers
// an initial fill to full. It is idempotent and does nothing after Close.
func (r *Ring[T]) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.closed.Load() {
		return
	}
	r.started = true
	if r.fill == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	var tick <-chan time.Time
	stop := func() {}
	if r.interval > 0 {
		tick, stop = r.newTicker(r.interval)
	}
	r.wg.Go(func() {
		defer stop()
		r.run(ctx, tick)
	})
	r.TriggerRefill()
}

// Close stops the refill goroutine and waits for it to return. Afterwards
// Put and PutN refuse every value, and Take and TakeN drain what is left,
// then return ErrClosed. Close is idempotent and always returns nil.
func (r *Ring[T]) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return nil
	}
	r.closed.Store(true)
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	return nil
}

// Cap returns the capacity.
func (r *Ring[T]) Cap() int { return len(r.slots) }

// Len returns the number of values in the ring. It is approximate under
// concurrency: it counts positions reserved by producers that may not be
// published yet, and may be stale by the time it returns.
func (r *Ring[T]) Len() int {
	h := r.head.Load()
	t := r.tail.Load()
	if t <= h {
		return 0
	}
	return int(min(t-h, uint64(len(r.slots))))
}

// TriggerRefill asks the refill goroutine to fill the ring to full. It
// never blocks; triggers coalesce into at most one pending refill. Without
// a Fill, or after Close, it has no effect.
func (r *Ring[T]) TriggerRefill() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Refills is how many refills have ended (Stats().Refills, alone).
func (r *Ring[T]) Refills() uint64 { return r.refills.Load() }

// Stats returns a snapshot of the counters.
func (r *Ring[T]) Stats() Stats {
	return Stats{
		Puts:          r.tail.Load(),
		Takes:         r.head.Load(),
		RejectedPuts:  r.rejectedPuts.Load(),
		RejectedTakes: r.rejectedTakes.Load(),
		Refills:       r.refills.Load(),
		FillErrors:    r.fillErrors.Load(),
	}
}

// Memory order. Go's sync/atomic operations are sequentially consistent,
// and the Go memory model makes an atomic write synchronize with the atomic
// read that observes it. Values are handed between goroutines through each
// slot's seq alone:
//
//   - A producer claims position pos by CAS on tail, writes val (a plain
//     write), then Stores seq = pos+1. A consumer that Loads seq == pos+1
//     happens after that write, so its plain read of val sees it and does
//     not race.
//   - A consumer claims pos by CAS on head, reads and clears val, then
//     Stores seq = pos+size. A producer that Loads seq == pos+size before
//     writing val for position pos+size happens after that read, so its
//     write cannot race with it.
//
// The cursor CASes only decide which goroutine owns a position; they never
// publish data. Cursors only grow (64 bits do not wrap in practice), so a
// CAS from pos to pos+k that succeeds proves nobody claimed any of
// pos..pos+k-1 since their seqs were seen ready, and a slot seen ready stays
// ready until its claimer moves seq on. That is what lets PutN and TakeN
// claim a checked run of k slots with one CAS. Len, Stats and the padding
// check read the cursors without publishing anything, so staleness there
// only makes them approximate.

// Put puts v. It returns false, and applies the rejected-put policy, if the
// ring is full or closed.
func (r *Ring[T]) Put(v T) bool {
	if r.closed.Load() {
		r.reject(v)
		return false
	}
	pos := r.tail.Load()
	for {
		s := &r.slots[pos&r.mask]
		seq := s.seq.Load()
		switch dif := int64(seq - pos); {
		case dif == 0:
			if r.tail.CompareAndSwap(pos, pos+1) { // claim
				s.val = v
				s.seq.Store(pos + 1) // publish: see Memory order
				return true
			}
			pos = r.tail.Load()
		case dif < 0:
			var full bool
			if pos, full = r.fullAt(pos); full {
				r.reject(v)
				return false
			}
		default: // another producer took pos; catch up
			pos = r.tail.Load()
		}
	}
}

// PutN puts the longest prefix of vs that fits and returns its length.
// The rejected-put policy is applied to each value of the rest. A run of
// free slots is reserved with one CAS.
func (r *Ring[T]) PutN(vs []T) int {
	if len(vs) == 0 {
		return 0
	}
	n := 0
	if !r.closed.Load() {
		n = r.putN(vs)
	}
	r.rejectAll(vs[n:])
	return n
}

// putN is PutN without the closed check and the rejected-put policy.
func (r *Ring[T]) putN(vs []T) int {
	done := 0
	pos := r.tail.Load()
	for done < len(vs) {
		want := uint64(min(len(vs)-done, len(r.slots)))
		// Count the run of slots free for this lap.
		var k uint64
		var seq uint64
		for ; k < want; k++ {
			seq = r.slots[(pos+k)&r.mask].seq.Load()
			if seq != pos+k {
				break
			}
		}
		if k == 0 {
			if int64(seq-pos) > 0 { // another producer took pos
				pos = r.tail.Load()
				continue
			}
			var full bool
			if pos, full = r.fullAt(pos); full {
				return done
			}
			continue
		}
		if !r.tail.CompareAndSwap(pos, pos+k) {
			pos = r.tail.Load()
			continue
		}
		for i := range k {
			s := &r.slots[(pos+i)&r.mask]
			s.val = vs[done+int(i)]
			s.seq.Store(pos + i + 1) // publish: see Memory order
		}
		done += int(k)
		pos += k
	}
	return done
}

// fullAt is called when the slot for position pos still holds the previous
// lap. If pos is still the tail and the cursors say the ring holds size
// values, the ring is full. Otherwise either tail moved (return it) or a
// consumer has claimed the previous lap's value but not released the slot
// yet: that takes a few instructions, so yield and retry rather than
// report a full ring that is not.
func (r *Ring[T]) fullAt(pos uint64) (uint64, bool) {
	t := r.tail.Load()
	if t != pos {
		return t, false
	}
	if t-r.head.Load() >= uint64(len(r.slots)) {
		return t, true
	}
	runtime.Gosched()
	return r.tail.Load(), false
}

func (r *Ring[T]) reject(v T) {
	r.rejectedPuts.Add(1)
	if r.rejectedPut != nil {
		r.rejectedPut(v)
	}
}

func (r *Ring[T]) rejectAll(vs []T) {
	if len(vs) == 0 {
		return
	}
	r.rejectedPuts.Add(uint64(len(vs)))
	if r.rejectedPut != nil {
		for _, v := range vs {
			r.rejectedPut(v)
		}
	}
}

// Take takes the oldest value. If the ring is empty it returns the
// rejected-take policy's error (ErrEmpty by default), or ErrClosed once the
// ring is closed. It never waits for a refill.
func (r *Ring[T]) Take() (T, error) {
	pos := r.head.Load()
	for {
		s := &r.slots[pos&r.mask]
		seq := s.seq.Load()
		switch dif := int64(seq - (pos + 1)); {
		case dif == 0:
			if r.head.CompareAndSwap(pos, pos+1) { // claim
				v := s.val
				var zero T
				s.val = zero                            // drop the reference for the GC
				s.seq.Store(pos + uint64(len(r.slots))) // release: see Memory order
				// Padding check: tail-(pos+1) is the length after this take.
				// threshold is 0 without a Fill, so this is never true then.
				if r.tail.Load()-(pos+1) < r.threshold {
					r.TriggerRefill()
				}
				return v, nil
			}
			pos = r.head.Load()
		case dif < 0: // not yet published for this lap: empty
			var zero T
			return zero, r.takeEmpty()
		default: // another consumer took pos; catch up
			pos = r.head.Load()
		}
	}
}

// TakeN takes up to len(dst) values, as many as are ready, into dst and
// returns how many. It reserves the whole run with one CAS. If the ring is
// empty it returns 0 and the same error as Take; with an empty dst it
// returns (0, nil).
func (r *Ring[T]) TakeN(dst []T) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	want := uint64(min(len(dst), len(r.slots)))
	pos := r.head.Load()
	for {
		// Count the run of slots published for this lap.
		var k uint64
		var seq uint64
		for ; k < want; k++ {
			seq = r.slots[(pos+k)&r.mask].seq.Load()
			if seq != pos+k+1 {
				break
			}
		}
		if k == 0 {
			if int64(seq-(pos+1)) < 0 {
				return 0, r.takeEmpty()
			}
			pos = r.head.Load()
			continue
		}
		if !r.head.CompareAndSwap(pos, pos+k) {
			pos = r.head.Load()
			continue
		}
		var zero T
		for i := range k {
			s := &r.slots[(pos+i)&r.mask]
			dst[i] = s.val
			s.val = zero
			s.seq.Store(pos + i + uint64(len(r.slots))) // release: see Memory order
		}
		if r.tail.Load()-(pos+k) < r.threshold {
			r.TriggerRefill()
		}
		return int(k), nil
	}
}

// takeEmpty is the slow path of an empty take.
func (r *Ring[T]) takeEmpty() error {
	r.rejectedTakes.Add(1)
	if r.closed.Load() {
		return ErrClosed
	}
	if r.threshold != 0 {
		// A Fill that failed or returned 0 stopped the last refill; an
		// empty take asks again.
		r.TriggerRefill()
	}
	if r.rejectedTake != nil {
		if err := r.rejectedTake(); err != nil {
			return err
		}
	}
	return ErrEmpty
}

// run is the refill goroutine.
func (r *Ring[T]) run(ctx context.Context, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-tick:
		}
		r.refill(ctx)
	}
}

// refill fills the ring to full in chunks of at most len(r.buf), as
// UidGenerator's paddingBuffer does. It stops early when Fill returns 0 or
// an error, or when ctx is cancelled.
func (r *Ring[T]) refill(ctx context.Context) {
	called := false
	for ctx.Err() == nil {
		free := len(r.slots) - r.Len()
		if free <= 0 {
			break
		}
		dst := r.buf[:min(free, len(r.buf))]
		k, err := r.fillChunk(ctx, dst)
		called = true
		if err != nil {
			if ctx.Err() == nil { // not our own cancellation
				r.fillErrors.Add(1)
				if r.onFillError != nil {
					r.onFillError(err)
				}
			}
			break
		}
		if k == 0 {
			break
		}
	}
	if called {
		r.refills.Add(1)
	}
}

// fillChunk calls Fill once for dst and puts what it returned, under
// FillLock when there is one.
func (r *Ring[T]) fillChunk(ctx context.Context, dst []T) (int, error) {
	if r.fillLock != nil {
		r.fillLock.Lock()
		defer r.fillLock.Unlock()
		if err := ctx.Err(); err != nil { // closed while we waited
			return 0, err
		}
	}
	k, err := r.fill(ctx, dst)
	if k < 0 || k > len(dst) {
		err = errors.Join(fmt.Errorf("%w: %d for a buffer of %d", ErrBadFill, k, len(dst)), err)
		k = max(0, min(k, len(dst)))
	}
	if k > 0 {
		// Values that no longer fit (another producer raced) are
		// rejected, never silently lost.
		n := r.putN(dst[:k])
		r.rejectAll(dst[n:k])
		clear(dst[:k])
	}
	return k, err
}
