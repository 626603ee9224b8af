package kvworker_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snowflake/kvworker"
)

// layout2 has two worker ids: with one held by a bystander, a second
// registration can only get the frozen node's id.
func layout2() snowflake.Layout {
	l := snowflake.LeafLayout()
	l.WorkerBits, l.SequenceBits = 1, 21
	return l
}

// frozenRegistry is a Registry whose Lease calls block while it is frozen,
// as every goroutine of a stopped process does.
type frozenRegistry struct {
	*kvworker.Registry
	mu   sync.Mutex
	wake chan struct{} // nil: not frozen
}

func (r *frozenRegistry) freeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wake = make(chan struct{})
}

func (r *frozenRegistry) thaw() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
}

func (r *frozenRegistry) Lease(ctx context.Context, until time.Time) error {
	r.mu.Lock()
	wake := r.wake
	r.mu.Unlock()
	if wake != nil {
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return r.Registry.Lease(ctx, until)
}

// Close leaves the registry open for the test to try a Lease on after the
// Source dropped it; the test's cleanup closes it.
func (r *frozenRegistry) Close() error { return nil }

// monoClock is a settable Monotonic clock.
type monoClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *monoClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *monoClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// startOn starts a Source whose first registry is reg; it cannot open
// another (so it never serves a second registration).
func startOn(t *testing.T, reg snowflake.Registry, edit func(*snowflake.SourceConfig)) *snowflake.Source {
	t.Helper()
	opened := false
	cfg := snowflake.SourceConfig{
		// A new registry: no other process can serve its worker ids.
		NewWorker: func(context.Context, int64) bool { return true },
		Open: func(context.Context) (snowflake.Registry, error) {
			if opened {
				return nil, errors.New("test: no second registry")
			}
			opened = true
			return reg, nil
		},
		Layout: layout2(),
		Logger: slog.New(slog.DiscardHandler),
	}
	if edit != nil {
		edit(&cfg)
	}
	src, err := snowflake.StartSource(ctx(t), cfg)
	if err != nil {
		t.Fatalf("StartSource: %v", err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// takeOver registers new registries until one gets worker (the other id
// is held), which happens once the frozen holder's claim key expired.
func takeOver(t *testing.T, js jetstream.JetStream, opts kvworker.Options, worker int64) (*kvworker.Registry, snowflake.Registration) {
	t.Helper()
	r2 := open(t, js, layout2(), opts)
	var reg snowflake.Registration
	testenv.Eventually(t, "the frozen holder's claim to expire", 15*time.Second, func() bool {
		var err error
		reg, err = r2.Register(ctx(t))
		if err != nil && !errors.Is(err, snowflake.ErrNoWorker) {
			t.Fatalf("Register: %v", err)
		}
		return err == nil
	})
	if reg.Worker != worker {
		t.Fatalf("took over worker %d, want %d", reg.Worker, worker)
	}
	return r2, reg
}

// noIDsOf fails if Fill on src gives an id of worker.
func noIDsOf(t *testing.T, src *snowflake.Source, worker int64) {
	t.Helper()
	dst := make([]int64, 64)
	n, err := src.Fill(context.Background(), dst)
	for _, id := range dst[:n] {
		if layout2().Decompose(id).Worker == worker {
			t.Fatalf("the old holder served id %d of worker %d, which another registry holds now (Fill: %d ids, %v)", id, worker, n, err)
		}
	}
	if n > 0 || err == nil {
		t.Fatalf("Fill on the old holder = %d ids, %v; want an error", n, err)
	}
}

// TestFreezeFences is the fencing invariant under a freeze: a node
// frozen (SIGSTOP) past the claim TTL, whose worker id another node then
// claims and leases, must serve no id of it when it wakes — neither from
// the Source (before its goroutine has even run: the monotonic clock says
// the claim lapsed) nor through a Lease of its registry (fenced).
func TestFreezeFences(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv)
	opts := kvworker.Options{TTL: time.Second}
	bystander := open(t, js, layout2(), opts)
	r1 := &frozenRegistry{Registry: open(t, js, layout2(), opts)}
	mono := &monoClock{t: time.Now()}
	src := startOn(t, r1, func(c *snowflake.SourceConfig) {
		c.Monotonic = clock.WithNow(nil, mono.Now)
		c.LeaseAhead = 10 * time.Second // the wall-clock lease outlasts the freeze
	})
	if _, err := bystander.Register(ctx(t)); err != nil {
		t.Fatal(err)
	}
	w := src.Worker()
	if _, err := src.Fill(ctx(t), make([]int64, 64)); err != nil {
		t.Fatalf("Fill before the freeze: %v", err)
	}
	leased := src.Leased()

	// SIGSTOP: no Lease, no refresh; the claim key expires after 1s.
	r1.freeze()
	kvworker.Freeze(r1.Registry)
	r2, reg2 := takeOver(t, js, opts, w)
	if reg2.LastLease.Before(leased.Truncate(time.Millisecond)) {
		t.Fatalf("new holder: LastLease %v, below the old holder's lease %v", reg2.LastLease, leased)
	}
	if err := r2.Lease(ctx(t), time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("new holder: Lease: %v", err)
	}

	// SIGCONT: the monotonic clock has moved on by the freeze; the first
	// call is a Fill, before the Source's goroutine runs.
	mono.add(2 * time.Second)
	noIDsOf(t, src, w)
	if _, ok := src.Holds(); ok {
		t.Error("Holds: ok after the claim lapsed")
	}
	r1.thaw()
	if err := r1.Registry.Lease(ctx(t), time.Now().Add(time.Minute)); !errors.Is(err, snowflake.ErrNotRegistered) {
		t.Fatalf("old holder: Lease after the takeover = %v, want ErrNotRegistered", err)
	}
	select {
	case <-r1.Lost():
	default:
		t.Fatal("old holder: Lost open after a fenced Lease")
	}
	noIDsOf(t, src, w)
}

// TestTakeoverStopsSource: a node whose claim refresher stalled (the rest
// of the process ran on), and whose worker id another node claimed, stops
// serving it at its next renewal: the Lease is fenced.
func TestTakeoverStopsSource(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv)
	opts := kvworker.Options{TTL: time.Second}
	bystander := open(t, js, layout2(), opts)
	r1 := open(t, js, layout2(), opts)
	src := startOn(t, r1, nil)
	if _, err := bystander.Register(ctx(t)); err != nil {
		t.Fatal(err)
	}
	w := src.Worker()
	kvworker.Freeze(r1)
	r2, _ := takeOver(t, js, opts, w)
	if err := r2.Lease(ctx(t), time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("new holder: Lease: %v", err)
	}
	testenv.Eventually(t, "the old holder to stop serving", 10*time.Second, func() bool {
		_, ok := src.Holds()
		return !ok && src.State() != snowflake.StateServing
	})
	noIDsOf(t, src, w)
}

// TestDeletedLeaseKey: an operator deletes the lease key t<w> of a worker
// in use. The holder's next Lease is refused (it can no longer prove the
// claim), and no later Register uses w: its past leases are unknown, so a
// new holder could repeat the ids it issued.
func TestDeletedLeaseKey(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv)
	opts := kvworker.Options{TTL: time.Second}
	r1 := open(t, js, layout2(), opts)
	reg1, err := r1.Register(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := r1.Lease(ctx(t), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	bystander := open(t, js, layout2(), opts)
	if _, err := bystander.Register(ctx(t)); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx(t), kvworker.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := "t" + strconv.FormatInt(reg1.Worker, 10)
	if err := kv.Delete(ctx(t), key); err != nil {
		t.Fatal(err)
	}
	if err := r1.Lease(ctx(t), time.Now().Add(2*time.Minute)); !errors.Is(err, snowflake.ErrNotRegistered) {
		t.Fatalf("Lease after its lease key was deleted = %v, want ErrNotRegistered", err)
	}
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	// The lost r1 left its claim key to expire (1s): until then the id is
	// plainly claimed; after, it is free but unusable.
	testenv.Eventually(t, "a Register that names the deleted key", 10*time.Second, func() bool {
		reg, err := open(t, js, layout2(), opts).Register(ctx(t))
		if !errors.Is(err, snowflake.ErrNoWorker) {
			t.Fatalf("Register with worker %d's lease key deleted = %+v, %v; want ErrNoWorker", reg1.Worker, reg, err)
		}
		return strings.Contains(err.Error(), key)
	})
	// Put back with a lease, the id is usable again, from that lease.
	floor := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if _, err := kv.Put(ctx(t), key, []byte(`{"lease":`+strconv.FormatInt(floor.UnixMilli(), 10)+`}`)); err != nil {
		t.Fatal(err)
	}
	reg, err := open(t, js, layout2(), opts).Register(ctx(t))
	if err != nil || reg.Worker != reg1.Worker || !reg.LastLease.Equal(floor) {
		t.Fatalf("Register after the key was put back = %+v, %v; want worker %d from %v", reg, err, reg1.Worker, floor)
	}
}
