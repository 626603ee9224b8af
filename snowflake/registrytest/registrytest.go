// Package registrytest is the conformance suite of snowflake.Registry: every
// backend (static, JetStream KV, ZooKeeper, a WORKER_NODE table) runs Run
// against itself in its own tests.
//
//	func TestConformance(t *testing.T) {
//		registrytest.Run(t, registrytest.Factory{
//			New:      func(t testing.TB) snowflake.Registry { ... },
//			Distinct: true,
//			Durable:  true,
//		})
//	}
package registrytest

import (
	"context"
	"errors"
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
	// ReuseTimeout bounds the Durable case. Default 30s.
	ReuseTimeout time.Duration
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
	timeout := f.ReuseTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	deadline := time.Now().Add(timeout)
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
			return reg
		}
		tries++
		next = f.open(t)
	}
	t.Fatalf("worker %d not reused within %d registrations", worker, f.layout().MaxWorker()+1)
	return snowflake.Registration{}
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
