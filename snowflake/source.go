package snowflake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/wire"
)

// ErrNotServing: the Source is not handing out ids now (waiting for its
// clock to pass its last lease, paused after the clock moved backwards, its
// worker id lost, or closed). The message says which, and until when.
var ErrNotServing = wire.NewCodedError(wire.CodeUnavailable, "snowflake not serving")

// ErrClaimLapsed: the registration's claim was not confirmed within the
// registry's ClaimTTL (measured on the monotonic clock): another process
// may hold the worker id by now, so the Source dropped the registration.
// Errors of Fill wrap it (with ErrNotServing) until the Source has
// registered again.
var ErrClaimLapsed = errors.New("worker claim lapsed")

// State is what a Source is doing.
type State int32

// States of a Source.
const (
	// StateWaiting: registered, waiting for the clock to pass the worker's
	// last lease (at start, or after re-registering).
	StateWaiting State = iota
	// StateServing: handing out ids.
	StateServing
	// StatePaused: the clock moved backwards further than can be waited
	// out; waiting for it to pass the last tick used.
	StatePaused
	// StateLost: the registry claim was lost; re-registering.
	StateLost
	// StateClosed: Close was called.
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateWaiting:
		return "waiting"
	case StateServing:
		return "serving"
	case StatePaused:
		return "paused"
	case StateLost:
		return "lost"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// Event is a change of a Source's state, for logs, metrics and the
// leaf.events subjects.
type Event struct {
	State  State     // the new state
	Worker int64     // worker id (-1 when none)
	Until  time.Time // Waiting, Paused: when the clock will have passed the last time used
	Reason string    // human-readable
	// Registered: the change follows a new registration (a worker id was
	// just claimed, with LastLease).
	Registered bool
	LastLease  time.Time

	cause error // why the Source is not serving, for the errors of Fill
}

// Defaults of SourceConfig.
const (
	DefaultMaxStartWait = 30 * time.Second
	defaultCheck        = 50 * time.Millisecond
	defaultRetry        = time.Second
)

// SourceConfig configures a Source. Zero values mean the defaults in comments.
type SourceConfig struct {
	// Open opens a new Registry. It is called at start and again after a
	// claim is lost (a lost Registry cannot register again). Required.
	Open func(ctx context.Context) (Registry, error)
	// Layout, RandomStart and Clock are the Generator's (Config). The
	// Source's loop (renewals, resuming, re-registering) runs on Clock's
	// tickers and timers too. Default clock.Real.
	Layout      Layout
	RandomStart int
	Clock       clock.Clock
	// Region is the Generator's Config.Region: the region whose registry
	// Open opens (its worker ids are 0..Layout.MaxWorker() within it).
	// The Source's worker ids (Worker, Holds, Past, Event.Worker, and
	// those Holder, PeerLease and NewWorker are asked about) are the ids'
	// worker fields, Layout.WorkerField(Region, worker): the registry's
	// worker itself when the layout has no region bits.
	Region int64
	// Monotonic is the clock of the fencing bound (ClaimTTLer): only the
	// differences of its readings are used, never their value. Unlike Clock
	// it must not be stepped or offset. Default clock.Real, whose readings
	// carry Go's monotonic clock.
	Monotonic clock.Clock
	// LeaseAhead is how far ahead of the clock the persisted time lease
	// reaches; it is renewed every LeaseAhead/4. A restarted worker waits up
	// to this long for its clock to pass its last lease. Default 3s. On a
	// registry that is a LeaseTimer the lease reaches further by the time
	// a renewal takes (at most LeaseAhead again). While renewals fail the
	// Source serves on what it leased until LeaseAhead/8 before its end.
	LeaseAhead time.Duration
	// BorrowAhead is how far ahead of the clock ids may be made when they
	// are taken faster than the layout's rate (UidGenerator's borrowing of
	// future seconds). At most LeaseAhead/2, so the lease, renewed every
	// LeaseAhead/4, always covers it and a Source at its borrowing limit
	// moves on with the clock instead of waiting for a renewal. Default
	// LeaseAhead/2; negative: never ahead of the clock.
	BorrowAhead time.Duration
	// MaxBackward is the largest backwards step of the clock (beyond what
	// was borrowed) that Next waits out; a larger one pauses the Source
	// until the clock is past the last tick used. Default 5ms.
	MaxBackward time.Duration
	// MaxStartWait: a clock behind the worker's last lease by more than
	// this at start fails Start with ErrClockBackwards instead of waiting.
	// Default 30s.
	MaxStartWait time.Duration
	// NewWorker is asked about a worker id whose registry (a ClaimTTLer)
	// holds no time lease for it: true if no other process can be serving
	// it (a node asks the live nodes). A worker id with no lease on record
	// may be new, or its records were erased: a process that held it and
	// stopped made ids up to BorrowAhead past a clock that may run
	// ClockSkew ahead of this one, so the first id waits BorrowAhead +
	// ClockSkew. If NewWorker is false (or nil), a live process may still
	// serve it until its claim lapses: it waits ClaimTTL + LeaseAhead +
	// ClockSkew (2×LeaseAhead on a registry that is a LeaseTimer, whose
	// leases reach further).
	NewWorker func(ctx context.Context, worker int64) bool
	// Holder is asked after every registration, whatever the registry,
	// about the worker id it gave: it names a live process other than this
	// one that says it holds that id ("" if none does, or none could be
	// asked). A registration that no registry guards (ZooKeeper's from its
	// local cache file while the ensemble is unreachable: Leaf's
	// workerID.properties), two hosts with one identity, or two registries
	// behind one queue group can give a worker id that a live process
	// serves; a named holder fails the registration with ErrWorkerInUse.
	// An error (the live processes could not all be asked) fails the
	// registration with it: the Source, or the node's start, tries again.
	// Nil: not asked.
	Holder func(ctx context.Context, worker int64) (string, error)
	// PeerLease is asked after every registration about the worker id
	// given: the highest time lease a live process other than this one
	// reports for it among the worker ids it held before and lost (Past);
	// zero if none. The worker's last lease is raised to it: a process
	// that lost a worker id (its record erased under it) may have made ids
	// of it up to that lease, and the registry no longer knows. An error
	// (the live processes could not be asked) fails the registration with
	// it, as Holder's does. Nil: not asked.
	PeerLease func(ctx context.Context, worker int64) (time.Time, error)
	ClockSkew time.Duration
	// OnEvent, if set, is called (from the Source's goroutine or a caller
	// of Fill, never concurrently with itself) at every change of state.
	OnEvent func(Event)
	// Logger: default slog.Default().
	Logger *slog.Logger
}

// Source runs a Generator on a worker id claimed from a Registry: it keeps
// the worker's time lease renewed ahead of the clock, refuses ids until the
// clock has passed the last lease (so a restart with the clock behind never
// reissues an id), pauses when the clock steps back, and claims a new worker
// id when the claim is lost. It is safe for concurrent use.
type Source struct {
	cfg   SourceConfig
	log   *slog.Logger
	s     spec
	check time.Duration
	retry time.Duration

	mono0 time.Time // Monotonic at start: fences are offsets from it

	// cur is the registration in use (nil while there is none): Fill takes
	// its generator, lease and fence from one snapshot, so ids of one
	// registration are never made under another's lease. It is written
	// under mu and read without it.
	cur atomic.Pointer[claim]

	mu     sync.Mutex // guards until, reason, cause, closed, stale; writes of cur; state transitions
	until  time.Time  // Waiting/Paused: resume when the clock passes it
	reason string
	cause  error // wrapped by the errors of Fill while not serving
	closed bool
	stale  []Registry // dropped registrations, for the run loop (or Close) to close
	// floor is, per worker id, the highest lease an earlier registration
	// of this Source had: a registry that lost it (a deleted key or row)
	// must not make this process repeat its own ids.
	floor map[int64]int64

	state  atomic.Int32
	worker atomic.Int64

	evMu   sync.Mutex // serializes OnEvent
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// workerInUse is the ErrWorkerInUse of one registration.
type workerInUse struct {
	worker int64
	holder string
}

func (e *workerInUse) Error() string {
	return fmt.Sprintf("%v: the registry gave worker %d to this process, and %s says it holds it "+
		"(a registration from a local cache while the registry is unreachable, two hosts with one identity, or two registries behind one queue group)",
		ErrWorkerInUse, e.worker, e.holder)
}

func (e *workerInUse) Unwrap() error { return ErrWorkerInUse }

// claim is one registration of a worker id: its registry, generator, lease
// and fence, swapped as a whole. Once dead it never serves again.
type claim struct {
	reg    Registry
	gen    *Generator
	worker int64         // the worker field of the ids (region and worker)
	local  int64         // the worker within the region: the registry's, its lease files'
	ttl    time.Duration // the registry's ClaimTTL; 0: no fence
	leased atomic.Int64  // unix nanos (Now) up to which the lease is persisted
	// fence is the Monotonic offset (from mono0) past which no id is served:
	// ttl after the start of the last successful Register or Lease call.
	fence atomic.Int64
	dead  atomic.Bool // dropped: lost, lapsed or closed
}

// raise stores v in a unless a holds more already.
func raise(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// monoNow is the Monotonic clock's offset from the Source's start.
func (src *Source) monoNow() int64 { return int64(src.cfg.Monotonic.Since(src.mono0)) }

// lapsed reports whether c is past its fence (never without a ClaimTTL).
func (src *Source) lapsed(c *claim) bool {
	return c.ttl > 0 && src.monoNow() >= c.fence.Load()
}

// fenceDue reports whether half of c's fence is used up, so the claim
// must be confirmed whatever the wall clock says (it may stand still or
// step back, and the fence is on the monotonic clock).
func (src *Source) fenceDue(c *claim) bool {
	return c != nil && c.ttl > 0 && c.fence.Load()-src.monoNow() <= int64(c.ttl/2)
}

// StartSource opens the registry, claims a worker id and starts the
// Source's lease and clock goroutine. If the clock is behind the worker's
// last lease by at most MaxStartWait the Source starts Waiting and serves
// once the clock has passed it; by more, StartSource fails with an error
// wrapping ErrClockBackwards. A layout that cannot make ids at Clock's now
// (an epoch in the future, time bits run out) fails before any registry
// is opened (Layout.Usable).
func StartSource(ctx context.Context, cfg SourceConfig) (*Source, error) {
	if cfg.Open == nil {
		return nil, fmt.Errorf("%w: SourceConfig.Open is required", ErrInvalidConfig)
	}
	s, err := cfg.Layout.spec()
	if err != nil {
		return nil, err
	}
	cfg.Layout = s.l
	if cfg.Region < 0 || cfg.Region > s.maxRegion {
		return nil, fmt.Errorf("%w: region %d is outside 0-%d of layout %s", ErrInvalidConfig, cfg.Region, s.maxRegion, s.l)
	}
	cfg.Clock = clock.Or(cfg.Clock)
	cfg.Monotonic = clock.Or(cfg.Monotonic)
	if err := s.l.Usable(cfg.Clock.Now()); err != nil {
		return nil, err
	}
	if cfg.LeaseAhead == 0 {
		cfg.LeaseAhead = DefaultLeaseAhead
	}
	if cfg.BorrowAhead == 0 {
		cfg.BorrowAhead = cfg.LeaseAhead / 2
	}
	if cfg.BorrowAhead < 0 {
		cfg.BorrowAhead = 0
	}
	if cfg.MaxBackward == 0 {
		cfg.MaxBackward = DefaultMaxBackward
	}
	if cfg.MaxBackward < 0 {
		cfg.MaxBackward = 0
	}
	if cfg.MaxStartWait == 0 {
		cfg.MaxStartWait = DefaultMaxStartWait
	}
	switch {
	case cfg.LeaseAhead < 4*s.l.TimeUnit:
		return nil, fmt.Errorf("%w: LeaseAhead %v must be at least 4 ticks of %v", ErrInvalidConfig, cfg.LeaseAhead, s.l.TimeUnit)
	case cfg.BorrowAhead > cfg.LeaseAhead/2:
		return nil, fmt.Errorf("%w: BorrowAhead %v is beyond half of LeaseAhead %v", ErrInvalidConfig, cfg.BorrowAhead, cfg.LeaseAhead)
	case cfg.MaxStartWait < 0:
		return nil, fmt.Errorf("%w: MaxStartWait %v is negative", ErrInvalidConfig, cfg.MaxStartWait)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	src := &Source{
		cfg:   cfg,
		log:   cfg.Logger,
		s:     s,
		check: defaultCheck,
		retry: defaultRetry,
		done:  make(chan struct{}),
		mono0: cfg.Monotonic.Now(),
	}
	src.worker.Store(-1)
	src.state.Store(int32(StateLost))
	refused := int64(-1)
	for {
		err := src.register(ctx, true)
		if err == nil {
			break
		}
		// A claim that lapsed while Register ran is dropped: claim again
		// while ctx allows. A worker id that a live process holds is asked
		// for again once: a registry that picks among free ids (KV) may
		// give another; one that gives the same id again (ZooKeeper, by
		// this host's identity) fails the start.
		var inUse *workerInUse
		retry := errors.Is(err, ErrClaimLapsed)
		if errors.As(err, &inUse) && inUse.worker != refused {
			refused, retry = inUse.worker, true
		}
		if !retry || ctx.Err() != nil {
			src.closeStale()
			return nil, err
		}
		src.log.Warn("snowflake: registering again", "err", err)
		src.closeStale()
	}
	src.ctx, src.cancel = context.WithCancel(context.Background())
	go src.run()
	return src, nil
}

// register opens a registry, claims a worker id and builds its generator.
// At start (first) a clock too far behind the last lease is an error; later
// it only makes the Source wait longer.
func (src *Source) register(ctx context.Context, first bool) error {
	reg, err := src.cfg.Open(ctx)
	if err != nil {
		return fmt.Errorf("snowflake: open registry: %w", err)
	}
	start := src.monoNow() // the claim is confirmed from here
	r, err := reg.Register(ctx)
	if err != nil {
		_ = reg.Close()
		return fmt.Errorf("snowflake: register: %w", err)
	}
	if r.Worker < 0 || r.Worker > src.s.maxLocal {
		_ = reg.Close()
		return fmt.Errorf("%w: registry gave worker %d, outside 0-%d of layout %s", ErrNoWorker, r.Worker, src.s.maxLocal, src.s.l)
	}
	// From here on the worker is its field in the ids: unique across
	// regions, so that live processes of other regions asked about it
	// (Holder, PeerLease, NewWorker) never answer for their own worker of
	// the same number.
	local := r.Worker
	r.Worker, _ = src.s.field(src.cfg.Region, local) // both in range
	if src.cfg.Holder != nil {
		h, err := src.cfg.Holder(ctx, r.Worker)
		if err != nil {
			_ = reg.Close()
			return fmt.Errorf("snowflake: asking the live processes about worker %d: %w", r.Worker, err)
		}
		if h != "" {
			_ = reg.Close()
			return &workerInUse{worker: r.Worker, holder: h}
		}
	}
	if src.cfg.PeerLease != nil {
		pl, err := src.cfg.PeerLease(ctx, r.Worker)
		if err != nil {
			_ = reg.Close()
			return fmt.Errorf("snowflake: asking the live processes for the past leases of worker %d: %w", r.Worker, err)
		}
		if pl.After(r.LastLease) {
			src.log.Warn("snowflake: a live node held this worker id before, with a time lease beyond the registry's; using it",
				"worker", r.Worker, "registry_last_lease", r.LastLease, "peer_lease", pl)
			r.LastLease = pl
		}
	}
	src.mu.Lock()
	if f := src.floor[r.Worker]; f > 0 && time.Unix(0, f).After(r.LastLease) {
		src.log.Warn("snowflake: the registry's last lease is below one this process had for the worker; using this process's",
			"worker", r.Worker, "registry_last_lease", r.LastLease, "last_lease", time.Unix(0, f))
		r.LastLease = time.Unix(0, f)
	}
	src.mu.Unlock()
	now := src.cfg.Clock.Now()
	behind := r.LastLease.Sub(now)
	if first && behind > src.cfg.MaxStartWait {
		_ = reg.Close()
		return fmt.Errorf("%w: the clock (%v) is %v behind the last time lease of worker %d (%v), more than the %v a start waits: fix the clock, or start later",
			ErrClockBackwards, now.UTC(), behind.Round(time.Millisecond), r.Worker, r.LastLease.UTC(), src.cfg.MaxStartWait)
	}
	var ttl time.Duration
	if t, ok := reg.(ClaimTTLer); ok && t.ClaimTTL() > 0 {
		ttl = t.ClaimTTL()
	}
	if (r.LastLease.IsZero() || r.Partial) && ttl > 0 {
		// No lease on record: a new worker id, or one whose records were
		// erased; or only this process's own record of it (Partial). A
		// process that served it and has stopped made ids at most
		// BorrowAhead past its clock, which ran at most ClockSkew ahead
		// of this one (a worker's records erased, its holder stopped and
		// another node started on it; a node started from its ZooKeeper
		// cache file just after another host with the same identity
		// stopped). One that still
		// serves it stops when its claim lapses, a ClaimTTL from now at
		// most. A registry that had recorded nothing (Fresh) had no
		// holder.
		var wait time.Duration
		switch {
		case src.cfg.NewWorker == nil || !src.cfg.NewWorker(ctx, r.Worker):
			wait = ttl + src.reach(reg) + max(src.cfg.ClockSkew, 0)
			src.log.Warn("snowflake: the registry has no time lease for this worker id: waiting out any process that may still serve it",
				"worker", r.Worker, "wait", wait)
		case !r.Fresh:
			wait = src.cfg.BorrowAhead + max(src.cfg.ClockSkew, 0)
			src.log.Info("snowflake: the registry has no time lease for this worker id: waiting out the lease a stopped process may have had",
				"worker", r.Worker, "wait", wait)
		}
		if wait > 0 && now.Add(wait).After(r.LastLease) {
			r.LastLease = now.Add(wait)
		}
	}
	gen, err := New(Config{
		Layout:      src.s.l,
		Worker:      local,
		Region:      src.cfg.Region,
		Clock:       src.cfg.Clock,
		RandomStart: src.cfg.RandomStart,
		LastIssued:  r.LastLease,
	})
	if err != nil {
		_ = reg.Close()
		return err
	}
	c := &claim{reg: reg, gen: gen, worker: r.Worker, local: local}
	if ttl > 0 {
		c.ttl = ttl
		c.fence.Store(start + int64(c.ttl))
	}
	if !r.LastLease.IsZero() {
		c.leased.Store(r.LastLease.UnixNano())
	}
	src.mu.Lock()
	if src.closed {
		src.mu.Unlock()
		_ = reg.Close()
		return fmt.Errorf("%w: closed", ErrNotServing)
	}
	if old := src.cur.Swap(c); old != nil { // not expected: only after a loss
		old.dead.Store(true)
		src.stale = append(src.stale, old.reg)
	}
	src.worker.Store(r.Worker)
	until := gen.Last()
	src.mu.Unlock()
	src.log.Info("snowflake worker registered", "worker", r.Worker, "last_lease", r.LastLease, "layout", src.s.l.String())
	if !now.Before(until) {
		// Lease before serving, so the first ids never wait for the registry.
		if err := src.renew(ctx, now); err != nil {
			if c.dead.Load() {
				// The claim lapsed before it served (Register took longer
				// than the ClaimTTL): it was dropped, and reporting
				// serving now would leave the Source serving nothing and
				// never registering again.
				return fmt.Errorf("snowflake: worker %d: %w", r.Worker, err)
			}
			src.log.Warn("snowflake: first time lease failed; retrying", "err", err)
		}
		src.emit(Event{State: StateServing, Reason: fmt.Sprintf("registered worker %d", r.Worker), Registered: true, LastLease: r.LastLease})
		return nil
	}
	src.emit(Event{State: StateWaiting, Until: until, Registered: true, LastLease: r.LastLease,
		Reason: fmt.Sprintf("registered worker %d; the clock is %v behind its last time lease", r.Worker, until.Sub(now).Round(time.Millisecond))})
	return nil
}

// setState changes the state and reports the event.
func (src *Source) setState(st State, until time.Time, reason string) {
	src.emit(Event{State: st, Until: until, Reason: reason})
}

// emit changes the state to ev.State and reports ev, unless the state is
// the same (and ev is no new registration).
func (src *Source) emit(ev Event) {
	st, until, reason := ev.State, ev.Until, ev.Reason
	src.mu.Lock()
	if src.closed && st != StateClosed {
		src.mu.Unlock()
		return
	}
	old := State(src.state.Swap(int32(st)))
	src.until, src.reason, src.cause = until, reason, ev.cause
	src.mu.Unlock()
	if old == st && !ev.Registered {
		return
	}
	ev.Worker = src.worker.Load()
	lvl := slog.LevelInfo
	if st == StatePaused || st == StateLost {
		lvl = slog.LevelError
	} else if st == StateWaiting {
		lvl = slog.LevelWarn
	}
	src.log.Log(context.Background(), lvl, "snowflake "+st.String(), "worker", ev.Worker, "until", until, "reason", reason)
	if src.cfg.OnEvent != nil {
		src.evMu.Lock()
		src.cfg.OnEvent(ev)
		src.evMu.Unlock()
	}
}

// leaseHolds reports whether the persisted lease reaches more than a
// quarter of LeaseAhead (one renewal interval) past now: enough to resume
// serving on without a renewal.
func (src *Source) leaseHolds(now time.Time) bool {
	c := src.cur.Load()
	return c != nil && c.leased.Load()-now.UnixNano() > int64(src.cfg.LeaseAhead/4)
}

// stepDown is how long before its persisted lease runs out a serving
// Source whose renewals fail stops serving: it serves on the time it
// leased almost to the end (Fill never makes an id past the lease, so
// this margin only gives the state room to change before Fill would
// fail).
func (src *Source) stepDown() time.Duration { return src.cfg.LeaseAhead / 8 }

// leaseServes reports whether the persisted lease reaches more than
// stepDown past now: a serving Source may go on serving.
func (src *Source) leaseServes(now time.Time) bool {
	c := src.cur.Load()
	return c != nil && c.leased.Load()-now.UnixNano() > int64(src.stepDown())
}

// renew extends the persisted lease to now+LeaseAhead. With a ClaimTTL it
// also confirms the claim (a Lease of the lease already held) when half
// of the fence is used up, even while the clock gives no higher lease.
func (src *Source) renew(ctx context.Context, now time.Time) error {
	c := src.cur.Load()
	if c == nil || c.dead.Load() {
		return fmt.Errorf("%w: no registry", ErrNotRegistered)
	}
	if src.lapsed(c) {
		src.lapse(c)
		return fmt.Errorf("%w: %w", ErrNotRegistered, ErrClaimLapsed)
	}
	// A renewal expected to take e (LeaseTimer: a registry far away)
	// leases e further ahead, so the lease still reaches LeaseAhead past
	// the clock when it is confirmed, and gets twice e to finish.
	e := src.leaseTime(c)
	until := now.Add(src.cfg.LeaseAhead + e)
	if held := c.leased.Load(); until.UnixNano() <= held {
		if !src.fenceDue(c) {
			return nil
		}
		until = time.Unix(0, held)
	}
	reg := c.reg
	// A registry that hangs must not keep a serving Source past the point
	// where it has to stop (its lease holding for less than stepDown):
	// bound the call by that point, so the caller can still step down in
	// time.
	timeout := max(src.cfg.LeaseAhead/2, 2*e)
	if src.State() == StateServing {
		left := time.Duration(c.leased.Load()-now.UnixNano()) - src.stepDown()
		timeout = max(min(timeout, left), src.cfg.LeaseAhead/16)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := src.monoNow()
	if err := reg.Lease(ctx, until); err != nil {
		return err
	}
	// The claim held at some point after start: no other process can hold
	// it before start+ttl. A Lease that returned after that bound raises
	// the fence to a point already past, so it does not revive c.
	if c.ttl > 0 {
		raise(&c.fence, start+int64(c.ttl))
	}
	raise(&c.leased, until.UnixNano())
	return nil
}

// reach is how far past its clock a process's lease on reg may reach:
// LeaseAhead, and up to as much again on a registry that times its leases
// (leaseTime).
func (src *Source) reach(reg Registry) time.Duration {
	if _, ok := reg.(LeaseTimer); ok {
		return 2 * src.cfg.LeaseAhead
	}
	return src.cfg.LeaseAhead
}

// leaseTime is how long a Lease of c's registry is expected to take
// (LeaseTimer), at most LeaseAhead: a lease reaches at most twice
// LeaseAhead past the clock (the wait of a worker id with no lease on
// record counts on it).
func (src *Source) leaseTime(c *claim) time.Duration {
	if t, ok := c.reg.(LeaseTimer); ok {
		return min(max(t.LeaseTime(), 0), src.cfg.LeaseAhead)
	}
	return 0
}

// run renews the lease, resumes a waiting or paused Source once its clock
// is past the last time used, and re-registers after a lost claim.
func (src *Source) run() {
	defer close(src.done)
	t := src.cfg.Clock.NewTicker(src.check)
	defer t.Stop()
	nextRenew := time.Time{}
	failing := false
	for {
		src.closeStale()
		c := src.cur.Load()
		var lost <-chan struct{}
		if c != nil {
			lost = c.reg.Lost()
		}
		select {
		case <-src.ctx.Done():
			return
		case <-lost:
			src.relost(c, "the registry reported the claim lost", nil)
			continue
		case <-t.C():
		}
		if c != nil && src.lapsed(c) {
			src.lapse(c)
			continue
		}
		if st := src.State(); c == nil && st != StateLost && st != StateClosed {
			// The registration was dropped under a change to serving (a
			// Fill found the claim lapsed while this loop renewed it, and
			// the loop then resumed serving): claim again rather than stay
			// "serving" with nothing to serve.
			src.setState(StateLost, time.Time{}, "no registration")
			continue
		}
		now := src.cfg.Clock.Now()
		switch src.State() {
		case StateLost:
			if err := src.register(src.ctx, false); err != nil {
				src.log.Warn("snowflake: re-register failed", "err", err)
				if clock.Sleep(src.ctx, src.cfg.Clock, src.retry) != nil {
					return
				}
			}
			continue
		case StateWaiting, StatePaused:
			src.mu.Lock()
			until := src.until
			src.mu.Unlock()
			if !now.Before(until) {
				// Lease first, so the first ids do not fail for want of one;
				// without a renewal, resume only while the last lease holds
				// for a while.
				if err := src.renew(src.ctx, now); err == nil {
					nextRenew = now.Add(src.cfg.LeaseAhead / 4)
				} else if !src.leaseHolds(src.cfg.Clock.Now()) { // the failed call took time
					if !failing {
						src.log.Warn("snowflake: time lease renewal failing", "err", err)
					}
					failing = true
					continue
				}
				failing = false
				if c == nil || c.dead.Load() {
					continue // dropped meanwhile: the next round claims again
				}
				src.setState(StateServing, time.Time{}, "the clock is past the last time used and the time lease holds")
			}
		}
		if now.Before(nextRenew) && !src.fenceDue(c) {
			continue
		}
		if err := src.renew(src.ctx, now); err != nil {
			if errors.Is(err, ErrNotRegistered) {
				src.relost(c, err.Error(), nil)
				continue
			}
			if !failing {
				src.log.Warn("snowflake: time lease renewal failing", "err", err)
			}
			failing = true
			// Serve on the time already leased, and stop serving just
			// before it runs out (Fill then fails with the cause, a
			// retryable 503); serve again as soon as a renewal works. The
			// clock is read again: the failed call took time.
			now = src.cfg.Clock.Now()
			if src.State() == StateServing && !src.leaseServes(now) {
				reason := fmt.Sprintf("the time lease (up to %v) cannot be renewed: %v", src.Leased().UTC(), err)
				if e := src.leaseTime(c); e > src.cfg.LeaseAhead/4 {
					// Say so where a slow link is the likely cause.
					reason += fmt.Sprintf("; a renewal takes about %v here, beside a lease ahead of %v", e.Round(time.Millisecond), src.cfg.LeaseAhead)
				}
				src.emit(Event{State: StateWaiting, Until: now, cause: fmt.Errorf("%w: %w", ErrLeaseFailed, err), Reason: reason})
			}
			continue
		}
		if failing {
			src.log.Info("snowflake: time lease renewed again")
		}
		failing = false
		nextRenew = now.Add(src.cfg.LeaseAhead / 4)
	}
}

// relost drops registration c (if it is still the current one) after its
// claim was lost: it never serves again, and the run loop closes its
// registry and registers anew.
func (src *Source) relost(c *claim, reason string, cause error) {
	if c == nil {
		return
	}
	c.dead.Store(true) // before cur changes: a Fill holding c sees it
	src.mu.Lock()
	if src.cur.Load() != c {
		src.mu.Unlock()
		return
	}
	src.cur.Store(nil)
	src.stale = append(src.stale, c.reg)
	if src.floor == nil {
		src.floor = map[int64]int64{}
	}
	src.floor[c.worker] = max(src.floor[c.worker], c.leased.Load())
	src.mu.Unlock()
	src.emit(Event{State: StateLost, Reason: reason, cause: cause})
	src.worker.Store(-1)
}

// lapse drops c after its claim went unconfirmed for ClaimTTL.
func (src *Source) lapse(c *claim) {
	src.relost(c, fmt.Sprintf("the claim of worker %d was not confirmed within %v (the registry's claim TTL, on the monotonic clock): another node may hold it now",
		c.worker, c.ttl), ErrClaimLapsed)
}

// closeStale closes the registries of dropped registrations.
func (src *Source) closeStale() {
	src.mu.Lock()
	stale := src.stale
	src.stale = nil
	src.mu.Unlock()
	for _, reg := range stale {
		_ = reg.Close()
	}
}

// Past is the highest time lease of every worker id this Source held and
// lost (or let lapse): ids of it may have been made up to there.
func (src *Source) Past() map[int64]time.Time {
	src.mu.Lock()
	defer src.mu.Unlock()
	out := make(map[int64]time.Time, len(src.floor))
	for w, ns := range src.floor {
		if ns > 0 {
			out[w] = time.Unix(0, ns)
		}
	}
	return out
}

// State is the Source's state now.
func (src *Source) State() State { return State(src.state.Load()) }

// Worker is the worker id in use, or -1 while there is none.
func (src *Source) Worker() int64 { return src.worker.Load() }

// Layout is the layout of the ids.
func (src *Source) Layout() Layout { return src.s.l }

// Leased is the time up to which the lease of the current registration
// is persisted; zero while there is none.
func (src *Source) Leased() time.Time {
	c := src.cur.Load()
	if c == nil {
		return time.Time{}
	}
	ns := c.leased.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// HeldWorkers is the count of the current registration's registry
// (HeldCounter): the worker ids of its region that a new registration
// would find taken. It asks the backend (give ctx a deadline). An error
// wraps ErrNotServing while there is no live registration, and
// errors.ErrUnsupported for a registry that counts none (Static).
func (src *Source) HeldWorkers(ctx context.Context) (int, error) {
	c := src.cur.Load()
	if c == nil || c.dead.Load() {
		return 0, fmt.Errorf("%w: no registration to count the worker ids with", ErrNotServing)
	}
	h, ok := c.reg.(HeldCounter)
	if !ok {
		return 0, fmt.Errorf("%w: the registry does not count its worker ids", errors.ErrUnsupported)
	}
	return h.Held(ctx)
}

// Holds is the worker id whose ids may still be handed out: that of the
// current registration, while it is neither lost nor past its fence (the
// registry's ClaimTTL after the last confirmation, on the monotonic clock).
// ok is false when there is none: ids made earlier (in a ring buffer) must
// then be thrown away. A registration found past its fence is dropped.
func (src *Source) Holds() (worker int64, ok bool) {
	c := src.cur.Load()
	if c == nil || c.dead.Load() {
		return -1, false
	}
	if src.lapsed(c) {
		src.lapse(c)
		return -1, false
	}
	return c.worker, true
}

// NotServing is nil while the Source serves, else the error a Fill gets
// now: it wraps ErrNotServing and says why (a cause such as
// ErrLeaseFailed, or until when the clock is waited for).
func (src *Source) NotServing() error {
	if st := src.State(); st != StateServing {
		return src.notServing(st)
	}
	return nil
}

// notServing is the error for a Source that is not serving.
func (src *Source) notServing(st State) error {
	src.mu.Lock()
	until, reason, cause := src.until, src.reason, src.cause
	src.mu.Unlock()
	switch {
	case cause != nil:
		return fmt.Errorf("%w: %s: %s (%w)", ErrNotServing, st, reason, cause)
	case st == StateWaiting, st == StatePaused:
		return fmt.Errorf("%w: %s: %s; back after %v", ErrNotServing, st, reason, until.UTC().Format(time.RFC3339Nano))
	default:
		return fmt.Errorf("%w: %s: %s", ErrNotServing, st, reason)
	}
}

// dropped is the error of a Fill that found no registration, or c
// dropped: the state's, or (while the state still says serving, the drop
// being under way) one of its own.
func (src *Source) dropped(c *claim) error {
	st := src.State()
	if st != StateServing {
		return src.notServing(st)
	}
	if c == nil {
		return fmt.Errorf("%w: %s: no registration", ErrNotServing, StateLost)
	}
	return fmt.Errorf("%w: %s: the registration of worker %d was dropped", ErrNotServing, StateLost, c.worker)
}

// Fill fills a prefix of dst with fresh ids without waiting for the clock
// and returns its length: up to a whole tick at a time, borrowing future
// ticks up to BorrowAhead and never past the persisted lease. It returns 0
// and a nil error when the ticks it may use are used up (the clock must
// move on). An error wraps ErrNotServing (the Source pauses itself when it
// finds the clock behind the last tick used by more than BorrowAhead plus
// MaxBackward), ErrExpired or ErrOutOfRange.
func (src *Source) Fill(ctx context.Context, dst []int64) (int, error) {
	// One snapshot: the generator, lease and fence of one registration.
	c := src.cur.Load()
	if st := src.State(); st != StateServing || c == nil || c.dead.Load() {
		return 0, src.dropped(c)
	}
	if src.lapsed(c) {
		// Checked here, not only by the run loop: after a freeze (SIGSTOP)
		// a caller may get here before that loop has run.
		src.lapse(c)
		return 0, src.dropped(c)
	}
	gen := c.gen
	now := src.cfg.Clock.Now()
	limit := min(c.leased.Load(), now.Add(src.cfg.BorrowAhead).UnixNano())
	n, err := gen.Borrow(ctx, dst, time.Unix(0, limit))
	if c.dead.Load() {
		// The registration was dropped while this Fill ran: its ids are a
		// gap, not served after the loss.
		return 0, src.dropped(c)
	}
	if err != nil || n == len(dst) {
		return n, err
	}
	// Short: the clock must move on, unless it went backwards or the lease
	// is not being renewed. Read the clock again: a concurrent Fill with a
	// later reading may have borrowed ahead since ours.
	now = src.cfg.Clock.Now()
	if n == 0 && limit == c.leased.Load() && limit < now.UnixNano() {
		return 0, fmt.Errorf("%w: %w: the time lease (up to %v) is behind the clock: the worker registry cannot be reached",
			ErrNotServing, ErrLeaseFailed, time.Unix(0, limit).UTC())
	}
	if last := gen.Last(); last.Sub(now) > src.cfg.BorrowAhead+src.cfg.MaxBackward+src.s.l.TimeUnit {
		src.setState(StatePaused, last, fmt.Sprintf("the clock moved backwards: it is %v behind the last time used by worker %d",
			last.Sub(now).Round(time.Millisecond), gen.Worker()))
		if n == 0 {
			return 0, fmt.Errorf("%w (%w)", src.notServing(StatePaused), ErrClockBackwards)
		}
	}
	return n, nil
}

// Next fills all of dst, waiting tick by tick while Fill finds none (the
// layout's rate is reached and borrowing is used up, or the clock went back
// by at most MaxBackward). It fails when the Source is not serving or ctx
// ends; on error no id of dst is valid (those filled are a gap).
func (src *Source) Next(ctx context.Context, dst []int64) error {
	n := 0
	for n < len(dst) {
		k, err := src.Fill(ctx, dst[n:])
		if err != nil {
			if ctx.Err() != nil && !errors.Is(err, ErrNotServing) {
				return fmt.Errorf("%w: %w", ErrNotServing, err)
			}
			return err
		}
		n += k
		if n == len(dst) {
			return nil
		}
		if k == 0 {
			if err := sleep(ctx, src.cfg.Clock, src.wait()); err != nil {
				return fmt.Errorf("%w: waiting for the clock to reach the next tick: %w", ErrNotServing, err)
			}
		}
	}
	return nil
}

// wait is how long to wait before Fill can make ids again.
func (src *Source) wait() time.Duration {
	c := src.cur.Load()
	now := src.cfg.Clock.Now()
	d := src.s.l.TimeUnit
	if c != nil {
		lim := time.Unix(0, min(c.leased.Load(), now.Add(src.cfg.BorrowAhead).UnixNano()))
		if w := c.gen.Last().Sub(lim); w > 0 && w < d {
			d = w
		}
	}
	return max(d, 50*time.Microsecond)
}

// Close stops the Source and closes its registry. Idempotent.
func (src *Source) Close() error {
	src.mu.Lock()
	if src.closed {
		src.mu.Unlock()
		return nil
	}
	src.closed = true // from here on setState accepts only StateClosed
	src.mu.Unlock()
	src.setState(StateClosed, time.Time{}, "closed")
	src.mu.Lock()
	c := src.cur.Swap(nil)
	src.mu.Unlock()
	if c != nil {
		c.dead.Store(true)
	}
	src.cancel()
	<-src.done
	src.closeStale()
	if c != nil {
		src.recordStop(c)
		return c.reg.Close()
	}
	return nil
}

// recordStop gives c's registry, if it keeps a stop record
// (StopRecorder), the last time c's generator used. c is dead, so no id of
// it is served from here on: a Fill that raced with Close finds c dead
// after its Borrow and discards what it made, and Last takes the
// generator's lock, so it covers every Borrow that ran before. A claim
// that was lost, or lapsed, gets no record: another process may hold the
// worker id.
func (src *Source) recordStop(c *claim) {
	sr, ok := c.reg.(StopRecorder)
	if !ok || src.lapsed(c) {
		return
	}
	select {
	case <-c.reg.Lost():
		return
	default:
	}
	used := c.gen.Last()
	if used.IsZero() {
		return
	}
	if err := sr.RecordStop(c.local, used); err != nil {
		src.log.Warn("snowflake: no stop record: a restart waits out the whole time lease", "worker", c.worker, "err", err)
	}
}
