package mono_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafmq/leafmq/wire"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/mono/memlease"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
)

var quiet = slog.New(slog.DiscardHandler)

// newStore is a memstore with tag "m", as a Leader reserves from it.
func newStore(t *testing.T) mono.Ranges {
	t.Helper()
	s := memstore.New()
	if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag("m"), Step: 100}); err != nil {
		t.Fatal(err)
	}
	return &segment.Reserver{Store: s, Logger: quiet}
}

// monoClock is a Leader clock a test can freeze: a frozen process reads
// no time, then reads it all at once.
type monoClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *monoClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Clock is c as a clock.Clock: its readings are c's, its timers real.
func (c *monoClock) Clock() clock.Clock { return clock.WithNow(nil, c.Now) }

func (c *monoClock) jump(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

func start(t *testing.T, cfg mono.Config) *mono.Leader {
	t.Helper()
	if cfg.Tag.IsZero() {
		cfg.Tag = wire.MustTag("m")
	}
	cfg.Logger = quiet
	l, err := mono.NewLeader(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go l.Run(context.Background())
	t.Cleanup(l.Close)
	return l
}

// One leader at a time; its ids rise; when it stops, the other node takes
// over within TTL and every id it serves is above every id served before.
func TestFailoverKeepsOrder(t *testing.T) {
	store, lease := newStore(t), memlease.New(time.Second, nil)
	var leading atomic.Int32
	on := func(b bool) {
		if b {
			leading.Add(1)
		} else {
			leading.Add(-1)
		}
	}
	a := start(t, mono.Config{Node: "a", Ranges: store, Lease: lease, Step: 50, OnLeading: on})
	b := start(t, mono.Config{Node: "b", Ranges: store, Lease: lease, Step: 50, OnLeading: on})
	testenv.Eventually(t, "a leader", 5*time.Second, func() bool { return a.Leading() || b.Leading() })
	if a.Leading() && b.Leading() {
		t.Fatal("two leaders")
	}
	first, second := a, b
	if b.Leading() {
		first, second = b, a
	}
	var last int64
	take := func(l *mono.Leader, n int) {
		t.Helper()
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			id, k, err := l.Next(ctx, 3)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if id <= last {
				t.Fatalf("id %d after %d", id, last)
			}
			last = id + int64(k) - 1
		}
	}
	take(first, 200) // several ranges
	if _, _, err := second.Next(context.Background(), 1); !errors.Is(err, mono.ErrNotLeader) {
		t.Fatalf("Next on the follower = %v, want ErrNotLeader", err)
	}
	first.Close() // a graceful stop releases the lease
	testenv.Eventually(t, "the other node leading", 5*time.Second, second.Leading)
	take(second, 200)
	if n := leading.Load(); n != 1 {
		t.Fatalf("%d leaders", n)
	}
}

// A leader frozen past its fence serves nothing when it wakes, even before
// its goroutine notices, and a range reserved under its old grant is never
// served after it leads again.
func TestFrozenLeaderStopsAtFence(t *testing.T) {
	// The lease store's clock runs on while a is frozen: the holding expires.
	clock, storeClock := &monoClock{}, &monoClock{}
	store, lease := newStore(t), memlease.New(time.Second, storeClock.Clock())
	a := start(t, mono.Config{Node: "a", Ranges: store, Lease: lease, Step: 50, Clock: clock.Clock()})
	testenv.Eventually(t, "a leading", 5*time.Second, a.Leading)
	id, _, err := a.Next(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	clock.jump(time.Second) // frozen for the whole TTL: its view of time jumps
	storeClock.jump(time.Second)
	if got, _, err := a.Next(context.Background(), 1); !errors.Is(err, mono.ErrNotLeader) {
		t.Fatalf("Next after a freeze past the TTL = %d, %v; want ErrNotLeader", got, err)
	}
	// Meanwhile another node leads and serves.
	b := start(t, mono.Config{Node: "b", Ranges: store, Lease: lease, Step: 50})
	testenv.Eventually(t, "b leading", 5*time.Second, b.Leading)
	bid, _, err := b.Next(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if bid <= id {
		t.Fatalf("new leader's id %d is not above the old leader's %d", bid, id)
	}
}

func TestConfig(t *testing.T) {
	store, lease := newStore(t), memlease.New(time.Second, nil)
	for i, cfg := range []mono.Config{
		{Tag: wire.MustTag("m"), Ranges: store, Lease: lease},                                           // no Node
		{Node: "a", Ranges: store, Lease: lease},                                                        // no tag
		{Tag: wire.MustTag("m"), Node: "a", Lease: lease},                                               // no Ranges
		{Tag: wire.MustTag("m"), Node: "a", Ranges: store, Lease: lease, Renew: 900 * time.Millisecond}, // renew too late
	} {
		if _, err := mono.NewLeader(cfg); !errors.Is(err, segment.ErrInvalid) {
			t.Errorf("config %d: %v, want ErrInvalid", i, err)
		}
	}
}

// Concurrent callers get distinct ids, and an id taken after another
// returned is larger.
func TestConcurrentNext(t *testing.T) {
	store, lease := newStore(t), memlease.New(time.Second, nil)
	a := start(t, mono.Config{Node: "a", Ranges: store, Lease: lease, Step: 1000})
	testenv.Eventually(t, "a leading", 5*time.Second, a.Leading)
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			var prev int64
			for range 2000 {
				id, _, err := a.Next(context.Background(), 1)
				if err != nil {
					errs <- err
					return
				}
				if id <= prev {
					errs <- fmt.Errorf("id %d after %d", id, prev)
					return
				}
				prev = id
				mu.Lock()
				dup := seen[id]
				seen[id] = true
				mu.Unlock()
				if dup {
					errs <- fmt.Errorf("id %d twice", id)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Yield hands the tag over: the leader stops serving, the other node
// takes over, every id stays above those served before, and the yielder
// does not take the tag back while its Yield lasts.
func TestYieldHandsOver(t *testing.T) {
	// Both Leaders and the lease run on one fake clock, moved in steps
	// while each Leader's loop waits on it (a renewal, a retry, its Yield).
	clk := clock.NewFake(time.Now())
	store, lease := newStore(t), memlease.New(time.Second, clk)
	a := start(t, mono.Config{Node: "a", Ranges: store, Lease: lease, Step: 50, Clock: clk})
	testenv.Eventually(t, "a leading", 5*time.Second, a.Leading)
	b := start(t, mono.Config{Node: "b", Ranges: store, Lease: lease, Step: 50, Clock: clk})
	testenv.Armed(t, clk, 2) // a waits to renew, b to try again
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	before, _, err := a.Next(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	a.Yield(3 * time.Second)
	testenv.Eventually(t, "a stepping down", 5*time.Second, func() bool { return !a.Leading() })
	testenv.Armed(t, clk, 2)     // a has released the lease and sits out its Yield
	step(t, clk, 2, time.Second) // b's next try (Retry, at most 5/4 of 333ms) acquires it
	if !b.Leading() {
		t.Fatal("b not leading a second after a yielded")
	}
	if a.Leading() {
		t.Fatal("two leaders")
	}
	if _, _, err := a.Next(ctx, 1); !errors.Is(err, mono.ErrNotLeader) {
		t.Fatalf("Next on the yielder = %v, want ErrNotLeader", err)
	}
	after, _, err := b.Next(ctx, 1)
	if err != nil || after <= before {
		t.Fatalf("first id after the hand-over = %d, %v; want above %d", after, err, before)
	}
	b.Close()                    // free the lease: a stays out until its Yield ends
	step(t, clk, 1, time.Second) // 2s of the 3s Yield gone
	if a.Leading() {
		t.Fatal("the yielder took the tag back before its Yield ended")
	}
	step(t, clk, 1, 1500*time.Millisecond)
	testenv.Eventually(t, "a leading again after its Yield", 5*time.Second, a.Leading)
}

// step moves c forward by d in steps of 50ms, each once the n loops running
// on c wait on it again: each loop sees every step.
func step(t testing.TB, c *clock.Fake, n int, d time.Duration) {
	t.Helper()
	for moved := time.Duration(0); moved < d; moved += 50 * time.Millisecond {
		testenv.Armed(t, c, n)
		c.Advance(50 * time.Millisecond)
	}
	testenv.Armed(t, c, n)
}

// TestHandDeletedLeaseKeepsOrder: an operator deletes the lease of a tag
// while its leader serves. The other node acquires at once but serves, and
// reserves, nothing for a TTL, by which time the old leader has found its
// renewal refused and stopped: the clients' history stays in order.
func TestHandDeletedLeaseKeepsOrder(t *testing.T) {
	// Both Leaders and the lease run on one fake clock, stepped while the
	// clients keep asking.
	clk := clock.NewFake(time.Now())
	store, lease := newStore(t), memlease.New(time.Second, clk)
	// a renews late and b retries early: without the Wait, b leads for
	// up to half a second while a still serves.
	a := start(t, mono.Config{Node: "a", Ranges: store, Lease: lease, Step: 10, Renew: 700 * time.Millisecond, Clock: clk})
	testenv.Eventually(t, "a leading", 5*time.Second, a.Leading)
	b := start(t, mono.Config{Node: "b", Ranges: store, Lease: lease, Step: 10, Retry: 20 * time.Millisecond, Clock: clk})
	testenv.Armed(t, clk, 2) // a waits to renew, b to try again
	t0 := time.Now()
	var (
		mu    sync.Mutex
		ops   []mono.Op
		asked atomic.Int64 // client rounds, answered or not
		wg    sync.WaitGroup
	)
	done := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				send := time.Since(t0)
				order := []*mono.Leader{a, b}
				if rand.IntN(2) == 0 {
					order[0], order[1] = b, a
				}
				for _, l := range order { // a client that asks whoever answers first
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					id, _, err := l.Next(ctx, 1)
					cancel()
					if err == nil {
						mu.Lock()
						ops = append(ops, mono.Op{Send: send, Recv: time.Since(t0), ID: id})
						mu.Unlock()
						break
					}
				}
				asked.Add(1)
			}
		})
	}
	// traffic waits until the clients have asked n more times.
	traffic := func(n int64) {
		t.Helper()
		want := asked.Load() + n
		testenv.Eventually(t, "client requests", 5*time.Second, func() bool { return asked.Load() >= want })
	}
	traffic(100)
	lease.Drop("m") // nats kv del leaf_mono m
	// Three seconds of the clock in 50ms steps, each once both loops wait
	// on it again and the clients have asked meanwhile.
	for range 60 {
		testenv.Armed(t, clk, 2)
		clk.Advance(50 * time.Millisecond)
		traffic(8)
	}
	close(done)
	wg.Wait()
	if err := mono.CheckHistory(ops); err != nil {
		t.Fatalf("%v (%d calls)", err, len(ops))
	}
	if !b.Leading() && !a.Leading() {
		t.Fatal("no leader after the delete")
	}
}

// silentRanges gives one range, then waits as a store that does not answer
// does, until released.
type silentRanges struct {
	mu      sync.Mutex
	given   bool
	release chan struct{}
}

func (r *silentRanges) Reserve(ctx context.Context, tag wire.Tag, step int) (segment.Alloc, error) {
	r.mu.Lock()
	first := !r.given
	r.given = true
	r.mu.Unlock()
	if !first {
		select {
		case <-r.release:
		case <-ctx.Done():
			return segment.Alloc{}, ctx.Err()
		}
	}
	return segment.Alloc{Tag: tag, MaxID: 10, Step: 10}, nil
}

// TestDrySaysSo: a leader whose ids ran out while its store does not
// answer says so (Dry), for readiness to tell, and stops saying so once a
// range comes.
func TestDrySaysSo(t *testing.T) {
	r := &silentRanges{release: make(chan struct{})}
	l := start(t, mono.Config{Node: "a", Ranges: r, Lease: memlease.New(time.Second, nil), Step: 10})
	testenv.Eventually(t, "leading", 10*time.Second, l.Leading)
	for taken := 0; taken < 10; {
		_, k, err := l.Next(context.Background(), 10-taken)
		if err != nil {
			t.Fatal(err)
		}
		taken += k
	}
	if why := l.Dry(); why != "" {
		t.Fatalf("Dry = %q at once", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, _, err := l.Next(ctx, 1) // starts the reservation that does not come
	cancel()
	if err == nil {
		t.Fatal("an id without a range")
	}
	testenv.Eventually(t, "dry", 10*time.Second, func() bool { return l.Dry() != "" })
	close(r.release)
	testenv.Eventually(t, "not dry once the range came", 10*time.Second, func() bool { return l.Dry() == "" })
}

// refusingLease refuses every grant as invalid (a lease bucket that cannot
// hold a lease) while refuse is set.
type refusingLease struct {
	*memlease.Lease
	refuse atomic.Bool
}

func (r *refusingLease) Acquire(ctx context.Context, tag, holder string) (mono.Grant, error) {
	if r.refuse.Load() {
		return mono.Grant{}, fmt.Errorf("%w: bucket without per-key TTLs", segment.ErrInvalid)
	}
	return r.Lease.Acquire(ctx, tag, holder)
}

// TestRefusedLeaseSaysSo: a lease store that refuses every grant leaves
// the tag without a leader on every node; Dry says why, for readiness to
// tell, and stops once a grant comes.
func TestRefusedLeaseSaysSo(t *testing.T) {
	lease := &refusingLease{Lease: memlease.New(time.Second, nil)}
	lease.refuse.Store(true)
	l := start(t, mono.Config{Node: "a", Ranges: newStore(t), Lease: lease, Step: 10})
	testenv.Eventually(t, "dry", 10*time.Second, func() bool { return l.Dry() != "" })
	if why := l.Dry(); !strings.Contains(why, "per-key TTLs") {
		t.Fatalf("Dry = %q, want the acquire's error", why)
	}
	lease.refuse.Store(false)
	testenv.Eventually(t, "leading", 10*time.Second, l.Leading)
	if why := l.Dry(); why != "" {
		t.Fatalf("Dry = %q once leading", why)
	}
}
