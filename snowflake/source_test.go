package snowflake_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/snowflake"
)

// smallLayout has 4 ids per ms, so that tests use up ticks (and borrow
// future ones) with a few dozen ids.
var smallLayout = snowflake.Layout{TimeBits: 51, WorkerBits: 10, SequenceBits: 2}

// Source settings of the tests: short enough that a few ms of fake time
// cross them, long enough to be several ticks.
const (
	testLeaseAhead  = 100 * time.Millisecond
	testBorrowAhead = 20 * time.Millisecond
	testMaxBackward = 5 * time.Millisecond
)

// memBackend is the shared state of a worker registry: what survives a
// restart of a Source (and of each memRegistry it opens). It hands out
// worker id fixed if that is set, else the lowest id not held.
type memBackend struct {
	mu        sync.Mutex
	fixed     int64 // -1: the lowest free id
	leases    map[int64]time.Time
	held      map[int64]bool
	failLease error // Lease fails with it while set
	hangLease bool  // Lease blocks until its ctx ends while set
	openErr   error // Open fails with it while set
	regs      []*memRegistry
	ttl       time.Duration // ClaimTTL of its registries (0: no fence)
	fresh     bool          // Registration.Fresh
	leaseOK   int           // Lease calls that succeeded
	// onRegister, if set, runs (without b.mu) at the end of every
	// Register: a test advances a clock there, as a slow registry would.
	onRegister func()
}

func newBackend(fixed int64) *memBackend {
	return &memBackend{fixed: fixed, leases: map[int64]time.Time{}, held: map[int64]bool{}}
}

// Open is a SourceConfig.Open.
func (b *memBackend) Open(ctx context.Context) (snowflake.Registry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openErr != nil {
		return nil, b.openErr
	}
	return b.newRegistryLocked(), nil
}

// node is another node's registry on b, opened whatever openErr says.
func (b *memBackend) node() *memRegistry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.newRegistryLocked()
}

func (b *memBackend) newRegistryLocked() *memRegistry {
	r := &memRegistry{b: b, worker: -1, lost: make(chan struct{})}
	b.regs = append(b.regs, r)
	return r
}

// lease is the lease persisted for worker.
func (b *memBackend) lease(worker int64) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leases[worker]
}

func (b *memBackend) setLease(worker int64, until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leases[worker] = until
}

// leasedBefore puts a lease of a minute before t0 on record for the first
// workers: ids served before, so a registration need not wait out a
// stopped holder of a worker id with no lease on record.
func (b *memBackend) leasedBefore() {
	for w := range int64(8) {
		b.setLease(w, t0.Add(-time.Minute))
	}
}

// forget deletes worker's lease, as an operator deleting a key or row.
func (b *memBackend) forget(worker int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.leases, worker)
}

func (b *memBackend) setFailLease(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failLease = err
}

func (b *memBackend) setOpenErr(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.openErr = err
}

// registries are the registries opened so far, oldest first.
func (b *memBackend) registries() []*memRegistry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.regs)
}

// memRegistry is one node's registry on a memBackend.
type memRegistry struct {
	b        *memBackend
	worker   int64 // guarded by b.mu
	closed   bool  // guarded by b.mu
	lost     chan struct{}
	loseOnce sync.Once
}

func (r *memRegistry) Register(ctx context.Context) (snowflake.Registration, error) {
	if err := ctx.Err(); err != nil {
		return snowflake.Registration{}, err
	}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.closed {
		return snowflake.Registration{}, snowflake.ErrRegistryClosed
	}
	w := b.fixed
	if w < 0 {
		for w = 0; b.held[w]; w++ {
		}
	}
	b.held[w] = true
	r.worker = w
	reg := snowflake.Registration{Worker: w, LastLease: b.leases[w], Fresh: b.fresh}
	if f := b.onRegister; f != nil {
		b.mu.Unlock()
		f()
		b.mu.Lock()
	}
	return reg, nil
}

func (r *memRegistry) Lease(ctx context.Context, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b := r.b
	b.mu.Lock()
	hang := b.hangLease
	b.mu.Unlock()
	if hang {
		<-ctx.Done()
		return fmt.Errorf("%w: %w", snowflake.ErrRegistryUnavailable, ctx.Err())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case r.closed:
		return snowflake.ErrRegistryClosed
	case r.worker < 0:
		return snowflake.ErrNotRegistered
	case b.failLease != nil:
		return fmt.Errorf("%w: %w", snowflake.ErrRegistryUnavailable, b.failLease)
	}
	if until.After(b.leases[r.worker]) {
		b.leases[r.worker] = until
	}
	b.leaseOK++
	return nil
}

// ClaimTTL implements snowflake.ClaimTTLer with the backend's ttl.
func (r *memRegistry) ClaimTTL() time.Duration { return r.b.ttl }

// leaseCalls is how many Lease calls succeeded.
func (b *memBackend) leaseCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leaseOK
}

func (r *memRegistry) Lost() <-chan struct{} { return r.lost }

// lose closes Lost, as a backend does when its claim expired.
func (r *memRegistry) lose() { r.loseOnce.Do(func() { close(r.lost) }) }

func (r *memRegistry) Close() error {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if !r.closed && r.worker >= 0 {
		delete(b.held, r.worker)
	}
	r.closed = true
	return nil
}

func (r *memRegistry) isClosed() bool {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	return r.closed
}

var _ snowflake.Registry = (*memRegistry)(nil)

// eventLog records a Source's events.
type eventLog struct {
	mu  sync.Mutex
	evs []snowflake.Event
}

func (l *eventLog) add(ev snowflake.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
}

func (l *eventLog) events() []snowflake.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.evs)
}

func (l *eventLog) states() []snowflake.State {
	var st []snowflake.State
	for _, ev := range l.events() {
		st = append(st, ev.State)
	}
	return st
}

// last is the last event of state st; ok false if there is none.
func (l *eventLog) last(st snowflake.State) (ev snowflake.Event, ok bool) {
	evs := l.events()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].State == st {
			return evs[i], true
		}
	}
	return snowflake.Event{}, false
}

// discard is a logger for Sources under test.
var discard = slog.New(slog.DiscardHandler)

// sourceConfig is the tests' SourceConfig on b and clock: smallLayout, no
// random start, the test* durations, events into log.
func sourceConfig(b *memBackend, clock *fakeClock, log *eventLog) snowflake.SourceConfig {
	return snowflake.SourceConfig{
		Open:        b.Open,
		Layout:      smallLayout,
		RandomStart: -1,
		Clock:       clock.Clock(),
		LeaseAhead:  testLeaseAhead,
		BorrowAhead: testBorrowAhead,
		MaxBackward: testMaxBackward,
		OnEvent:     log.add,
		Logger:      discard,
		NewWorker:   func(context.Context, int64) bool { return true }, // TestSourceWaitsOutUnknownWorker tests the wait
	}
}

// startSource starts a Source on b with a fake clock at t0 (unless clock is
// given) and the config of sourceConfig after edit; it is closed at cleanup.
func startSource(tb testing.TB, b *memBackend, clock *fakeClock, edit func(*snowflake.SourceConfig)) (*snowflake.Source, *fakeClock, *eventLog) {
	tb.Helper()
	if clock == nil {
		clock = &fakeClock{t: t0}
	}
	log := &eventLog{}
	cfg := sourceConfig(b, clock, log)
	if edit != nil {
		edit(&cfg)
	}
	src, err := snowflake.StartSource(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("StartSource: %v", err)
	}
	tb.Cleanup(func() { _ = src.Close() })
	return src, clock, log
}

// waitFor polls cond until it holds; the deadline is generous because the
// Source's goroutine runs on the real clock of a possibly busy machine.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	testenv.Eventually(tb, what, 10*time.Second, cond)
}

func waitState(tb testing.TB, src *snowflake.Source, st snowflake.State) {
	tb.Helper()
	waitFor(tb, "state "+st.String(), func() bool { return src.State() == st })
}

// fill calls Fill and fails the test on error.
func fill(tb testing.TB, src *snowflake.Source, n int) []int64 {
	tb.Helper()
	dst := make([]int64, n)
	k, err := src.Fill(context.Background(), dst)
	if err != nil {
		tb.Fatalf("Fill(%d): %v", n, err)
	}
	return dst[:k]
}

// issued collects ids and checks that none is issued twice.
type issued struct {
	tb   testing.TB
	seen map[int64]string
}

func newIssued(tb testing.TB) *issued { return &issued{tb: tb, seen: map[int64]string{}} }

func (s *issued) add(from string, ids ...int64) {
	s.tb.Helper()
	for _, id := range ids {
		if prev, dup := s.seen[id]; dup {
			s.tb.Fatalf("id %d (%+v) issued twice: by %s and by %s", id, smallLayout.Decompose(id), prev, from)
		}
		s.seen[id] = from
	}
}

// checkIDs checks that ids are increasing, of worker, and have ticks within
// [from, lease]: never before the tick of from, never beyond the persisted
// lease.
func checkIDs(tb testing.TB, ids []int64, worker int64, from, lease time.Time) {
	tb.Helper()
	for i, id := range ids {
		d := smallLayout.Decompose(id)
		switch {
		case i > 0 && id <= ids[i-1]:
			tb.Fatalf("id %d = %d not above %d", i, id, ids[i-1])
		case d.Worker != worker:
			tb.Fatalf("id %d (%+v) of worker %d, want %d", i, d, d.Worker, worker)
		case d.Time.After(lease):
			tb.Fatalf("id %d has time %v, beyond the persisted lease %v", i, d.Time, lease)
		case d.Time.Before(from.Truncate(time.Millisecond)):
			tb.Fatalf("id %d has time %v, before %v", i, d.Time, from)
		}
	}
}

// runLoops counts the goroutines running a Source's lease and clock loop.
func runLoops() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "snowflake.(*Source).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func TestStartSourceInvalidConfig(t *testing.T) {
	b := newBackend(-1)
	clock := &fakeClock{t: t0}
	tests := []struct {
		name string
		edit func(*snowflake.SourceConfig)
		want error
	}{
		{"no Open", func(c *snowflake.SourceConfig) { c.Open = nil }, snowflake.ErrInvalidConfig},
		{"bad layout", func(c *snowflake.SourceConfig) {
			c.Layout = snowflake.Layout{TimeBits: 40, WorkerBits: 10, SequenceBits: 12}
		}, snowflake.ErrInvalidLayout},
		{"lease shorter than 4 ticks", func(c *snowflake.SourceConfig) { c.LeaseAhead = 3 * time.Millisecond }, snowflake.ErrInvalidConfig},
		{"lease negative", func(c *snowflake.SourceConfig) { c.LeaseAhead = -time.Second }, snowflake.ErrInvalidConfig},
		{"lease shorter than 4 s ticks", func(c *snowflake.SourceConfig) { c.Layout = snowflake.UidGenLayout(t0.Truncate(time.Second)) }, snowflake.ErrInvalidConfig},
		{"borrow beyond half the lease", func(c *snowflake.SourceConfig) { c.BorrowAhead = testLeaseAhead/2 + time.Millisecond }, snowflake.ErrInvalidConfig},
		{"MaxStartWait negative", func(c *snowflake.SourceConfig) { c.MaxStartWait = -time.Second }, snowflake.ErrInvalidConfig},
		{"epoch in the future", func(c *snowflake.SourceConfig) {
			c.Layout = snowflake.Layout{TimeBits: 51, WorkerBits: 10, SequenceBits: 2, Epoch: ms0.Add(time.Hour)}
		}, snowflake.ErrInvalidLayout},
		{"epoch a tick ahead", func(c *snowflake.SourceConfig) {
			c.Layout = snowflake.Layout{TimeBits: 51, WorkerBits: 10, SequenceBits: 2, Epoch: ms0.Add(time.Millisecond)}
		}, snowflake.ErrInvalidLayout},
		{"time bits run out", func(c *snowflake.SourceConfig) {
			c.Layout = snowflake.Layout{TimeBits: 20, WorkerBits: 10, SequenceBits: 33, Epoch: ms0.Add(-(1 << 20) * time.Millisecond)}
		}, snowflake.ErrExpired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sourceConfig(b, clock, &eventLog{})
			tc.edit(&cfg)
			src, err := snowflake.StartSource(context.Background(), cfg)
			if !errors.Is(err, tc.want) {
				if src != nil {
					src.Close()
				}
				t.Fatalf("StartSource: %v, want %v", err, tc.want)
			}
		})
	}
	if regs := b.registries(); len(regs) != 0 {
		t.Errorf("an invalid config opened %d registries", len(regs))
	}
}

// failRegistry fails Register with err, or hands out worker.
type failRegistry struct {
	memRegistry
	err    error
	worker int64
}

func (r *failRegistry) Register(context.Context) (snowflake.Registration, error) {
	return snowflake.Registration{Worker: r.worker}, r.err
}

func TestStartSourceRegistryErrors(t *testing.T) {
	down := errors.New("backend down")
	tests := []struct {
		name      string
		open      error
		register  error
		worker    int64
		want      error
		wantClose bool
	}{
		{name: "open fails", open: down, want: down},
		{name: "register fails", register: down, want: down, wantClose: true},
		{name: "worker beyond layout", worker: smallLayout.MaxWorker() + 1, want: snowflake.ErrNoWorker, wantClose: true},
		{name: "negative worker", worker: -1, want: snowflake.ErrNoWorker, wantClose: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(-1)
			reg := &failRegistry{memRegistry: memRegistry{b: b, worker: -1, lost: make(chan struct{})}, err: tc.register, worker: tc.worker}
			cfg := sourceConfig(b, &fakeClock{t: t0}, &eventLog{})
			cfg.Open = func(context.Context) (snowflake.Registry, error) {
				if tc.open != nil {
					return nil, tc.open
				}
				return reg, nil
			}
			src, err := snowflake.StartSource(context.Background(), cfg)
			if !errors.Is(err, tc.want) {
				if src != nil {
					src.Close()
				}
				t.Fatalf("StartSource: %v, want %v", err, tc.want)
			}
			if got := reg.isClosed(); got != tc.wantClose {
				t.Errorf("registry closed = %v, want %v", got, tc.wantClose)
			}
		})
	}
}

func TestSourceServes(t *testing.T) {
	b := newBackend(-1)
	src, clock, log := startSource(t, b, nil, nil)
	if st := src.State(); st != snowflake.StateServing {
		t.Fatalf("State after start = %v, want serving", st)
	}
	if src.Worker() != 0 {
		t.Errorf("Worker = %d, want 0", src.Worker())
	}
	want := smallLayout
	want.TimeUnit, want.Epoch = time.Millisecond, snowflake.LeafLayout().Epoch
	if src.Layout() != want {
		t.Errorf("Layout = %v, want %v", src.Layout(), want)
	}
	// Leased before serving: the first ids never wait for the registry.
	lease := t0.Add(testLeaseAhead)
	if !src.Leased().Equal(lease) || !b.lease(0).Equal(lease) {
		t.Errorf("Leased = %v, registry lease %v, want %v", src.Leased(), b.lease(0), lease)
	}
	if evs := log.events(); len(evs) != 1 || evs[0].State != snowflake.StateServing || evs[0].Worker != 0 {
		t.Errorf("events = %+v, want one serving event of worker 0", evs)
	}

	// A large Fill takes the current tick and borrows up to BorrowAhead.
	ids := fill(t, src, 1000)
	if want := 4 * (1 + int(testBorrowAhead/time.Millisecond)); len(ids) != want {
		t.Errorf("Fill(1000) = %d ids, want %d (this tick and %v borrowed)", len(ids), want, testBorrowAhead)
	}
	checkIDs(t, ids, 0, t0, t0.Add(testBorrowAhead))
	if d := smallLayout.Decompose(ids[0]); !d.Time.Equal(t0.Truncate(time.Millisecond)) || d.Sequence != 0 {
		t.Errorf("first id %+v, want sequence 0 at %v", d, t0.Truncate(time.Millisecond))
	}
	// Used up: 0 and no error until the clock moves on.
	if n, err := src.Fill(context.Background(), make([]int64, 10)); n != 0 || err != nil {
		t.Fatalf("Fill with borrowing used up = %d, %v, want 0, nil", n, err)
	}
	clock.Set(t0.Add(time.Millisecond))
	more := fill(t, src, 10)
	if len(more) != 4 || more[0] <= ids[len(ids)-1] {
		t.Errorf("Fill a tick later = %v, want 4 ids above %d", more, ids[len(ids)-1])
	}
}

func TestSourceNext(t *testing.T) {
	src, clock, _ := startSource(t, newBackend(-1), nil, nil)
	dst := make([]int64, 10)
	if err := src.Next(context.Background(), dst); err != nil {
		t.Fatal(err)
	}
	checkIDs(t, dst, 0, t0, t0.Add(testBorrowAhead))

	// Next waits for the clock when borrowing is used up.
	fill(t, src, 1000)
	done := make(chan error, 1)
	go func() { done <- src.Next(context.Background(), dst) }()
	clock.Set(t0.Add(testBorrowAhead + time.Millisecond))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next still waiting 10s after the clock moved on")
	}
	checkIDs(t, dst, 0, t0.Add(testBorrowAhead+time.Millisecond), t0.Add(testLeaseAhead))

	// Its context ends the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	fill(t, src, 1000)
	// Not always wrapped in ErrNotServing: Borrow may give ctx.Err() as is.
	if err := src.Next(ctx, dst); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Next with its context ending = %v, want DeadlineExceeded", err)
	}
}

// TestSourceRenewsLease: the lease is kept LeaseAhead ahead of the clock.
func TestSourceRenewsLease(t *testing.T) {
	b := newBackend(-1)
	// The Source reads clk and its loop ticks on it: each step of the
	// clock is a tick that finds the lease due.
	clk := clock.NewFake(t0)
	src, _, _ := startSource(t, b, nil, func(c *snowflake.SourceConfig) { c.Clock = clk })
	testenv.Armed(t, clk, 1) // the loop's ticker
	now := t0
	for range 5 {
		now = now.Add(testLeaseAhead / 2)
		clk.Set(now)
		want := now.Add(testLeaseAhead)
		waitFor(t, "lease renewed to "+want.String(), func() bool {
			return b.lease(0).Equal(want) && src.Leased().Equal(want)
		})
	}
}

// TestSourceFillWithinLease moves the clock forward in random steps, now and
// then back, with leases failing now and then, and checks that no id is
// issued twice or beyond the lease the registry holds.
func TestSourceFillWithinLease(t *testing.T) {
	for _, borrow := range []time.Duration{-1, testBorrowAhead, testLeaseAhead / 2} {
		t.Run(fmt.Sprintf("borrow %v", borrow), func(t *testing.T) {
			b := newBackend(-1)
			src, clock, log := startSource(t, b, nil, func(c *snowflake.SourceConfig) { c.BorrowAhead = borrow })
			rng := rand.New(rand.NewPCG(1, uint64(borrow)))
			seen := newIssued(t)
			now, leaseDown := t0, false
			for i := range 2000 {
				switch r := rng.IntN(100); {
				case r < 60:
					now = now.Add(time.Duration(rng.IntN(3000)) * time.Microsecond)
				case r < 63:
					now = now.Add(-time.Duration(rng.IntN(8000)) * time.Microsecond)
				case r < 65:
					leaseDown = !leaseDown
					if leaseDown {
						b.setFailLease(errors.New("down"))
					} else {
						b.setFailLease(nil)
					}
				}
				clock.Set(now)
				dst := make([]int64, 1+rng.IntN(60))
				n, err := src.Fill(context.Background(), dst)
				// The lease only moves forward: the one read after Fill
				// is at least the one its ids were made under.
				lease := b.lease(0)
				if err != nil && !errors.Is(err, snowflake.ErrNotServing) {
					t.Fatalf("step %d: Fill: %v", i, err)
				}
				seen.add(fmt.Sprintf("fill %d", i), dst[:n]...)
				checkIDs(t, dst[:n], 0, time.Time{}, lease)
				switch {
				case errors.Is(err, snowflake.ErrLeaseFailed) && !leaseDown:
					// The fake clock outran the loop's renewal.
					waitFor(t, "renewal", func() bool { return b.lease(0).After(now) })
				case src.State() == snowflake.StatePaused:
					// Once the clock is past the pause, the loop resumes.
					// (It renews the lease first: not while the lease is down.)
					if ev, _ := log.last(snowflake.StatePaused); !now.Before(ev.Until) && !leaseDown {
						waitState(t, src, snowflake.StateServing)
					}
				}
			}
			if len(seen.seen) < 500 {
				t.Errorf("only %d ids issued", len(seen.seen))
			}
		})
	}
}

func TestSourceLeaseFails(t *testing.T) {
	b := newBackend(-1)
	src, clock, _ := startSource(t, b, nil, func(c *snowflake.SourceConfig) { c.BorrowAhead = testLeaseAhead / 2 })
	lease := t0.Add(testLeaseAhead)
	down := errors.New("registry down")
	b.setFailLease(down)

	// Up to the lease ids are made as usual, never beyond it.
	seen := newIssued(t)
	for now := t0; !now.After(lease); now = now.Add(7 * time.Millisecond) {
		clock.Set(now)
		ids := fill(t, src, 1000)
		seen.add(now.String(), ids...)
		checkIDs(t, ids, 0, now, lease)
	}
	clock.Set(lease)
	seen.add("at the lease", fill(t, src, 1000)...)

	// Once the clock is past the lease, Fill and Next fail.
	clock.Set(lease.Add(time.Millisecond))
	dst := make([]int64, 10)
	n, err := src.Fill(context.Background(), dst)
	if !errors.Is(err, snowflake.ErrLeaseFailed) || !errors.Is(err, snowflake.ErrNotServing) || n != 0 {
		t.Fatalf("Fill past a lease not renewed = %d, %v, want ErrLeaseFailed", n, err)
	}
	if err := src.Next(context.Background(), dst); !errors.Is(err, snowflake.ErrLeaseFailed) {
		t.Fatalf("Next past a lease not renewed = %v, want ErrLeaseFailed", err)
	}
	if st := src.State(); st != snowflake.StateServing && st != snowflake.StateWaiting {
		t.Errorf("State = %v, want serving or waiting (the registry may come back)", st)
	}

	// The registry comes back: the lease is renewed and ids flow again.
	b.setFailLease(nil)
	waitFor(t, "ids after the registry came back", func() bool {
		n, err := src.Fill(context.Background(), dst)
		if err != nil && !errors.Is(err, snowflake.ErrLeaseFailed) {
			t.Fatalf("Fill: %v", err)
		}
		seen.add("after", dst[:n]...)
		return n > 0
	})
	if got, want := b.lease(0), lease.Add(time.Millisecond+testLeaseAhead); !got.Equal(want) {
		t.Errorf("lease renewed to %v, want %v", got, want)
	}
}

// TestSourceLargeBackwardStep: a step back beyond what was borrowed plus
// MaxBackward pauses the Source until the clock is past the last tick used.
func TestSourceLargeBackwardStep(t *testing.T) {
	b := newBackend(-1)
	src, clock, log := startSource(t, b, nil, nil)
	seen := newIssued(t)
	seen.add("before", fill(t, src, 1000)...) // up to t0+BorrowAhead
	last := t0.Truncate(time.Millisecond).Add(testBorrowAhead + time.Millisecond)

	clock.Set(t0.Add(-time.Second))
	dst := make([]int64, 10)
	n, err := src.Fill(context.Background(), dst)
	if !errors.Is(err, snowflake.ErrNotServing) || !errors.Is(err, snowflake.ErrClockBackwards) || n != 0 {
		t.Fatalf("Fill after the clock stepped back 1s = %d, %v, want ErrNotServing and ErrClockBackwards", n, err)
	}
	if st := src.State(); st != snowflake.StatePaused {
		t.Fatalf("State = %v, want paused", st)
	}
	ev, ok := log.last(snowflake.StatePaused)
	if !ok || !ev.Until.Equal(last) || ev.Worker != 0 || ev.Reason == "" {
		t.Fatalf("paused event %+v (found %v), want until %v, worker 0, a reason", ev, ok, last)
	}
	err = src.Next(context.Background(), dst)
	if !errors.Is(err, snowflake.ErrNotServing) {
		t.Fatalf("Next while paused = %v, want ErrNotServing", err)
	}
	if !strings.Contains(err.Error(), "paused") {
		t.Errorf("error %q does not say paused", err)
	}

	// Just short of the last tick used: still paused, whatever the loop does.
	clock.Set(last.Add(-time.Nanosecond))
	if n, err := src.Fill(context.Background(), dst); !errors.Is(err, snowflake.ErrNotServing) {
		t.Fatalf("Fill just before the last tick used = %d, %v, want ErrNotServing", n, err)
	}
	clock.Set(last)
	waitState(t, src, snowflake.StateServing)
	ids := fill(t, src, 10)
	seen.add("after", ids...)
	checkIDs(t, ids, 0, last, b.lease(0))
	if got := log.states(); !slices.Equal(got, []snowflake.State{snowflake.StateServing, snowflake.StatePaused, snowflake.StateServing}) {
		t.Errorf("events %v", got)
	}
}

// TestSourceBorrowsOverBackwardStep: a step back within what may be
// borrowed goes on with ids ahead of the clock, without pausing.
func TestSourceBorrowsOverBackwardStep(t *testing.T) {
	src, clock, _ := startSource(t, newBackend(-1), nil, func(c *snowflake.SourceConfig) { c.BorrowAhead = testLeaseAhead / 2 })
	seen := newIssued(t)
	seen.add("first", fill(t, src, 4)...)
	clock.Set(t0.Add(-30 * time.Millisecond))
	ids := fill(t, src, 8)
	seen.add("after", ids...)
	if len(ids) != 8 || src.State() != snowflake.StateServing {
		t.Fatalf("Fill after a step back within BorrowAhead = %d ids, state %v", len(ids), src.State())
	}
	checkIDs(t, ids, 0, t0.Add(time.Millisecond), t0.Add(testLeaseAhead))
}

// TestSourceSmallBackwardStep: Next waits out a step back of at most
// MaxBackward (beyond what was borrowed) instead of failing.
func TestSourceSmallBackwardStep(t *testing.T) {
	src, clock, log := startSource(t, newBackend(-1), nil, func(c *snowflake.SourceConfig) { c.BorrowAhead = -1 })
	seen := newIssued(t)
	seen.add("first", fill(t, src, 10)...) // the 4 of t0's tick
	clock.Set(t0.Add(-3 * time.Millisecond))
	n, err := src.Fill(context.Background(), make([]int64, 4))
	if n != 0 || err != nil {
		t.Fatalf("Fill 3ms back = %d, %v, want 0, nil", n, err)
	}
	dst := make([]int64, 4)
	done := make(chan error, 1)
	go func() { done <- src.Next(context.Background(), dst) }()
	select {
	case err := <-done:
		t.Fatalf("Next returned %v (ids %v) while the clock is behind", err, dst)
	case <-time.After(20 * time.Millisecond):
	}
	next := t0.Truncate(time.Millisecond).Add(time.Millisecond)
	clock.Set(next)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next still waiting 10s after the clock caught up")
	}
	seen.add("next", dst...)
	checkIDs(t, dst, 0, next, next)
	if got := log.states(); !slices.Equal(got, []snowflake.State{snowflake.StateServing}) {
		t.Errorf("events %v, want only serving", got)
	}
}

// TestSourceRestartClockBehind: a Source started again on the same worker
// with the clock behind its last lease waits for the clock to pass the
// lease, and never issues an id the first one did.
func TestSourceRestartClockBehind(t *testing.T) {
	b := newBackend(7)
	src, clock, _ := startSource(t, b, nil, func(c *snowflake.SourceConfig) { c.BorrowAhead = testLeaseAhead / 2 })
	seen := newIssued(t)
	seen.add("first", fill(t, src, 1000)...)
	clock.Set(t0.Add(testLeaseAhead / 2))
	waitFor(t, "renewal", func() bool { return b.lease(7).After(t0.Add(testLeaseAhead)) })
	seen.add("first", fill(t, src, 1000)...)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	lease := b.lease(7)

	for _, behind := range []time.Duration{time.Second, time.Millisecond, 0} {
		t.Run(fmt.Sprintf("behind %v", behind), func(t *testing.T) {
			clock.Set(lease.Add(-behind))
			src, _, log := startSource(t, b, clock, nil)
			until := lease.Truncate(time.Millisecond).Add(time.Millisecond)
			if st := src.State(); st != snowflake.StateWaiting {
				t.Fatalf("State = %v, want waiting", st)
			}
			ev, ok := log.last(snowflake.StateWaiting)
			if !ok || !ev.Until.Equal(until) || ev.Worker != 7 {
				t.Errorf("waiting event %+v, want until %v", ev, until)
			}
			n, err := src.Fill(context.Background(), make([]int64, 10))
			if !errors.Is(err, snowflake.ErrNotServing) || n != 0 || !strings.Contains(err.Error(), "waiting") {
				t.Fatalf("Fill while waiting = %d, %v, want ErrNotServing", n, err)
			}
			clock.Set(until.Add(-time.Nanosecond))
			if n, err := src.Fill(context.Background(), make([]int64, 10)); !errors.Is(err, snowflake.ErrNotServing) {
				t.Fatalf("Fill 1ns before the lease's next tick = %d, %v, want ErrNotServing", n, err)
			}
			clock.Set(until)
			waitState(t, src, snowflake.StateServing)
			// The first Fill after serving may race the renewal (see
			// TestSourceResumeLeasesFirst): poll.
			var ids []int64
			waitFor(t, "ids", func() bool {
				dst := make([]int64, 1000)
				n, err := src.Fill(context.Background(), dst)
				if err != nil && !errors.Is(err, snowflake.ErrLeaseFailed) {
					t.Fatalf("Fill: %v", err)
				}
				ids = dst[:n]
				return n > 0
			})
			seen.add("restarted", ids...)
			checkIDs(t, ids, 7, until, b.lease(7))
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}
			lease = b.lease(7)
		})
	}
}

func TestStartSourceClockTooFarBehind(t *testing.T) {
	lease := t0.Add(time.Minute)
	for _, tc := range []struct {
		name    string
		maxWait time.Duration
		wantErr bool
	}{
		{"default", 0, true},
		{"short", 59 * time.Second, true},
		{"just enough", time.Minute, false},
		{"long", 2 * time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(3)
			b.setLease(3, lease)
			cfg := sourceConfig(b, &fakeClock{t: t0}, &eventLog{})
			cfg.MaxStartWait = tc.maxWait
			src, err := snowflake.StartSource(context.Background(), cfg)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("StartSource: %v", err)
				}
				defer src.Close()
				if st := src.State(); st != snowflake.StateWaiting {
					t.Errorf("State = %v, want waiting", st)
				}
				return
			}
			if !errors.Is(err, snowflake.ErrClockBackwards) {
				if src != nil {
					src.Close()
				}
				t.Fatalf("StartSource a minute behind the lease = %v, want ErrClockBackwards", err)
			}
			if regs := b.registries(); len(regs) != 1 || !regs[0].isClosed() {
				t.Errorf("registry not closed after a failed start")
			}
			if !b.lease(3).Equal(lease) {
				t.Errorf("lease changed to %v", b.lease(3))
			}
		})
	}
}

// TestSourceLost: a lost claim drops the worker and registers again, on a
// new registry, with a new worker id.
func TestSourceLost(t *testing.T) {
	b := newBackend(-1)
	src, clock, log := startSource(t, b, nil, nil)
	seen := newIssued(t)
	seen.add("worker 0", fill(t, src, 8)...)

	// The claim expires; until ours can open the registry again another
	// node takes worker 0.
	b.setOpenErr(errors.New("not now"))
	first := b.registries()[0]
	first.lose()
	waitState(t, src, snowflake.StateLost)
	if !first.isClosed() {
		t.Error("lost registry not closed")
	}
	waitFor(t, "worker -1", func() bool { return src.Worker() == -1 })
	if n, err := src.Fill(context.Background(), make([]int64, 4)); !errors.Is(err, snowflake.ErrNotServing) || n != 0 {
		t.Fatalf("Fill while lost = %d, %v, want ErrNotServing", n, err)
	}
	if ev, ok := log.last(snowflake.StateLost); !ok || ev.Worker != 0 || ev.Reason == "" {
		t.Errorf("lost event %+v", ev)
	}
	if r, err := b.node().Register(context.Background()); err != nil || r.Worker != 0 {
		t.Fatalf("other node's Register = %+v, %v", r, err)
	}
	b.setOpenErr(nil)

	waitFor(t, "serving as worker 1", func() bool {
		return src.State() == snowflake.StateServing && src.Worker() == 1
	})
	clock.Set(t0.Add(time.Millisecond))
	ids := fill(t, src, 8)
	seen.add("worker 1", ids...)
	checkIDs(t, ids, 1, t0, b.lease(1))
	if got := log.states(); !slices.Equal(got, []snowflake.State{snowflake.StateServing, snowflake.StateLost, snowflake.StateServing}) {
		t.Errorf("events %v", got)
	}
	if ev, _ := log.last(snowflake.StateServing); ev.Worker != 1 {
		t.Errorf("serving event %+v, want worker 1", ev)
	}
}

// TestSourceLostThenWait: a re-registration whose worker's last lease is
// ahead of the clock waits for it, however far (MaxStartWait is for the
// start only).
func TestSourceLostThenWait(t *testing.T) {
	b := newBackend(-1)
	lease := t0.Add(time.Minute)
	b.setLease(1, lease)
	src, clock, log := startSource(t, b, nil, func(c *snowflake.SourceConfig) { c.MaxStartWait = time.Second })
	b.setOpenErr(errors.New("not now"))
	b.registries()[0].lose()
	waitState(t, src, snowflake.StateLost)
	if r, err := b.node().Register(context.Background()); err != nil || r.Worker != 0 {
		t.Fatalf("other node's Register = %+v, %v", r, err)
	}
	b.setOpenErr(nil)

	until := lease.Truncate(time.Millisecond).Add(time.Millisecond)
	waitState(t, src, snowflake.StateWaiting)
	if src.Worker() != 1 {
		t.Fatalf("Worker = %d, want 1", src.Worker())
	}
	if ev, _ := log.last(snowflake.StateWaiting); !ev.Until.Equal(until) || ev.Worker != 1 {
		t.Errorf("waiting event %+v, want worker 1 until %v", ev, until)
	}
	if n, err := src.Fill(context.Background(), make([]int64, 4)); !errors.Is(err, snowflake.ErrNotServing) || n != 0 {
		t.Fatalf("Fill while waiting = %d, %v, want ErrNotServing", n, err)
	}
	clock.Set(until)
	waitState(t, src, snowflake.StateServing)
}

// TestSourceReregisterRetries: while the registry cannot be opened the
// Source stays lost, and registers once it can.
func TestSourceReregisterRetries(t *testing.T) {
	b := newBackend(-1)
	// The Source reads wall, which stays put, and its loop runs on clk's
	// ticker and timers: each try is a step.
	wall, clk := &fakeClock{t: t0}, clock.NewFake(t0)
	src, _, _ := startSource(t, b, wall, func(c *snowflake.SourceConfig) { c.Clock = clock.WithNow(clk, wall.Now) })
	b.setOpenErr(errors.New("down"))
	b.registries()[0].lose()
	waitState(t, src, snowflake.StateLost)
	// Two tries fail: the loop ticks (50ms), fails to register and waits
	// out its retry pause (1s) beside its ticker, twice.
	clk.Advance(50 * time.Millisecond)
	testenv.Armed(t, clk, 2)
	clk.Advance(time.Second)
	testenv.Armed(t, clk, 2)
	if st := src.State(); st != snowflake.StateLost {
		t.Fatalf("State = %v with the registry down, want lost", st)
	}
	b.setOpenErr(nil)
	clk.Advance(time.Second)
	// Worker 0 again, freed by the lost registry: it waits for its own
	// last lease.
	waitState(t, src, snowflake.StateWaiting)
	if src.Worker() != 0 {
		t.Errorf("Worker = %d, want 0", src.Worker())
	}
	wall.Set(t0.Add(testLeaseAhead + time.Millisecond))
	clk.Advance(50 * time.Millisecond)
	waitState(t, src, snowflake.StateServing)
}

func TestSourceClose(t *testing.T) {
	// Sources of earlier tests are closed, though their loops may still
	// show in a dump for a moment.
	waitFor(t, "no run loop", func() bool { return runLoops() == 0 })
	b := newBackend(-1)
	src, _, log := startSource(t, b, nil, nil)
	waitFor(t, "one run loop", func() bool { return runLoops() == 1 })
	for range 2 {
		if err := src.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if st := src.State(); st != snowflake.StateClosed {
		t.Errorf("State after Close = %v", st)
	}
	if got := log.states(); !slices.Equal(got, []snowflake.State{snowflake.StateServing, snowflake.StateClosed}) {
		t.Errorf("events %v, want serving, closed", got)
	}
	if !b.registries()[0].isClosed() {
		t.Error("registry not closed")
	}
	if n, err := src.Fill(context.Background(), make([]int64, 4)); !errors.Is(err, snowflake.ErrNotServing) || n != 0 {
		t.Errorf("Fill after Close = %d, %v, want ErrNotServing", n, err)
	}
	if err := src.Next(context.Background(), make([]int64, 4)); !errors.Is(err, snowflake.ErrNotServing) {
		t.Errorf("Next after Close = %v, want ErrNotServing", err)
	}
	// Close waits for the loop, which may still show in a dump for a moment.
	waitFor(t, "no run loop", func() bool { return runLoops() == 0 })

	// Closed while waiting.
	b.setLease(0, t0.Add(time.Second))
	src, _, _ = startSource(t, b, nil, nil)
	if st := src.State(); st != snowflake.StateWaiting {
		t.Fatalf("State = %v, want waiting", st)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if st := src.State(); st != snowflake.StateClosed {
		t.Errorf("State after Close = %v", st)
	}
	waitFor(t, "no run loop", func() bool { return runLoops() == 0 })
}

// TestSourceConcurrent: goroutines take ids with Next and Fill while the
// clock runs; none is issued twice or beyond the lease. (A caller may find
// the Source paused although the clock only moves forward: see
// TestSourceConcurrentFillNoFalsePause.)
func TestSourceConcurrent(t *testing.T) {
	b := newBackend(-1)
	src, clock, _ := startSource(t, b, nil, nil)
	stop := make(chan struct{})
	var clockWG sync.WaitGroup
	clockWG.Go(func() {
		for now := t0; ; now = now.Add(100 * time.Microsecond) {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Microsecond):
			}
			clock.Set(now)
		}
	})
	const goroutines, rounds = 4, 200
	results := make([][]int64, goroutines)
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			dst := make([]int64, 1+g*3)
			for i := range rounds {
				if i%2 == 0 {
					n, err := src.Fill(context.Background(), dst)
					if err != nil && !errors.Is(err, snowflake.ErrNotServing) {
						errs <- err
						return
					}
					results[g] = append(results[g], dst[:n]...)
					continue
				}
				err := src.Next(context.Background(), dst)
				if errors.Is(err, snowflake.ErrNotServing) {
					continue // the fake clock outran the renewal, or a false pause
				}
				if err != nil {
					errs <- err
					return
				}
				results[g] = append(results[g], dst...)
			}
		})
	}
	wg.Wait()
	close(stop)
	clockWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := newIssued(t)
	lease := b.lease(0)
	for g, ids := range results {
		seen.add(fmt.Sprint("goroutine ", g), ids...)
		checkIDs(t, ids, 0, t0, lease)
	}
}

// gatedClock is a fakeClock whose Now, when called from Source.Fill while a
// gate is set, reads the clock and then blocks until the gate is closed: the
// caller goes on with a time that is stale by then.
type gatedClock struct {
	*fakeClock
	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
	late    bool // read the clock after the gate, not before
}

func (c *gatedClock) Now() time.Time {
	c.mu.Lock()
	gate, entered := c.gate, c.entered
	if gate != nil && calledFrom("snowflake.(*Source).Fill") {
		c.gate = nil
	} else {
		gate = nil
	}
	late := c.late
	c.mu.Unlock()
	now := c.fakeClock.Now()
	if gate != nil {
		close(entered)
		<-gate
		if late {
			now = c.fakeClock.Now()
		}
	}
	return now
}

// arm sets a gate for the next Now from Fill; entered is closed when Fill
// has read the clock.
func (c *gatedClock) arm() (gate, entered chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate, c.entered = make(chan struct{}), make(chan struct{})
	return c.gate, c.entered
}

func calledFrom(fn string) bool {
	pc := make([]uintptr, 16)
	frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, fn) {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestSourceCloseIsFinal: a Fill that pauses the Source while Close runs
// must not leave it paused (or serving) after Close.
func TestSourceCloseIsFinal(t *testing.T) {
	b := newBackend(-1)
	clock := &gatedClock{fakeClock: &fakeClock{t: t0}}
	log := &eventLog{}
	fillDone := make(chan error, 1)
	cfg := sourceConfig(b, clock.fakeClock, log)
	cfg.Clock = clockOf(clock.Now)
	var src *snowflake.Source
	var gate chan struct{} // of the Fill racing Close
	cfg.OnEvent = func(ev snowflake.Event) {
		log.add(ev)
		if ev.State != snowflake.StateClosed {
			return
		}
		// Close is between its StateClosed and the end: let the Fill go on.
		close(gate)
		deadline := time.Now().Add(5 * time.Second)
		for src.State() == snowflake.StateClosed && len(fillDone) == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	src, err := snowflake.StartSource(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	fill(t, src, 1000)
	clock.Set(t0.Add(-time.Second)) // the next Fill pauses

	var entered chan struct{}
	gate, entered = clock.arm()
	go func() {
		_, err := src.Fill(context.Background(), make([]int64, 4))
		fillDone <- err
	}()
	<-entered // Fill saw serving and holds the generator
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-fillDone; !errors.Is(err, snowflake.ErrNotServing) {
		t.Errorf("Fill racing Close = %v, want ErrNotServing", err)
	}
	if st := src.State(); st != snowflake.StateClosed {
		t.Errorf("State after Close = %v, want closed", st)
	}
	if got := log.states(); got[len(got)-1] != snowflake.StateClosed {
		t.Errorf("events %v: an event after closed", got)
	}
}

// TestSourceConcurrentFillNoFalsePause: a Fill that read the clock just
// before another Fill borrowed ahead of it must not take the other's
// borrowing for a clock that moved backwards: the clock never did.
func TestSourceConcurrentFillNoFalsePause(t *testing.T) {
	b := newBackend(-1)
	clock := &gatedClock{fakeClock: &fakeClock{t: t0}}
	src, _, log := startSource(t, b, clock.fakeClock, func(c *snowflake.SourceConfig) { c.Clock = clockOf(clock.Now) })
	fill(t, src, 1000) // borrowed up to t0+20ms

	gate, entered := clock.arm()
	done := make(chan error, 1)
	go func() {
		_, err := src.Fill(context.Background(), make([]int64, 4))
		done <- err
	}()
	<-entered // the first Fill has read t0 and is descheduled for 10ms
	clock.Set(t0.Add(10 * time.Millisecond))
	fill(t, src, 1000) // the second borrows up to t0+30ms
	close(gate)
	if err := <-done; err != nil {
		t.Errorf("first Fill: %v", err)
	}
	if st := src.State(); st != snowflake.StateServing {
		ev, _ := log.last(st)
		t.Fatalf("State = %v (%s), want serving: the clock only moved forward", st, ev.Reason)
	}
}

// TestSourceResumeLeasesFirst: when a waiting Source starts serving, its
// first Fill must not fail for want of a lease, as a fresh start does not
// (StartSource leases before serving).
func TestSourceResumeLeasesFirst(t *testing.T) {
	b := newBackend(7)
	b.setLease(7, t0.Add(50*time.Millisecond))
	inEvent, release := make(chan struct{}), make(chan struct{})
	src, clock, _ := startSource(t, b, nil, func(c *snowflake.SourceConfig) {
		c.OnEvent = func(ev snowflake.Event) {
			if ev.State == snowflake.StateServing {
				close(inEvent)
				<-release // a slow handler, e.g. publishing the event
			}
		}
	})
	if st := src.State(); st != snowflake.StateWaiting {
		t.Fatalf("State = %v, want waiting", st)
	}
	// The clock is stepped forward (fixed): the loop resumes with a lease
	// taken at the old clock.
	clock.Set(t0.Add(time.Second))
	<-inEvent
	n, err := src.Fill(context.Background(), make([]int64, 4))
	close(release)
	if err != nil || n != 4 {
		t.Fatalf("first Fill after serving = %d, %v, want 4 ids", n, err)
	}
}

func TestStateString(t *testing.T) {
	for st, want := range map[snowflake.State]string{
		snowflake.StateWaiting: "waiting",
		snowflake.StateServing: "serving",
		snowflake.StatePaused:  "paused",
		snowflake.StateLost:    "lost",
		snowflake.StateClosed:  "closed",
		snowflake.State(9):     "State(9)",
	} {
		if got := st.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", int32(st), got, want)
		}
	}
}

// TestSourceLeaveBeforeLeaseRunsOut: while renewals fail, the Source stops
// serving (Waiting, so a node leaves the queue group) once its lease holds
// for less than a renewal interval — before ids would fail — and serves
// again as soon as a renewal works.
func TestSourceLeaveBeforeLeaseRunsOut(t *testing.T) {
	b := newBackend(-1)
	src, clock, log := startSource(t, b, nil, nil)
	lease := t0.Add(testLeaseAhead)
	b.setFailLease(errors.New("registry down"))
	clock.Set(lease.Add(-testLeaseAhead / 8))
	waitState(t, src, snowflake.StateWaiting)
	if ev, ok := log.last(snowflake.StateWaiting); !ok || !strings.Contains(ev.Reason, "cannot be renewed") {
		t.Fatalf("waiting event %+v", ev)
	}
	_, err := src.Fill(context.Background(), make([]int64, 4))
	if !errors.Is(err, snowflake.ErrNotServing) || !errors.Is(err, snowflake.ErrLeaseFailed) {
		t.Fatalf("Fill while the lease cannot be renewed: %v", err)
	}
	b.setFailLease(nil)
	waitState(t, src, snowflake.StateServing)
	if ids := fill(t, src, 4); len(ids) == 0 {
		t.Fatal("no ids after the registry came back")
	}
}

// A registry that hangs (a JetStream KV whose stream is electing a leader,
// say) rather than failing fast: the Source still steps down while its
// lease holds, on the real clock, instead of serving until the lease has
// run out and answering 503 (as while a nats-server is killed).
func TestSourceLeaveBeforeLeaseRunsOutHanging(t *testing.T) {
	b := newBackend(-1)
	src, _, log := startSource(t, b, nil, func(c *snowflake.SourceConfig) {
		c.Clock = clockOf(time.Now)
		c.LeaseAhead = 2 * time.Second // steps down with 500ms to spare: room for a busy machine
		c.BorrowAhead = 100 * time.Millisecond
	})
	waitState(t, src, snowflake.StateServing)
	b.mu.Lock()
	b.hangLease = true
	b.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for src.State() == snowflake.StateServing {
		if time.Now().After(src.Leased()) {
			t.Fatalf("still serving at %v, past the lease (up to %v)", time.Now(), src.Leased())
		}
		if time.Now().After(deadline) {
			t.Fatal("still serving 5s after the registry hung")
		}
		time.Sleep(time.Millisecond)
	}
	if st := src.State(); st != snowflake.StateWaiting {
		t.Fatalf("state %v, want waiting", st)
	}
	if ev, ok := log.last(snowflake.StateWaiting); !ok || !strings.Contains(ev.Reason, "cannot be renewed") {
		t.Fatalf("waiting event %+v", ev)
	}
	b.mu.Lock()
	b.hangLease = false
	b.mu.Unlock()
	waitState(t, src, snowflake.StateServing)
}

// slowRegistry is a registry whose Lease takes d, and says so
// (snowflake.LeaseTimer), as a KV registry far from its server does.
type slowRegistry struct {
	snowflake.Registry
	d time.Duration
}

func (r slowRegistry) LeaseTime() time.Duration { return r.d }

func (r slowRegistry) Lease(ctx context.Context, until time.Time) error {
	t := time.NewTimer(r.d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", snowflake.ErrRegistryUnavailable, ctx.Err())
	}
	return r.Registry.Lease(ctx, until)
}

// TestSourceLeasesAheadOfSlowRegistry: a registry whose Lease takes 0.7 s,
// more than half of a 1 s LeaseAhead (all a renewal was given), and says
// so: the Source gives the renewal twice that, and leases 0.7 s further
// ahead, so the lease still reaches LeaseAhead past the clock once it is
// confirmed.
func TestSourceLeasesAheadOfSlowRegistry(t *testing.T) {
	b := newBackend(-1)
	const d = 700 * time.Millisecond
	src, _, _ := startSource(t, b, nil, func(c *snowflake.SourceConfig) {
		c.LeaseAhead = time.Second
		c.Open = func(ctx context.Context) (snowflake.Registry, error) {
			r, err := b.Open(ctx)
			if err != nil {
				return nil, err
			}
			return slowRegistry{r, d}, nil
		}
	})
	want := t0.Add(time.Second + d)
	if got := b.lease(src.Worker()); !got.Equal(want) {
		t.Fatalf("registry lease %v, want %v (LeaseAhead + the renewal's time past the clock)", got, want)
	}
	if got := src.Leased(); !got.Equal(want) {
		t.Fatalf("Leased = %v, want %v", got, want)
	}
}
