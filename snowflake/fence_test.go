package snowflake_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/snowflake"
)

// TestSourceFillOneSnapshot: a Fill that straddles a
// re-registration of the same worker id must not make ids of the old
// registration's generator under the new registration's lease; those would
// repeat the ids of the new generator, which starts after the old lease.
func TestSourceFillOneSnapshot(t *testing.T) {
	b := newBackend(3) // every registration gets worker 3
	clock := &gatedClock{fakeClock: &fakeClock{t: t0}, late: true}
	src, _, _ := startSource(t, b, clock.fakeClock, func(c *snowflake.SourceConfig) { c.Clock = clockOf(clock.Now) })
	seen := newIssued(t)
	seen.add("first registration", fill(t, src, 8)...)

	gate, entered := clock.arm()
	type result struct {
		ids []int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		dst := make([]int64, 64)
		n, err := src.Fill(context.Background(), dst)
		done <- result{dst[:n], err}
	}()
	<-entered // that Fill took the first registration and waits in Now

	// The claim is lost; the Source registers worker 3 again, waits for
	// the clock to pass the first registration's lease, and serves.
	b.registries()[0].lose()
	waitFor(t, "a second registration", func() bool { return len(b.registries()) == 2 })
	clock.Set(t0.Add(2 * testLeaseAhead))
	waitState(t, src, snowflake.StateServing)
	seen.add("second registration", fill(t, src, 16)...)

	close(gate) // the first Fill goes on with the clock of the second
	r := <-done
	seen.add("the Fill that straddled the re-registration", r.ids...)
	if r.err == nil || !errors.Is(r.err, snowflake.ErrNotServing) {
		t.Errorf("Fill across a lost registration = %d ids, %v; want ErrNotServing", len(r.ids), r.err)
	}
}

// TestSourceClaimLapses (fencing): a Source whose registry has a
// ClaimTTL serves no id once ClaimTTL has passed on the monotonic clock
// since the last confirmation — checked by Fill itself, since after a
// freeze a caller may run before the Source's goroutine — and drops that
// registration for good. The wall clock (Now) plays no part.
func TestSourceClaimLapses(t *testing.T) {
	b := newBackend(-1)
	b.ttl = time.Second
	b.leasedBefore()
	mono := &fakeClock{t: t0}
	src, clock, log := startSource(t, b, nil, func(c *snowflake.SourceConfig) { c.Monotonic = mono.Clock() })
	if w, ok := src.Holds(); !ok || w != 0 {
		t.Fatalf("Holds = %d, %v; want 0, true", w, ok)
	}
	fill(t, src, 8)

	mono.Set(t0.Add(time.Second)) // frozen for the whole TTL
	n, err := src.Fill(context.Background(), make([]int64, 8))
	if n != 0 || !errors.Is(err, snowflake.ErrClaimLapsed) || !errors.Is(err, snowflake.ErrNotServing) {
		t.Fatalf("Fill past the claim TTL = %d, %v; want 0, ErrNotServing and ErrClaimLapsed", n, err)
	}
	if _, ok := src.Holds(); ok {
		t.Error("Holds: ok past the claim TTL")
	}
	if _, ok := log.last(snowflake.StateLost); !ok {
		t.Errorf("no lost event: %v", log.states())
	}
	// The registration is closed and never serves again; the Source
	// registers anew (here, worker 0 again, since the old one released it).
	waitFor(t, "the lapsed registry closed", func() bool { return b.registries()[0].isClosed() })
	waitFor(t, "a new registration", func() bool { return len(b.registries()) >= 2 })
	clock.Set(t0.Add(2 * testLeaseAhead)) // past the lapsed registration's lease
	waitState(t, src, snowflake.StateServing)
	if _, err := src.Fill(context.Background(), make([]int64, 1)); err != nil {
		t.Fatalf("Fill after registering again: %v", err)
	}
}

// TestSourceConfirmsClaim: while the wall clock stands still (so no higher
// lease is due), the Source still confirms its claim before half of the
// ClaimTTL has passed on the monotonic clock, and keeps serving.
func TestSourceConfirmsClaim(t *testing.T) {
	b := newBackend(-1)
	b.ttl = time.Second
	b.leasedBefore()
	// The loop ticks on mono, which moves while the wall clock stands.
	mono, wall := clock.NewFake(t0), &fakeClock{t: t0}
	src, _, _ := startSource(t, b, wall, func(c *snowflake.SourceConfig) {
		c.Monotonic = mono
		c.Clock = clock.WithNow(mono, wall.Now)
	})
	testenv.Armed(t, mono, 1) // the loop's ticker
	for i := 1; i <= 5; i++ {
		calls := b.leaseCalls()
		mono.Set(t0.Add(time.Duration(i) * 600 * time.Millisecond))
		waitFor(t, "a confirming Lease", func() bool { return b.leaseCalls() > calls })
		if _, err := src.Fill(context.Background(), make([]int64, 1)); err != nil {
			t.Fatalf("Fill after %d confirmations: %v", i, err)
		}
	}
	if n := len(b.registries()); n != 1 {
		t.Fatalf("%d registrations, want 1", n)
	}
}

// TestSourceKeepsItsOwnFloor: the registry lost a worker's lease (an
// operator deleted the key or row) and the Source, having lost its claim,
// registers the same worker id again with no LastLease: it must still wait
// past the lease its earlier registration had, not repeat its own ids.
func TestSourceKeepsItsOwnFloor(t *testing.T) {
	b := newBackend(3)
	src, clock, _ := startSource(t, b, nil, nil)
	seen := newIssued(t)
	seen.add("first registration", fill(t, src, 8)...)
	b.forget(3)
	b.registries()[0].lose()
	waitFor(t, "a second registration", func() bool { return len(b.registries()) == 2 && src.State() != snowflake.StateLost })
	if st := src.State(); st != snowflake.StateWaiting {
		t.Fatalf("State after registering again with the lease forgotten = %v, want waiting", st)
	}
	if n, err := src.Fill(context.Background(), make([]int64, 8)); n != 0 || err == nil {
		t.Fatalf("Fill while waiting = %d, %v", n, err)
	}
	clock.Set(t0.Add(2 * testLeaseAhead))
	waitState(t, src, snowflake.StateServing)
	seen.add("second registration", fill(t, src, 8)...)
}

// TestSourceRegisterLapsesBeforeFirstLease: a Register that takes longer
// than the ClaimTTL (a registry waiting for a previous owner, a slow
// network) leaves a claim that lapses at the first lease. The Source must
// not report serving on it: it drops it and registers again, then serves.
// (It reported serving with no claim and never registered again: a node
// that stayed in the queue group answering 503.)
func TestSourceRegisterLapsesBeforeFirstLease(t *testing.T) {
	b := newBackend(-1)
	b.ttl = time.Second
	b.leasedBefore()
	mono := &fakeClock{t: t0}
	slow := 1
	b.onRegister = func() {
		if slow > 0 { // the first Register takes the whole TTL
			slow--
			mono.Set(mono.Now().Add(time.Second))
		}
	}
	src, _, _ := startSource(t, b, nil, func(c *snowflake.SourceConfig) { c.Monotonic = mono.Clock() })
	waitFor(t, "a second registration", func() bool { return len(b.registries()) >= 2 })
	waitState(t, src, snowflake.StateServing)
	if _, ok := src.Holds(); !ok {
		t.Fatal("serving without a claim")
	}
	if _, err := src.Fill(context.Background(), make([]int64, 1)); err != nil {
		t.Fatalf("Fill after registering again: %v", err)
	}
}

// TestSourceWaitsOutUnknownWorker: an operator deletes a live
// node's worker record, or the whole registry; the next process to
// register gets the same worker id with no time lease. It must not serve
// until the live node's claim has lapsed (ClaimTTL) and the clock has
// passed the ids that node may have made ahead of its clock (LeaseAhead)
// on a clock up to ClockSkew ahead. Without the wait both serve the worker.
func TestSourceWaitsOutUnknownWorker(t *testing.T) {
	b := newBackend(-1)
	b.ttl = time.Second
	const skew = 100 * time.Millisecond
	src, clock, _ := startSource(t, b, nil, func(c *snowflake.SourceConfig) {
		c.NewWorker = func(_ context.Context, w int64) bool { return w != 0 } // a live node serves 0
		c.ClockSkew = skew
	})
	if st := src.State(); st != snowflake.StateWaiting {
		t.Fatalf("state of a worker with no lease on record = %v, want waiting", st)
	}
	wait := b.ttl + testLeaseAhead + skew
	clock.Set(t0.Add(wait - time.Millisecond))
	if n, err := src.Fill(context.Background(), make([]int64, 1)); err == nil {
		t.Fatalf("Fill before ClaimTTL+LeaseAhead+ClockSkew = %d ids, want ErrNotServing", n)
	}
	clock.Set(t0.Add(wait + time.Millisecond))
	waitState(t, src, snowflake.StateServing)
	for _, id := range fill(t, src, 8) {
		if at := smallLayout.Decompose(id).Time; at.Before(t0.Add(wait)) {
			t.Fatalf("id %d of %v, before the wait ended at %v", id, at, t0.Add(wait))
		}
	}

	// No live process serves the worker: one that held it and stopped
	// made ids up to its lease, LeaseAhead past a clock up to ClockSkew
	// ahead, which the next node would repeat if it served at once.
	b = newBackend(-1)
	b.ttl = time.Second
	src, clock, _ = startSource(t, b, nil, func(c *snowflake.SourceConfig) { c.ClockSkew = skew })
	if st := src.State(); st != snowflake.StateWaiting {
		t.Fatalf("state of a worker no live node serves, with no lease on record = %v, want waiting", st)
	}
	clock.Set(t0.Add(testLeaseAhead + skew + time.Millisecond))
	waitState(t, src, snowflake.StateServing)

	// A registry that had recorded nothing when opened (a bucket never
	// written) had no holder: it serves at once.
	b = newBackend(-1)
	b.ttl, b.fresh = time.Second, true
	src, _, _ = startSource(t, b, nil, func(c *snowflake.SourceConfig) { c.ClockSkew = skew })
	if st := src.State(); st != snowflake.StateServing {
		t.Errorf("a fresh registry: state = %v, want serving", st)
	}

	// A registry with no claims to lapse and no leases (static) serves at
	// once: its worker ids are the operator's.
	src, _, _ = startSource(t, newBackend(-1), nil, func(c *snowflake.SourceConfig) { c.NewWorker = nil })
	if st := src.State(); st != snowflake.StateServing {
		t.Errorf("a registry without claims: state = %v, want serving", st)
	}
}

// TestSourceRefusesWorkerALiveNodeHolds: a registry that
// guards nothing — ZooKeeper's registration from its local cache file while
// the ensemble is unreachable, two hosts with one identity, two registries
// behind one queue group — gives a worker id that a live node serves. The
// Source asks (Holder) after every registration, whatever the lease, and
// refuses it, naming the holder; it serves once the holder is gone. Without
// the question both serve the worker (as after /snowflake was wiped and a
// node restarted with ZooKeeper unreachable).
func TestSourceRefusesWorkerALiveNodeHolds(t *testing.T) {
	b := newBackend(3)
	b.setLease(3, t0.Add(-time.Minute)) // a lease on record: NewWorker is not asked
	var mu sync.Mutex
	holder, asked := "node b (pid 7 on host h2)", 0
	cfg := sourceConfig(b, &fakeClock{t: t0}, &eventLog{})
	cfg.Holder = func(_ context.Context, w int64) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		if w == 3 {
			return holder, nil
		}
		return "", nil
	}
	_, err := snowflake.StartSource(context.Background(), cfg)
	if !errors.Is(err, snowflake.ErrWorkerInUse) || !strings.Contains(err.Error(), "node b (pid 7 on host h2)") {
		t.Fatalf("StartSource beside a live holder of worker 3: %v, want ErrWorkerInUse naming it", err)
	}
	mu.Lock()
	if asked != 2 {
		t.Errorf("Holder asked %d times, want twice (once more, in case the registry gives another id)", asked)
	}
	holder = ""
	mu.Unlock()
	for _, r := range b.registries() {
		if !r.isClosed() {
			t.Error("a refused registration's registry is still open")
		}
	}

	// A registry that picks among free ids may give another one when
	// asked again.
	kv := newBackend(0)
	src1, _, _ := startSource(t, kv, nil, func(c *snowflake.SourceConfig) {
		c.Holder = func(ctx context.Context, w int64) (string, error) {
			if w != 0 {
				return "", nil
			}
			kv.mu.Lock()
			kv.fixed = 1
			kv.mu.Unlock()
			return "node k", nil
		}
	})
	if st := src1.State(); st != snowflake.StateServing || src1.Worker() != 1 {
		t.Fatalf("after worker 0 was refused: state %v, worker %d, want serving worker 1", st, src1.Worker())
	}

	// The holder is gone: the worker serves. (The Source's loop runs on
	// clk's ticker and timers, its readings stay put.)
	wall, clk := &fakeClock{t: t0}, clock.NewFake(t0)
	src, _, _ := startSource(t, b, wall, func(c *snowflake.SourceConfig) {
		c.Holder = cfg.Holder
		c.Clock = clock.WithNow(clk, wall.Now)
	})
	if st := src.State(); st != snowflake.StateServing || src.Worker() != 3 {
		t.Fatalf("state %v, worker %d, want serving worker 3", st, src.Worker())
	}

	// A claim lost later is claimed again only once no live node holds it.
	mu.Lock()
	holder = "node c"
	mu.Unlock()
	b.registries()[len(b.registries())-1].lose()
	waitState(t, src, snowflake.StateLost)
	mu.Lock()
	before := asked
	mu.Unlock()
	// Two re-registrations are refused: the loop ticks, asks the Holder,
	// and waits out its retry pause (1s) beside its ticker, twice.
	clk.Advance(50 * time.Millisecond)
	testenv.Armed(t, clk, 2)
	clk.Advance(time.Second)
	testenv.Armed(t, clk, 2)
	mu.Lock()
	refused := asked - before
	mu.Unlock()
	if st := src.State(); st != snowflake.StateLost || refused < 2 {
		t.Fatalf("state %v after the Holder was asked %d times while a live node holds the worker, want lost after at least 2", st, refused)
	}
	mu.Lock()
	holder = ""
	mu.Unlock()
	clk.Advance(time.Second)
	waitFor(t, "serving again", func() bool { return src.State() != snowflake.StateLost })
}

// TestSourceTakesPeerLease: an operator erases a live node's
// worker records; the node loses the id and claims another, and the next
// process gets the erased id with no lease on record. The node that lost
// it may have made ids of it up to its last lease (Past), so the newcomer
// starts above the lease that node reports (PeerLease). Without it the
// newcomer would repeat ids the node borrowed ahead of the clock.
func TestSourceTakesPeerLease(t *testing.T) {
	// The node that lost worker 0 reports it in Past.
	b := newBackend(0)
	old, _, _ := startSource(t, b, nil, nil)
	fill(t, old, 4)
	lost := b.lease(0)
	if lost.IsZero() {
		t.Fatal("no lease recorded")
	}
	b.registries()[0].lose()
	waitFor(t, "worker 0 in Past", func() bool { return !old.Past()[0].IsZero() })
	if p := old.Past()[0]; p.Before(lost) {
		t.Fatalf("Past()[0] = %v, below the lease %v it had", p, lost)
	}

	// A newcomer on a registry that forgot worker 0 waits past that lease.
	nb := newBackend(0)
	src, nclock, _ := startSource(t, nb, nil, func(c *snowflake.SourceConfig) {
		c.PeerLease = func(_ context.Context, w int64) (time.Time, error) {
			if w == 0 {
				return old.Past()[0], nil
			}
			return time.Time{}, nil
		}
	})
	if st := src.State(); st != snowflake.StateWaiting {
		t.Fatalf("state of the newcomer = %v, want waiting past the lease a live node reports", st)
	}
	nclock.Set(lost.Add(time.Millisecond))
	waitState(t, src, snowflake.StateServing)
	for _, id := range fill(t, src, 8) {
		if at := smallLayout.Decompose(id).Time; at.Before(lost) {
			t.Fatalf("id %d of %v, below the lease %v the other node had", id, at, lost)
		}
	}
}

// TestSourcePeerLeaseUnasked: a registration whose live processes could
// not be asked for their past leases of the worker fails (the node's start
// tries again): taken for "no peer lease", the worker would serve before
// a lease a live node reports.
func TestSourcePeerLeaseUnasked(t *testing.T) {
	unasked := errors.New("gather: nats: connection closed")
	cfg := sourceConfig(newBackend(0), &fakeClock{t: t0}, &eventLog{})
	cfg.PeerLease = func(context.Context, int64) (time.Time, error) { return time.Time{}, unasked }
	src, err := snowflake.StartSource(context.Background(), cfg)
	if err == nil {
		_ = src.Close()
		t.Fatal("started although the live processes could not be asked for their leases")
	}
	if !errors.Is(err, unasked) {
		t.Fatalf("start: %v, want the asking's error", err)
	}
}
