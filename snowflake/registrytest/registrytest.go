package registrytest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/snowflake"
)

// Factory builds registries for the suite.
type Factory struct {
	// New returns a new node's registry on the same backend as every other
	// registry New returns within one test (state is shared across calls;
	// each subtest may start a fresh backend). The suite closes what it
	// gets. Required.
	New func(t testing.TB) snowflake.Registry
	// Layout is the layout the registries of New were built for; Register
	// must return a worker within it. Zero means snowflake.LeafLayout().
	Layout snowflake.Layout
	// Distinct: concurrent registrations get distinct worker ids (false for
	// Static, whose id comes from configuration). Needs at least 8 worker
	// ids in Layout.
	Distinct bool
	// Durable: a new registry that gets the worker id of a closed one sees
	// that one's LastLease. The suite forces reuse by keeping every new
	// registration open until one of them gets the freed id, so at most
	// MaxWorker+1 registrations are made: use a layout with few worker ids
	// (the suite's own backends use WorkerBits 4). A backend whose Close
	// does not free the id at once (a claim that must expire) should make
	// New return registries whose Register waits or retries within its
	// context until it is free, or set a short expiry: the suite retries a
	// Register that fails with ErrNoWorker until ReuseTimeout.
	Durable bool
	// ReuseTimeout bounds the Durable and Fenced cases. Default 30s.
	ReuseTimeout time.Duration
	// Takeover makes r's claim of worker lapse as a freeze of r's process
	// past every TTL would, without telling r: it stops r's keep-alive (a
	// refresher, a session's pings) as if the process were stopped, then
	// expires or removes the claim in the backend, so that a Register of
	// another registry can get worker. r must not notice (its Lost stays
	// open): the Fenced case wakes it and checks that its Leases fail. Nil
	// skips the Fenced case (Static has nothing to fence).
	Takeover func(t testing.TB, r snowflake.Registry, worker int64)
	// NewRegion returns a new node's registry of region on the same
	// backend as New's: worker ids are handed out per region, so every
	// region has 0..MaxWorker of its own. A region the backend has never
	// seen gives its first registration worker 0 (a backend that picks
	// among free ids must be told to try 0 first). The suite makes up
	// region names of [a-z0-9] that no earlier run used. Nil skips the
	// Regions case.
	NewRegion func(t testing.TB, region string) snowflake.Registry
	// Held: the registries of New implement snowflake.HeldCounter, and
	// the Held case checks their count (false skips it).
	Held bool
	// Disposable: an id stays held once handed out, its registry closed
	// or not (ZooKeeper's sequence numbers, WORKER_NODE's disposable
	// ids); false: Close frees it at once (a claim key purged).
	Disposable bool
}

// Run runs the whole suite as subtests of t.
func Run(t *testing.T, f Factory) {
	t.Helper()
	if f.New == nil {
		t.Fatal("registrytest: Factory.New is nil")
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, f Factory)
	}{
		{"RegisterInLayout", testRegister},
		{"LeaseBeforeRegister", testLeaseBeforeRegister},
		{"LeaseMonotonic", testLeaseMonotonic},
		{"Distinct", testDistinct},
		{"Durable", testDurable},
		{"Close", testClose},
		{"ContextCanceled", testContextCanceled},
		{"Fenced", testFenced},
		{"Regions", testRegions},
		{"Held", testHeld},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}

func (f Factory) layout() snowflake.Layout {
	if f.Layout == (snowflake.Layout{}) {
		return snowflake.LeafLayout()
	}
	return f.Layout
}

func (f Factory) reuseTimeout() time.Duration {
	if f.ReuseTimeout == 0 {
		return 30 * time.Second
	}
	return f.ReuseTimeout
}

func (f Factory) open(t *testing.T) snowflake.Registry {
	t.Helper()
	r := f.New(t)
	if r == nil {
		t.Fatal("registrytest: Factory.New returned nil")
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func mustRegister(t *testing.T, r snowflake.Registry) snowflake.Registration {
	t.Helper()
	reg, err := r.Register(testCtx(t))
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	return reg
}

// lease is a time lease a little in the future, at a whole millisecond (what
// every backend can store).
func lease(d time.Duration) time.Time {
	return time.Now().Add(d).Truncate(time.Millisecond)
}

func testRegister(t *testing.T, f Factory) {
	r := f.open(t)
	reg := mustRegister(t, r)
	if hi := f.layout().MaxWorker(); reg.Worker < 0 || reg.Worker > hi {
		t.Fatalf("Register: worker %d outside 0..%d", reg.Worker, hi)
	}
	select {
	case <-r.Lost():
		t.Fatal("Lost closed right after Register")
	default:
	}
}

func testLeaseBeforeRegister(t *testing.T, f Factory) {
	r := f.open(t)
	if err := r.Lease(testCtx(t), lease(time.Second)); !errors.Is(err, snowflake.ErrNotRegistered) {
		t.Fatalf("Lease before Register: %v, want ErrNotRegistered", err)
	}
}

func testLeaseMonotonic(t *testing.T, f Factory) {
	r := f.open(t)
	worker := mustRegister(t, r).Worker
	ctx := testCtx(t)
	hi := lease(time.Minute)
	for _, until := range []time.Time{lease(time.Second), hi, hi, hi.Add(-30 * time.Second)} {
		if err := r.Lease(ctx, until); err != nil {
			t.Fatalf("Lease(%v): %v", until, err)
		}
	}
	if !f.Durable {
		return
	}
	// A lower lease must not have lowered what a later holder sees.
	reg := reuse(t, f, r, worker)
	if reg.LastLease.Before(hi) {
		t.Fatalf("LastLease %v after leases up to %v and a lower one", reg.LastLease, hi)
	}
}

func testDistinct(t *testing.T, f Factory) {
	if !f.Distinct {
		t.Skip("backend does not hand out distinct worker ids")
	}
	const n = 8
	if f.layout().MaxWorker()+1 < n {
		t.Skipf("layout has fewer than %d worker ids", n)
	}
	regs := make([]snowflake.Registry, n)
	for i := range regs {
		regs[i] = f.open(t)
	}
	ctx := testCtx(t)
	workers := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, r := range regs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reg, err := r.Register(ctx)
			workers[i], errs[i] = reg.Worker, err
		}()
	}
	wg.Wait()
	seen := make(map[int64]int)
	for i := range regs {
		if errs[i] != nil {
			t.Fatalf("Register #%d: %v", i, errs[i])
		}
		if j, dup := seen[workers[i]]; dup {
			t.Fatalf("Register #%d and #%d both got worker %d", j, i, workers[i])
		}
		seen[workers[i]] = i
	}
}

func testDurable(t *testing.T, f Factory) {
	if !f.Durable {
		t.Skip("backend does not keep leases across registries")
	}
	r := f.open(t)
	reg := mustRegister(t, r)
	until := lease(time.Hour)
	if err := r.Lease(testCtx(t), until); err != nil {
		t.Fatalf("Lease: %v", err)
	}
	got := reuse(t, f, r, reg.Worker)
	if got.LastLease.Before(until) {
		t.Fatalf("new holder of worker %d: LastLease %v, want at or after %v", reg.Worker, got.LastLease, until)
	}
}

// reuse closes r, which holds worker, then registers new registries, keeping
// each open, until one gets worker. Since every other id ends up held, the
// freed one is the last left: at most MaxWorker+1 registrations. A Register
// failing with ErrNoWorker (the freed claim not yet expired) is retried
// until f.ReuseTimeout.
func reuse(t *testing.T, f Factory, r snowflake.Registry, worker int64) snowflake.Registration {
	t.Helper()
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	reg, _ := claim(t, f, worker)
	return reg
}

// claim registers new registries, keeping each open, until one gets
// worker, and returns that one (see reuse).
func claim(t *testing.T, f Factory, worker int64) (snowflake.Registration, snowflake.Registry) {
	t.Helper()
	deadline := time.Now().Add(f.reuseTimeout())
	ctx := testCtx(t)
	next := f.open(t)
	for tries := int64(0); tries <= f.layout().MaxWorker(); {
		reg, err := next.Register(ctx)
		switch {
		case errors.Is(err, snowflake.ErrNoWorker) && time.Now().Before(deadline):
			time.Sleep(50 * time.Millisecond)
			continue
		case err != nil:
			t.Fatalf("Register while waiting for worker %d to be reused: %v", worker, err)
		case reg.Worker == worker:
			return reg, next
		}
		tries++
		next = f.open(t)
	}
	t.Fatalf("worker %d not reused within %d registrations", worker, f.layout().MaxWorker()+1)
	return snowflake.Registration{}, nil
}

// testFenced: a registration whose claim lapsed while its process was
// frozen, and whose worker id another registry then claimed, must not get
// any Lease through when it wakes — not a higher one, not a lower one (a
// confirmation) — and must close Lost; the new holder's LastLease covers
// every lease the old one had confirmed, and (Durable) a refused Lease
// leaves no trace.
func testFenced(t *testing.T, f Factory) {
	if f.Takeover == nil {
		t.Skip("no Takeover: the backend has no claim to fence")
	}
	ctx := testCtx(t)
	r1 := f.open(t)
	w := mustRegister(t, r1).Worker
	l1 := lease(time.Hour)
	if err := r1.Lease(ctx, l1); err != nil {
		t.Fatalf("Lease: %v", err)
	}

	f.Takeover(t, r1, w) // r1's process is frozen past its claim
	reg2, r2 := claim(t, f, w)
	if reg2.LastLease.Before(l1) {
		t.Fatalf("new holder of worker %d: LastLease %v, below the old holder's lease %v", w, reg2.LastLease, l1)
	}
	l2 := lease(2 * time.Hour)
	if err := r2.Lease(ctx, l2); err != nil {
		t.Fatalf("new holder: Lease: %v", err)
	}

	// r1 wakes, unaware.
	l3 := lease(3 * time.Hour)
	if err := r1.Lease(ctx, l3); !errors.Is(err, snowflake.ErrNotRegistered) {
		t.Fatalf("old holder after a takeover: Lease = %v, want ErrNotRegistered", err)
	}
	select {
	case <-r1.Lost():
	default:
		t.Fatal("old holder: Lost open after a fenced Lease")
	}
	if err := r1.Lease(ctx, l1); !errors.Is(err, snowflake.ErrNotRegistered) {
		t.Fatalf("old holder after a takeover: Lease of its own old lease = %v, want ErrNotRegistered", err)
	}
	if err := r2.Lease(ctx, l2.Add(time.Minute)); err != nil {
		t.Fatalf("new holder after the old one woke: Lease: %v", err)
	}
	if err := r1.Close(); err != nil {
		t.Fatalf("old holder: Close: %v", err)
	}
	if err := r2.Lease(ctx, l2.Add(2*time.Minute)); err != nil {
		t.Fatalf("new holder after the old one closed: Lease: %v", err)
	}
	if !f.Durable {
		return
	}
	got := reuse(t, f, r2, w)
	if got.LastLease.Before(l2.Add(2 * time.Minute)) {
		t.Fatalf("next holder: LastLease %v, below the lease %v", got.LastLease, l2.Add(2*time.Minute))
	}
	if !got.LastLease.Before(l3) {
		t.Fatalf("next holder: LastLease %v, at or after %v, which only the fenced-out holder asked for", got.LastLease, l3)
	}
}

func testClose(t *testing.T, f Factory) {
	r := f.open(t)
	mustRegister(t, r)
	ctx := testCtx(t)
	if err := r.Lease(ctx, lease(time.Second)); err != nil {
		t.Fatalf("Lease: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := r.Register(ctx); !errors.Is(err, snowflake.ErrRegistryClosed) {
		t.Fatalf("Register after Close: %v, want ErrRegistryClosed", err)
	}
	if err := r.Lease(ctx, lease(time.Minute)); !errors.Is(err, snowflake.ErrRegistryClosed) {
		t.Fatalf("Lease after Close: %v, want ErrRegistryClosed", err)
	}

	// Closed before ever registering.
	r2 := f.open(t)
	if err := r2.Close(); err != nil {
		t.Fatalf("Close unregistered: %v", err)
	}
	if _, err := r2.Register(ctx); !errors.Is(err, snowflake.ErrRegistryClosed) {
		t.Fatalf("Register after Close: %v, want ErrRegistryClosed", err)
	}
}

func testContextCanceled(t *testing.T, f Factory) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := f.open(t)
	if _, err := r.Register(ctx); err == nil {
		t.Fatal("Register with a canceled context: no error")
	}
	r2 := f.open(t)
	mustRegister(t, r2)
	if err := r2.Lease(ctx, lease(time.Minute)); err == nil {
		t.Fatal("Lease with a canceled context: no error")
	}
}

// testRegions: two regions on one backend both hold worker 0 at once,
// and never see each other's claims; two registrations of one region
// never hold one worker id.
func testRegions(t *testing.T, f Factory) {
	if f.NewRegion == nil {
		t.Skip("backend has no regions")
	}
	run := strconv.FormatInt(time.Now().UnixNano()%1e12, 36)
	east, west := "east"+run, "west"+run
	openRegion := func(region string) snowflake.Registry {
		r := f.NewRegion(t, region)
		if r == nil {
			t.Fatal("registrytest: Factory.NewRegion returned nil")
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	ctx := testCtx(t)
	e0, w0 := openRegion(east), openRegion(west)
	re, rw := mustRegister(t, e0), mustRegister(t, w0)
	if re.Worker != 0 || rw.Worker != 0 {
		t.Fatalf("first registrations of regions %s and %s got workers %d and %d, want 0 and 0: "+
			"a region's worker ids must not depend on another region's claims", east, west, re.Worker, rw.Worker)
	}
	until := lease(time.Minute)
	for name, r := range map[string]snowflake.Registry{east: e0, west: w0} {
		if err := r.Lease(ctx, until); err != nil {
			t.Fatalf("Lease of worker 0 in region %s while the other region holds its worker 0: %v", name, err)
		}
	}
	// More registrations of both regions at once: distinct within each.
	const n = 4
	if f.layout().MaxWorker() < n {
		t.Skipf("layout has fewer than %d worker ids a region", n+1)
	}
	type result struct {
		region string
		worker int64
		err    error
	}
	var regs []snowflake.Registry
	var names []string
	for range n {
		regs, names = append(regs, openRegion(east)), append(names, east)
		regs, names = append(regs, openRegion(west)), append(names, west)
	}
	results := make([]result, len(regs))
	var wg sync.WaitGroup
	for i, r := range regs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reg, err := r.Register(ctx)
			results[i] = result{names[i], reg.Worker, err}
		}()
	}
	wg.Wait()
	held := map[string]map[int64]bool{east: {0: true}, west: {0: true}}
	for _, res := range results {
		if res.err != nil {
			t.Fatalf("Register in region %s: %v", res.region, res.err)
		}
		if held[res.region][res.worker] {
			t.Fatalf("two registrations of region %s hold worker %d at once", res.region, res.worker)
		}
		held[res.region][res.worker] = true
	}
	// The first ones still hold their claims.
	for name, r := range map[string]snowflake.Registry{east: e0, west: w0} {
		if err := r.Lease(ctx, lease(2*time.Minute)); err != nil {
			t.Fatalf("Lease of worker 0 in region %s after more registrations: %v", name, err)
		}
		select {
		case <-r.Lost():
			t.Fatalf("region %s: worker 0 lost after more registrations", name)
		default:
		}
	}
}

// testHeld: Held counts the worker ids that registrations on the backend
// hold, whoever asks (a registration or an unregistered registry), and
// counts a closed registration's id no more unless ids are Disposable.
// With NewRegion it counts a new region's from 0 and no other region's.
// Counts are differences on New's backend, which earlier registrations of
// the test (of a shared server) may have used already.
func testHeld(t *testing.T, f Factory) {
	if !f.Held {
		t.Skip("backend does not count held worker ids")
	}
	ctx := testCtx(t)
	count := func(r snowflake.Registry) int {
		t.Helper()
		hc, ok := r.(snowflake.HeldCounter)
		if !ok {
			t.Fatalf("registry %T is not a snowflake.HeldCounter", r)
		}
		n, err := hc.Held(ctx)
		if err != nil {
			t.Fatalf("Held: %v", err)
		}
		if max := int(f.layout().MaxWorker() + 1); n < 0 || n > max {
			t.Fatalf("Held = %d, outside 0..%d", n, max)
		}
		return n
	}
	watcher := f.open(t) // never registers
	before := count(watcher)
	r1, r2 := f.open(t), f.open(t)
	mustRegister(t, r1)
	mustRegister(t, r2)
	if got := count(watcher); got != before+2 {
		t.Fatalf("Held after two registrations = %d, want %d", got, before+2)
	}
	if got := count(r1); got != before+2 {
		t.Fatalf("Held asked of a registration = %d, want %d", got, before+2)
	}
	if err := r1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	want := before + 1
	if f.Disposable {
		want = before + 2
	}
	if got := count(watcher); got != want {
		t.Fatalf("Held after one of two registrations closed = %d, want %d (disposable ids: %v)", got, want, f.Disposable)
	}
	if _, err := r1.(snowflake.HeldCounter).Held(ctx); !errors.Is(err, snowflake.ErrRegistryClosed) {
		t.Fatalf("Held of a closed registry: %v, want ErrRegistryClosed", err)
	}

	if f.NewRegion == nil {
		return
	}
	run := strconv.FormatInt(time.Now().UnixNano()%1e12, 36)
	openRegion := func(region string) snowflake.Registry {
		r := f.NewRegion(t, region)
		if r == nil {
			t.Fatal("registrytest: Factory.NewRegion returned nil")
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	east, west := openRegion("heldeast"+run), openRegion("heldwest"+run)
	if got := count(east); got != 0 {
		t.Fatalf("Held of a new region = %d, want 0", got)
	}
	for i := 1; i <= 3; i++ {
		mustRegister(t, openRegion("heldeast"+run))
		if got := count(east); got != i {
			t.Fatalf("Held of a region with %d registrations = %d", i, got)
		}
	}
	if got := count(west); got != 0 {
		t.Fatalf("Held of a region without registrations, after another region's = %d, want 0", got)
	}
}
