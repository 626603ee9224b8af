package kvworker_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snowflake/kvworker"
	"github.com/leafmq/leafmq/snowflake/registrytest"
)

// layout16 has 16 worker ids, so tests can fill them all.
func layout16() snowflake.Layout {
	l := snowflake.LeafLayout()
	l.WorkerBits, l.SequenceBits = 4, 18
	return l
}

func newJS(t testing.TB, srv *server.Server) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func open(t testing.TB, js jetstream.JetStream, l snowflake.Layout, o kvworker.Options) *kvworker.Registry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := kvworker.Open(ctx, js, l, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestConformance(t *testing.T) {
	var js jetstream.JetStream
	var owner testing.TB
	registrytest.Run(t, registrytest.Factory{
		New: func(t testing.TB) snowflake.Registry {
			// One server per subtest, shared by every registry of it.
			if owner != t {
				owner, js = t, newJS(t, natstest.RunServer(t))
			}
			return open(t, js, layout16(), kvworker.Options{TTL: 2 * time.Second, Node: t.Name()})
		},
		Layout:   layout16(),
		Held:     true,
		Distinct: true,
		Durable:  true,
		// A frozen process: its refresher stops, and its claim key goes (as
		// it expires after the TTL; purged here so the suite need not wait).
		Takeover: func(t testing.TB, r snowflake.Registry, worker int64) {
			kvworker.Freeze(r.(*kvworker.Registry))
			kv, err := js.KeyValue(context.Background(), kvworker.DefaultBucket)
			if err != nil {
				t.Fatal(err)
			}
			if err := kv.Purge(context.Background(), "w"+strconv.FormatInt(worker, 10)); err != nil {
				t.Fatal(err)
			}
		},
		NewRegion: func(t testing.TB, region string) snowflake.Registry {
			if owner != t {
				owner, js = t, newJS(t, natstest.RunServer(t))
			}
			return open(t, js, snowflake.LeafDCLayout(), kvworker.Options{TTL: 2 * time.Second, Node: t.Name(),
				Region: region, Prefer: []int64{0}})
		},
	})
}

// TestRegionBucket: a region's claims live in a bucket of its own.
func TestRegionBucket(t *testing.T) {
	if got := kvworker.BucketFor("eu-1"); got != "leaf_workers_eu-1" {
		t.Fatalf("BucketFor(eu-1) = %q", got)
	}
	if got := kvworker.BucketFor(""); got != kvworker.DefaultBucket {
		t.Fatalf("BucketFor() = %q", got)
	}
	js := newJS(t, natstest.RunServer(t))
	r := open(t, js, snowflake.LeafDCLayout(), kvworker.Options{Region: "eu-1"})
	if _, err := r.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.KeyValue(context.Background(), "leaf_workers_eu-1"); err != nil {
		t.Fatalf("bucket of region eu-1: %v", err)
	}
	if _, err := kvworker.Open(context.Background(), js, snowflake.LeafDCLayout(), kvworker.Options{Region: "eu.1"}); !errors.Is(err, kvworker.ErrInvalid) {
		t.Fatalf("Open with region eu.1: %v, want ErrInvalid", err)
	}
}

// TestCrashReuse: a node that dies without Close (its connection closed)
// keeps its worker id until the claim key's TTL runs out; the next holder
// of the id sees its lease.
func TestCrashReuse(t *testing.T) {
	srv := natstest.RunServer(t)
	opts := kvworker.Options{TTL: time.Second}
	nc1 := natstest.Connect(t, srv.ClientURL())
	js1, err := jetstream.New(nc1)
	if err != nil {
		t.Fatal(err)
	}
	r1 := open(t, js1, layout16(), opts)
	reg1, err := r1.Register(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := r1.Lease(ctx(t), until); err != nil {
		t.Fatal(err)
	}
	nc1.Close() // crash: no Close, no purge

	js := newJS(t, srv)
	deadline := time.Now().Add(15 * time.Second)
	var held []int64
	for {
		r := open(t, js, layout16(), opts)
		reg, err := r.Register(ctx(t))
		switch {
		case errors.Is(err, snowflake.ErrNoWorker):
			if time.Now().After(deadline) {
				t.Fatalf("worker %d not freed within 15s (held %v)", reg1.Worker, held)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		case err != nil:
			t.Fatal(err)
		case reg.Worker == reg1.Worker:
			if reg.LastLease.Before(until) {
				t.Fatalf("LastLease %v, want at or after %v", reg.LastLease, until)
			}
			select {
			case <-r1.Lost():
			default:
				t.Fatal("the crashed registry's Lost is open while its worker id is held by another")
			}
			return
		}
		held = append(held, reg.Worker)
		if len(held) > 15 {
			t.Fatalf("worker %d never handed out again: %v", reg1.Worker, held)
		}
	}
}

func TestLostOnShutdown(t *testing.T) {
	srv := natstest.RunServer(t)
	r := open(t, newJS(t, srv), snowflake.LeafLayout(), kvworker.Options{TTL: time.Second})
	if _, err := r.Register(ctx(t)); err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	start := time.Now()
	select {
	case <-r.Lost():
		// The claim expires at most 1s (TTL) after the last refresh sent,
		// which was before the shutdown; allow a little scheduling slack.
		if d := time.Since(start); d > time.Second+250*time.Millisecond {
			t.Errorf("Lost closed %v after the shutdown, later than the TTL of 1s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lost not closed within 5s of the server's shutdown")
	}
	if err := r.Lease(ctx(t), time.Now().Add(time.Minute)); !errors.Is(err, snowflake.ErrNotRegistered) {
		t.Fatalf("Lease after Lost: %v, want ErrNotRegistered", err)
	}
	if _, err := r.Register(ctx(t)); !errors.Is(err, snowflake.ErrNotRegistered) {
		t.Fatalf("Register after Lost: %v, want ErrNotRegistered", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close after Lost: %v", err)
	}
}

func TestNoWorker(t *testing.T) {
	l := snowflake.LeafLayout()
	l.WorkerBits, l.SequenceBits = 1, 21 // two worker ids
	js := newJS(t, natstest.RunServer(t))
	seen := map[int64]bool{}
	for range 2 {
		reg, err := open(t, js, l, kvworker.Options{}).Register(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		seen[reg.Worker] = true
	}
	if len(seen) != 2 {
		t.Fatalf("two registrations got workers %v", seen)
	}
	if _, err := open(t, js, l, kvworker.Options{}).Register(ctx(t)); !errors.Is(err, snowflake.ErrNoWorker) {
		t.Fatalf("third Register: %v, want ErrNoWorker", err)
	}
}

func TestUnavailable(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv)
	srv.Shutdown()
	_, err := kvworker.Open(context.Background(), js, snowflake.LeafLayout(), kvworker.Options{Timeout: 300 * time.Millisecond})
	if !errors.Is(err, snowflake.ErrRegistryUnavailable) {
		t.Fatalf("Open on a stopped server: %v, want ErrRegistryUnavailable", err)
	}
}

func TestOptionsInvalid(t *testing.T) {
	js := newJS(t, natstest.RunServer(t))
	tests := []struct {
		name string
		opts kvworker.Options
	}{
		{"bucket", kvworker.Options{Bucket: "a.b"}},
		{"replicas", kvworker.Options{Replicas: 6}},
		{"ttl", kvworker.Options{TTL: 500 * time.Millisecond}},
		{"ttl fraction", kvworker.Options{TTL: 1500 * time.Millisecond}},
		{"refresh", kvworker.Options{TTL: time.Second, Refresh: 600 * time.Millisecond}},
		{"timeout", kvworker.Options{Timeout: -time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := kvworker.Open(ctx(t), js, snowflake.LeafLayout(), tc.opts); !errors.Is(err, kvworker.ErrInvalid) {
				t.Fatalf("Open(%+v): %v, want ErrInvalid", tc.opts, err)
			}
		})
	}
}

func TestBucketWithoutTTL(t *testing.T) {
	js := newJS(t, natstest.RunServer(t))
	if _, err := js.CreateKeyValue(ctx(t), jetstream.KeyValueConfig{Bucket: "plain"}); err != nil {
		t.Fatal(err)
	}
	if _, err := kvworker.Open(ctx(t), js, snowflake.LeafLayout(), kvworker.Options{Bucket: "plain"}); !errors.Is(err, kvworker.ErrInvalid) {
		t.Fatalf("Open on a bucket without LimitMarkerTTL: %v, want ErrInvalid", err)
	}
}

// TestCloseStopsRefresher is the goroutine leak check: after Close no
// refresher of the package is left running.
func TestCloseStopsRefresher(t *testing.T) {
	js := newJS(t, natstest.RunServer(t))
	var rs []*kvworker.Registry
	for range 3 {
		// A TTL well above a refresh's time on a loaded machine (CI: a
		// 1 s TTL lapsed under -race with other loads): this test is
		// about goroutines, not about claims lapsing.
		r := open(t, js, snowflake.LeafLayout(), kvworker.Options{TTL: 10 * time.Second, Refresh: 50 * time.Millisecond})
		if _, err := r.Register(ctx(t)); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	// A goroutine just started may not show in a stack dump yet: poll.
	for deadline := time.Now().Add(2 * time.Second); refreshers() < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d refreshers running, want 3", refreshers())
		}
	}
	time.Sleep(200 * time.Millisecond) // a few refreshes
	for _, r := range rs {
		select {
		case <-r.Lost():
			t.Fatal("Lost closed while the server is up")
		default:
		}
		if err := r.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	// Close waits for the refresher, so none is left once it returns.
	if n := refreshers(); n != 0 {
		t.Fatalf("%d refreshers still running after Close", n)
	}
}

// refreshers counts the goroutines running Registry.refresh, from a dump
// of all stacks in which every goroutine's stack was available (one running
// on another thread shows none, so such dumps are taken again).
func refreshers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n == len(buf) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		dump := string(buf[:n])
		if strings.Contains(dump, "stack unavailable") {
			runtime.Gosched()
			continue
		}
		return strings.Count(dump, "kvworker.(*Registry).refresh(")
	}
}

// TestPrefer: Register claims the first free id of Options.Prefer (ids out
// of range or held by a live registration skipped), with its lease; with
// none free it scans as without.
func TestPrefer(t *testing.T) {
	js := newJS(t, natstest.RunServer(t))
	l := layout16()
	a := open(t, js, l, kvworker.Options{Node: "a"})
	ra, err := a.Register(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	w := (ra.Worker + 5) % 16
	b := open(t, js, l, kvworker.Options{Node: "b", Prefer: []int64{w}})
	rb, err := b.Register(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if rb.Worker != w {
		t.Fatalf("Register with Prefer [%d] = worker %d", w, rb.Worker)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := b.Lease(ctx(t), until); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	c := open(t, js, l, kvworker.Options{Node: "c", Prefer: []int64{-1, 16, ra.Worker, w}})
	rc, err := c.Register(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if rc.Worker != w || !rc.LastLease.Equal(until) {
		t.Fatalf("Register with Prefer [-1 16 %d(held) %d] = worker %d lease %v, want %d lease %v",
			ra.Worker, w, rc.Worker, rc.LastLease, w, until)
	}
	d := open(t, js, l, kvworker.Options{Node: "d", Prefer: []int64{ra.Worker, w}})
	rd, err := d.Register(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if rd.Worker == ra.Worker || rd.Worker == w {
		t.Fatalf("Register with every preferred id held = worker %d", rd.Worker)
	}
}
