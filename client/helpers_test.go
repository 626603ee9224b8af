package client

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/wire"
)

// natsURL starts an embedded nats-server for the test and returns its URL.
func natsURL(t testing.TB) string {
	t.Helper()
	return natstest.RunServer(t).ClientURL()
}

// startLeafd starts a real leafd node in-process on the NATS at url (JetStream
// KV store, static worker id 1); cfg fills in or overrides the rest.
func startLeafd(t testing.TB, url string, cfg config.Config) *node.Node {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "c1"
	}
	cfg.NATS.URL, cfg.HTTP.Addr, cfg.DataDir = url, "off", t.TempDir()
	if cfg.Registry.Kind == "" {
		cfg.Registry.Kind, cfg.Registry.WorkerID = config.RegistryStatic, 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("start leafd: %v", err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	return n
}

// newClient connects to url and returns a Client closed at clean-up.
func newClient(t testing.TB, url string, opts ...Option) *Client {
	t.Helper()
	c, err := New(natstest.Connect(t, url), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// withClock makes the client read clk (its waits stay on real timers).
func withClock(clk *fakeClock) Option {
	return func(o *options) error { o.clock = clock.WithNow(nil, clk.Now); return nil }
}

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// fakeResponder answers id requests on a plain NATS subscription with
// consecutive ids from 1, binary or decimal as asked. Requests after the
// first `free` ones wait until release is closed, when hold is set.
type fakeResponder struct {
	mu      sync.Mutex
	next    int64 // the next id to hand out
	counts  []int // the count of each request, in order
	free    int
	hold    chan struct{}
	arrived chan int // the count of each held request, as it arrives
}

func serveFake(t testing.TB, nc *nats.Conn, subject string, f *fakeResponder) *fakeResponder {
	t.Helper()
	if f == nil {
		f = &fakeResponder{}
	}
	f.next = 1
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		n, err := wire.ParseCount(m.Data, wire.DefaultMaxBatch)
		if err != nil {
			reply := nats.NewMsg(m.Reply)
			reply.Header.Set(wire.ErrorCodeHeader, wire.CodeBadRequest)
			reply.Header.Set(wire.ErrorHeader, err.Error())
			_ = m.RespondMsg(reply)
			return
		}
		f.mu.Lock()
		f.counts = append(f.counts, n)
		held := f.hold != nil && len(f.counts) > f.free
		hold := f.hold
		f.mu.Unlock()
		if held {
			if f.arrived != nil {
				f.arrived <- n
			}
			<-hold
		}
		f.mu.Lock()
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = f.next
			f.next++
		}
		f.mu.Unlock()
		var body []byte
		if wire.WantsBinary(m.Header) {
			body = wire.AppendBinary(nil, ids)
		} else {
			body = wire.AppendDecimal(nil, ids)
		}
		_ = m.Respond(body)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

// issued is the next id the responder would hand out.
func (f *fakeResponder) issued() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.next
}

func (f *fakeResponder) requestCounts() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.counts...)
}

// eventually polls cond until it holds, failing the test after 20s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, 20*time.Second, cond)
}

// ctxFor is a context that ends with the test, bounded by 30s.
func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// clientGoroutines lists the goroutines running this package's methods (the
// refills and the janitor; tests must not be inside a Client call then).
func clientGoroutines() []string {
	buf := make([]byte, 1<<22)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "leafmq/client.(*") {
			out = append(out, g)
		}
	}
	return out
}

// settled waits until no refill of t is in flight.
func settled(t testing.TB, c *cache) {
	t.Helper()
	eventually(t, "refills to finish", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.inflight == 0
	})
}

// cachedIDs returns the ids the cache holds and has not handed out.
func (t *cache) cachedIDs() []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []int64
	add := func(b *batch) {
		if b != nil {
			out = append(out, b.ids[len(b.ids)-remaining(b):]...)
		}
	}
	add(t.cur.Load())
	for _, b := range t.queue {
		add(b)
	}
	return out
}
