package segment_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/wire"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
)

// newClock is Config.Clock for tests: a clock.Fake, moving only when told.
func newClock() *clock.Fake {
	return clock.NewFake(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
}

// sleepCall is one call of a stepSleeper: the test releases it.
type sleepCall struct {
	d       time.Duration
	release chan struct{}
}

// stepSleeper is Config.Sleep that hands every call to the test and returns
// when the test releases it (or ctx ends).
type stepSleeper struct{ calls chan sleepCall }

func newStepSleeper() *stepSleeper { return &stepSleeper{calls: make(chan sleepCall)} }

func (s *stepSleeper) Sleep(ctx context.Context, d time.Duration) error {
	c := sleepCall{d: d, release: make(chan struct{})}
	select {
	case s.calls <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-c.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next waits for the loader's next sleep.
func (s *stepSleeper) next(t testing.TB) sleepCall {
	t.Helper()
	select {
	case c := <-s.calls:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no backoff sleep within 5s")
		return sleepCall{}
	}
}

// quickSleep is the default test Sleep: 1ms whatever the backoff, so
// retries neither spin nor slow tests down.
func quickSleep(ctx context.Context, _ time.Duration) error {
	t := time.NewTimer(time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// testStore wraps memstore: it records every range it grants, counts Get
// calls, can block the id calls until released, and can shift ranges down
// (to produce ids below 1).
type testStore struct {
	*memstore.Store

	mu     sync.Mutex
	allocs []segment.Alloc
	gets   int
	block  chan struct{} // non-nil: Next/NextStep/Get wait for it to close
	shift  int64         // subtracted from every MaxID granted
}

func newTestStore() *testStore { return &testStore{Store: memstore.New()} }

// setBlocked makes the id and lookup calls hang (true) or lets them go.
func (s *testStore) setBlocked(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case on && s.block == nil:
		s.block = make(chan struct{})
	case !on && s.block != nil:
		close(s.block)
		s.block = nil
	}
}

func (s *testStore) wait(ctx context.Context) error {
	s.mu.Lock()
	ch := s.block
	s.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *testStore) record(a segment.Alloc, err error) (segment.Alloc, error) {
	if err != nil {
		return a, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a.MaxID -= s.shift
	s.allocs = append(s.allocs, a)
	return a, nil
}

// Advance checks the floor against the row as the store holds it: a
// shifted store (one that went back by shift) is below a floor where its
// rows, as this engine sees them, are not.
func (s *testStore) Advance(ctx context.Context, tag wire.Tag, step int, floor int64) (segment.Alloc, error) {
	if err := s.wait(ctx); err != nil {
		return segment.Alloc{}, err
	}
	if floor > 0 {
		s.mu.Lock()
		floor += s.shift
		s.mu.Unlock()
	}
	return s.record(s.Store.Advance(ctx, tag, step, floor))
}

func (s *testStore) Get(ctx context.Context, tag wire.Tag) (segment.Tag, error) {
	s.mu.Lock()
	s.gets++
	s.mu.Unlock()
	if err := s.wait(ctx); err != nil {
		return segment.Tag{}, err
	}
	return s.Store.Get(ctx, tag)
}

func (s *testStore) Gets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

func (s *testStore) Allocs() []segment.Alloc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]segment.Alloc(nil), s.allocs...)
}

func (s *testStore) create(t testing.TB, name string, step int) {
	t.Helper()
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag(name), Step: step}); err != nil {
		t.Fatalf("Create(%q): %v", name, err)
	}
}

// recorder collects LoadEvents.
type recorder struct {
	mu  sync.Mutex
	evs []segment.LoadEvent
	ch  chan segment.LoadEvent
}

func newRecorder() *recorder { return &recorder{ch: make(chan segment.LoadEvent, 10_000)} }

func (r *recorder) OnLoad(ev segment.LoadEvent) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
	select {
	case r.ch <- ev:
	default:
	}
}

func (r *recorder) Events() []segment.LoadEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]segment.LoadEvent(nil), r.evs...)
}

// next waits for the next event.
func (r *recorder) next(t testing.TB) segment.LoadEvent {
	t.Helper()
	select {
	case ev := <-r.ch:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no load event within 5s")
		return segment.LoadEvent{}
	}
}

// newEngine builds an Engine with test defaults (silent logger, quick
// sleep, a long ReadyWait so slow CI machines do not flake) and closes it at
// the end of the test.
func newEngine(t testing.TB, cfg segment.Config) *segment.Engine {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Sleep == nil {
		cfg.Sleep = quickSleep
	}
	if cfg.ReadyWait == 0 {
		cfg.ReadyWait = 5 * time.Second
	}
	e, err := segment.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func start(t testing.TB, e *segment.Engine) {
	t.Helper()
	if err := e.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
}

func next(t testing.TB, e *segment.Engine, tag string) int64 {
	t.Helper()
	id, err := e.Next(context.Background(), wire.MustTag(tag))
	if err != nil {
		t.Fatalf("Next(%q): %v", tag, err)
	}
	return id
}

// waitFor polls cond for up to 5s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, 5*time.Second, cond)
}

func state(t testing.TB, e *segment.Engine, tag string) segment.TagState {
	t.Helper()
	st, ok := e.State(tag)
	if !ok {
		t.Fatalf("State(%q): not cached", tag)
	}
	return st
}

// nextReady reports whether the next segment of tag is loaded.
func nextReady(e *segment.Engine, tag string) bool {
	st, ok := e.State(tag)
	return ok && st.Segments[1-st.Current].Ready
}

// waitLoads waits until tag has had n successful loads.
func waitLoads(t testing.TB, e *segment.Engine, tag string, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("load %d of %q", n, tag), func() bool {
		st, ok := e.State(tag)
		return ok && st.Loads >= n
	})
}
