package snowflake

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
)

// Defaults of Config.
const (
	DefaultRandomStart = 100
	DefaultMaxBackward = 5 * time.Millisecond
	DefaultLeaseAhead  = 3 * time.Second
)

// spinLimit: the default Sleep spins (yielding the processor) for waits up to
// this long instead of arming a timer, whose wake-up is too late by tens of
// microseconds — which, once per millisecond, would cost several per cent of
// a Leaf layout's 4096 ids/ms.
const spinLimit = 2 * time.Millisecond

// Config configures a Generator. The zero value of every field means its
// default.
type Config struct {
	// Layout is the bit layout; the zero value is Leaf's.
	Layout Layout
	// Worker is this generator's worker id, 0..Layout.MaxWorker(): within
	// Region when the layout has region bits. (Region, Worker) must be
	// unique among the generators running on the same layout and epoch.
	Worker int64
	// Region is the region id, 0..Layout.MaxRegion() (0 without region
	// bits): the ids' worker field is Layout.WorkerField(Region, Worker).
	Region int64
	// Clock is the clock: its readings make the ticks, and the default
	// Sleep waits on its timers. Default clock.Real.
	Clock clock.Clock
	// Sleep waits for d; it returns early with ctx.Err() when ctx ends.
	// Default: on the real clock's timers (clock.RealTimers), spins (yielding) for waits up to 2ms and
	// uses a timer beyond; on another Clock, always a timer of that Clock.
	Sleep func(ctx context.Context, d time.Duration) error
	// RandomStart: the first sequence of a tick is random in
	// [0, RandomStart), as Leaf does (#169), so that ids of a quiet
	// generator are not all even. Default 100 (at most half the sequence
	// range); negative disables it (every tick starts at 0). At most
	// Layout.MaxSequence().
	RandomStart int
	// MaxBackward is the largest backwards step of the clock that is waited
	// out: the generator sleeps twice the step and retries once. A larger
	// step fails with ErrClockBackwards. Default 5ms (Leaf's); negative
	// means none is waited out.
	MaxBackward time.Duration
	// Lease, if set, is called (under the generator's lock) before the
	// generator uses a tick later than the last lease, with
	// until = Now() + LeaseAhead. It must persist "this worker uses no time
	// after until" durably before it returns nil; on restart pass the last
	// lease as LastIssued. If it fails, the call fails with ErrLeaseFailed
	// and no id is issued.
	Lease func(until time.Time) error
	// LeaseAhead is how far ahead of the clock each lease reaches. Default 3s.
	LeaseAhead time.Duration
	// LastIssued is the resume point (the last lease, or the time of the last
	// id issued by this worker): no id is issued with a tick at or before it.
	// A clock behind it is treated as a backwards step. Zero: none.
	LastIssued time.Time
}

// Generator issues the snowflake ids of one worker. It is safe for
// concurrent use; calls are serialized by a lock that a waiting caller
// gives up when its context ends, and that is released while sleeping.
type Generator struct {
	s           spec
	worker      int64 // Config.Worker
	region      int64 // Config.Region
	field       int64 // the ids' worker field: WorkerField(region, worker)
	clock       clock.Clock
	sleep       func(context.Context, time.Duration) error
	randomStart int
	maxBackward time.Duration
	lease       func(time.Time) error
	leaseAhead  time.Duration

	// sem is the lock: a token in the channel means held. Unlike a
	// sync.Mutex, a caller waiting for it can give up when ctx ends.
	sem chan struct{}
	// Guarded by sem.
	last   int64 // tick (since the epoch) of the last id issued; -1 for none
	seq    int64 // next sequence of tick last; > maxSeq when used up
	leased int64 // last tick covered by a lease; -1 for none
}

// New checks cfg, fills its defaults and returns a Generator. The error
// wraps ErrInvalidLayout or ErrInvalidConfig.
func New(cfg Config) (*Generator, error) {
	s, err := cfg.Layout.spec()
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if cfg.Region < 0 || cfg.Region > s.maxRegion {
		return nil, bad("region %d is outside 0-%d of layout %s", cfg.Region, s.maxRegion, s.l)
	}
	if cfg.Worker < 0 || cfg.Worker > s.maxLocal {
		return nil, bad("worker %d is outside 0-%d", cfg.Worker, s.maxLocal)
	}
	field, _ := s.field(cfg.Region, cfg.Worker) // both checked above
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Sleep == nil {
		cfg.Sleep = sleeper(cfg.Clock)
	}
	switch {
	case cfg.RandomStart == 0:
		cfg.RandomStart = int(min(DefaultRandomStart, (s.maxSeq+1)/2))
	case cfg.RandomStart < 0:
		cfg.RandomStart = 0
	case int64(cfg.RandomStart) > s.maxSeq:
		return nil, bad("RandomStart %d is above the largest sequence %d", cfg.RandomStart, s.maxSeq)
	}
	switch {
	case cfg.MaxBackward == 0:
		cfg.MaxBackward = DefaultMaxBackward
	case cfg.MaxBackward < 0:
		cfg.MaxBackward = 0
	}
	if cfg.LeaseAhead == 0 {
		cfg.LeaseAhead = DefaultLeaseAhead
	}
	if cfg.LeaseAhead < 0 {
		return nil, bad("LeaseAhead %v is negative", cfg.LeaseAhead)
	}
	g := &Generator{
		s:           s,
		worker:      cfg.Worker,
		region:      cfg.Region,
		field:       field,
		clock:       cfg.Clock,
		sleep:       cfg.Sleep,
		randomStart: cfg.RandomStart,
		maxBackward: cfg.MaxBackward,
		lease:       cfg.Lease,
		leaseAhead:  cfg.LeaseAhead,
		sem:         make(chan struct{}, 1),
		last:        -1,
		seq:         s.maxSeq + 1,
		leased:      -1,
	}
	if !cfg.LastIssued.IsZero() {
		g.last = max(-1, s.units(cfg.LastIssued)-s.epoch)
	}
	return g, nil
}

// sleeper is the default Sleep on c.
func sleeper(c clock.Clock) func(context.Context, time.Duration) error {
	return func(ctx context.Context, d time.Duration) error { return sleep(ctx, c, d) }
}

// sleep waits d on c: spinning for a short wait on the real clock's
// timers, on a timer otherwise.
func sleep(ctx context.Context, c clock.Clock, d time.Duration) error {
	if d > spinLimit || !clock.RealTimers(c) {
		return clock.Sleep(ctx, c, d)
	}
	return spin(ctx, d)
}

// spin waits d on the real clock, yielding: a timer is too coarse for the
// few milliseconds of a sequence wrap or a small backwards step.
func spin(ctx context.Context, d time.Duration) error {
	done := ctx.Done()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		select {
		case <-done:
			return ctx.Err()
		default:
		}
		runtime.Gosched()
	}
	return nil
}

// Layout is the generator's layout, with its defaults filled.
func (g *Generator) Layout() Layout { return g.s.l }

// Worker is the generator's worker id (within its region: Config.Worker).
func (g *Generator) Worker() int64 { return g.worker }

// Region is the generator's region id (Config.Region).
func (g *Generator) Region() int64 { return g.region }

// WorkerField is the worker field of the generator's ids: its worker id
// when the layout has no region bits.
func (g *Generator) WorkerField() int64 { return g.field }

// Next returns one id.
func (g *Generator) Next(ctx context.Context) (int64, error) {
	var id [1]int64
	if _, err := g.NextN(ctx, id[:]); err != nil {
		return 0, err
	}
	return id[0], nil
}

// NextN fills dst with increasing ids, whole ticks at a time, waiting for the
// next tick whenever the sequence of the current one is used up. It returns
// how many it filled; on error the first n are valid (issued) ids and the
// rest of dst is untouched. Errors wrap ErrClockBackwards, ErrLeaseFailed,
// ErrExpired, ErrOutOfRange (clock before the epoch) or are ctx.Err().
func (g *Generator) NextN(ctx context.Context, dst []int64) (int, error) {
	n := 0
	retried := false // a small backwards step was already waited out
	for n < len(dst) {
		if err := ctx.Err(); err != nil {
			return n, err // select below picks at random when both are ready
		}
		select {
		case g.sem <- struct{}{}:
		case <-ctx.Done():
			return n, ctx.Err()
		}
		k, wait, back, err := g.fillLocked(dst[n:], retried)
		<-g.sem
		n += k
		if err != nil {
			return n, err
		}
		if k > 0 {
			retried = false
		}
		if wait > 0 {
			retried = retried || back
			if err := g.sleep(ctx, wait); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// fillLocked issues ids of the current tick into dst. It returns how many,
// or how long to wait before trying again (back: because the clock is
// behind), or an error. retried: a backwards wait was already done.
func (g *Generator) fillLocked(dst []int64, retried bool) (n int, wait time.Duration, back bool, err error) {
	now := g.clock.Now()
	tick := g.s.units(now) - g.s.epoch
	switch {
	case tick < g.last:
		offset := g.s.start(g.s.epoch + g.last).Sub(now)
		if retried || offset > g.maxBackward {
			return 0, 0, true, fmt.Errorf("%w: by %v (now %v, in use up to %v)",
				ErrClockBackwards, offset, now, g.s.start(g.s.epoch+g.last))
		}
		return 0, 2 * offset, true, nil
	case tick < 0:
		return 0, 0, false, fmt.Errorf("%w: clock %v is before the epoch %v",
			ErrOutOfRange, now, g.s.l.Epoch)
	case tick > g.s.maxTick:
		return 0, 0, false, fmt.Errorf("%w: at %v", ErrExpired, g.s.expires())
	case tick > g.last:
		if g.lease != nil && tick > g.leased {
			until := now.Add(g.leaseAhead)
			if err := g.lease(until); err != nil {
				return 0, 0, false, fmt.Errorf("%w: until %v: %w", ErrLeaseFailed, until, err)
			}
			g.leased = max(tick, g.s.units(until)-g.s.epoch)
		}
		g.last, g.seq = tick, 0
		if g.randomStart > 1 {
			g.seq = int64(rand.IntN(g.randomStart))
		}
	case g.seq > g.s.maxSeq: // tick == g.last, used up
		return 0, max(g.s.start(g.s.epoch+tick+1).Sub(now), 1), false, nil
	}
	k := min(int64(len(dst)), g.s.maxSeq+1-g.seq)
	base := tick<<g.s.timeShift | g.field<<g.s.seqBits | g.seq
	for i := range dst[:k] {
		dst[i] = base + int64(i)
	}
	g.seq += k
	return int(k), 0, false, nil
}

// Last is the start of the tick after the last one this generator used (or
// the LastIssued it was given): its clock must be at or past Last before it
// can issue an id with a time it has not used. Zero if none.
func (g *Generator) Last() time.Time {
	g.sem <- struct{}{}
	last := g.last
	<-g.sem
	if last < 0 {
		return time.Time{}
	}
	return g.s.start(g.s.epoch + last + 1)
}

// Borrow fills dst with increasing ids without ever waiting for the clock,
// as UidGenerator's CachedUidGenerator does: it goes on with the current
// tick, then takes the ticks after it, each no earlier than the clock's, and
// reaches ahead of the clock up to the tick of limit. It returns how many
// ids it filled: fewer than len(dst) (maybe 0, with a nil error) when the
// tick of limit is used up. Config.Lease is not called: the caller must have
// durably leased every time up to limit before calling. Errors wrap
// ErrExpired or ErrOutOfRange, or are ctx.Err() while waiting for the lock.
func (g *Generator) Borrow(ctx context.Context, dst []int64, limit time.Time) (int, error) {
	select {
	case g.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-g.sem }()
	now := g.clock.Now()
	nowTick := g.s.units(now) - g.s.epoch
	if nowTick < 0 {
		return 0, fmt.Errorf("%w: clock %v is before the epoch %v", ErrOutOfRange, now, g.s.l.Epoch)
	}
	limTick := min(g.s.units(limit)-g.s.epoch, g.s.maxTick)
	g.leased = max(g.leased, limTick)
	n := 0
	for n < len(dst) {
		if g.seq > g.s.maxSeq || g.last < nowTick { // a new tick
			next := max(g.last+1, nowTick)
			if next > g.s.maxTick && n == 0 {
				return 0, fmt.Errorf("%w: at %v", ErrExpired, g.s.expires())
			}
			if next > limTick {
				break
			}
			g.last, g.seq = next, 0
			if g.randomStart > 1 {
				g.seq = int64(rand.IntN(g.randomStart))
			}
		}
		k := min(int64(len(dst)-n), g.s.maxSeq+1-g.seq)
		base := g.last<<g.s.timeShift | g.field<<g.s.seqBits | g.seq
		for i := range dst[n : n+int(k)] {
			dst[n+i] = base + int64(i)
		}
		g.seq += k
		n += int(k)
	}
	return n, nil
}
