package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// Ids are unique across clients, goroutines and calls, with prefetch on:
// 3 clients × 8 goroutines × 200k segment ids (and snowflake ids).
func TestUniqueAcrossClients(t *testing.T) {
	const clients, workers = 3, 8
	perWorker := 200_000
	if testing.Short() {
		perWorker = 20_000
	}
	url := natsURL(t)
	startLeafd(t, url, config.Config{})
	cs := make([]*Client, clients)
	for i := range cs {
		cs[i] = newClient(t, url)
	}

	type take func(c *Client, n int) ([]int64, error)
	run := func(t *testing.T, perWorker int, one func(*Client) (int64, error), many take) {
		// Each id is stored as id*4+client, so sorting groups equal ids and
		// a duplicate names both clients.
		got := make([][]int64, clients*workers)
		errs := make(chan error, clients*workers)
		var wg sync.WaitGroup
		for ci, c := range cs {
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					mine := make([]int64, 0, perWorker)
					for i := 0; len(mine) < perWorker; i++ {
						if i%50 == 49 { // now and then a batch, crossing batches
							ids, err := many(c, 1+i%97)
							if err != nil {
								errs <- err
								return
							}
							for _, id := range ids {
								mine = append(mine, id*4+int64(ci))
							}
							continue
						}
						id, err := one(c)
						if err != nil {
							errs <- err
							return
						}
						mine = append(mine, id*4+int64(ci))
					}
					got[ci*workers+w] = mine
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		all := slices.Concat(got...)
		slices.Sort(all)
		for i := 1; i < len(all); i++ {
			if all[i]>>2 == all[i-1]>>2 {
				t.Fatalf("id %d handed out by client %d and client %d", all[i]>>2, all[i-1]&3, all[i]&3)
			}
		}
		if all[0]>>2 < 1 {
			t.Fatalf("id %d handed out", all[0]>>2)
		}
		t.Logf("%d ids, no duplicate", len(all))
	}
	// A deadline per part: 4.8M segment ids under -race on a busy machine
	// took 33 s, and left the snowflake part none (CI).
	t.Run("segment", func(t *testing.T) {
		ctx := ctxFor(t)
		run(t, perWorker,
			func(c *Client) (int64, error) { return c.Next(ctx, "uniq") },
			func(c *Client, n int) ([]int64, error) { return c.NextN(ctx, "uniq", n) })
	})
	t.Run("snowflake", func(t *testing.T) {
		ctx := ctxFor(t)
		run(t, perWorker/10,
			func(c *Client) (int64, error) { return c.Snowflake(ctx) },
			func(c *Client, n int) ([]int64, error) { return c.SnowflakeN(ctx, n) })
	})
}

// Error replies map back to the sentinels; bad tags and counts are rejected
// before any request.
func TestErrors(t *testing.T) {
	url := natsURL(t)
	startLeafd(t, url, config.Config{Store: config.StoreConfig{AutoCreate: "false"}})
	ctx := ctxFor(t)
	for _, prefetch := range []bool{true, false} {
		var opts []Option
		if !prefetch {
			opts = append(opts, WithoutPrefetch())
		}
		opts = append(opts, WithBatch(1, 20000)) // beyond the server's 10000
		c := newClient(t, url, opts...)
		tests := []struct {
			name     string
			call     func() error
			want     error
			requests bool // whether it may reach the server
		}{
			{"unknown tag", func() error { _, err := c.Next(ctx, "nope"); return err }, ErrUnknownTag, true},
			{"unknown tag batch", func() error { _, err := c.NextN(ctx, "nope", 5); return err }, ErrUnknownTag, true},
			{"dot", func() error { _, err := c.Next(ctx, "a.b"); return err }, ErrBadRequest, false},
			{"wildcard", func() error { _, err := c.Next(ctx, "*"); return err }, ErrBadRequest, false},
			{"gt", func() error { _, err := c.NextN(ctx, ">", 2); return err }, ErrBadRequest, false},
			{"empty", func() error { _, err := c.Next(ctx, ""); return err }, ErrBadRequest, false},
			{"long", func() error { _, err := c.Next(ctx, strings.Repeat("a", 129)); return err }, ErrBadRequest, false},
			{"zero count", func() error { _, err := c.NextN(ctx, "nope", 0); return err }, ErrBadRequest, false},
			{"zero snowflakes", func() error { _, err := c.SnowflakeN(ctx, 0); return err }, ErrBadRequest, false},
			{"over server max", func() error { _, err := c.SnowflakeN(ctx, 25000); return err }, ErrBadRequest, true},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("prefetch=%v/%s", prefetch, tt.name), func(t *testing.T) {
				before := c.requests.Load()
				err := tt.call()
				if !errors.Is(err, tt.want) {
					t.Fatalf("got %v, want %v", err, tt.want)
				}
				if tt.requests != (c.requests.Load() > before) {
					t.Errorf("requests sent: %d, want some: %v", c.requests.Load()-before, tt.requests)
				}
			})
		}
		if !errors.Is(ErrUnknownTag, wire.ErrUnknownTag) || !errors.Is(ErrBadRequest, wire.ErrBadRequest) ||
			!errors.Is(ErrUnavailable, wire.ErrUnavailable) {
			t.Fatal("sentinels are not wire's")
		}
	}
}

// With nobody answering, calls retry until their context ends and return
// ErrUnavailable wrapping the context's error and the last attempt's.
func TestNoResponders(t *testing.T) {
	url := natsURL(t)
	for _, prefetch := range []bool{true, false} {
		opts := []Option{WithBackoff(time.Millisecond, 20*time.Millisecond), WithMaxWait(300 * time.Millisecond)}
		if !prefetch {
			opts = append(opts, WithoutPrefetch())
		}
		c := newClient(t, url, opts...)
		calls := []struct {
			name string
			call func(context.Context) error
		}{
			{"next", func(ctx context.Context) error { _, err := c.Next(ctx, "t"); return err }},
			{"nextN", func(ctx context.Context) error { _, err := c.NextN(ctx, "t", 3); return err }},
			{"snowflake", func(ctx context.Context) error { _, err := c.Snowflake(ctx); return err }},
		}
		for _, call := range calls {
			t.Run(fmt.Sprintf("prefetch=%v/%s", prefetch, call.name), func(t *testing.T) {
				before := c.requests.Load()
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				err := call.call(ctx)
				if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) ||
					!errors.Is(err, nats.ErrNoResponders) {
					t.Fatalf("got %v, want ErrUnavailable wrapping the deadline and no responders", err)
				}
				if n := c.requests.Load() - before; n < 2 {
					t.Errorf("%d requests, want retries", n)
				}
				// No deadline: WithMaxWait bounds the call.
				if err := call.call(context.Background()); !errors.Is(err, ErrUnavailable) ||
					!errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("without deadline: got %v", err)
				}
			})
		}
	}
}

// A node that comes up after the first failed attempts is used: the call
// waiting for it gets an id.
func TestNodeStartsLate(t *testing.T) {
	for _, prefetch := range []bool{true, false} {
		t.Run(fmt.Sprintf("prefetch=%v", prefetch), func(t *testing.T) {
			url := natsURL(t)
			opts := []Option{WithBackoff(time.Millisecond, 50*time.Millisecond)}
			if !prefetch {
				opts = append(opts, WithoutPrefetch())
			}
			c := newClient(t, url, opts...)
			type result struct {
				id  int64
				err error
			}
			done := make(chan result, 1)
			go func() {
				id, err := c.Next(ctxFor(t), "late")
				done <- result{id, err}
			}()
			eventually(t, "failed attempts", func() bool { return c.failures.Load() >= 2 })
			startLeafd(t, url, config.Config{Name: "late"})
			r := <-done
			if r.err != nil || r.id < 1 {
				t.Fatalf("Next = %d, %v", r.id, r.err)
			}
		})
	}
}

// While ids remain in the cache, the caller never waits for a refill: the
// responder holds every refill after the first until the test lets it go,
// and the caller still gets every cached id.
func TestRefillDoesNotBlock(t *testing.T) {
	url := natsURL(t)
	f := serveFake(t, natstest.Connect(t, url), wire.SegmentPrefix+"slow",
		&fakeResponder{free: 1, hold: make(chan struct{}), arrived: make(chan int, 16)})
	c := newClient(t, url, WithBatch(100, 100))
	ctx := ctxFor(t)
	var ids []int64
	id, err := c.Next(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, id)
	if n := <-f.arrived; n != 100 { // the refill, held from now on
		t.Fatalf("refill asked for %d ids, want 100", n)
	}
	for range 99 {
		id, err := c.Next(ctx, "slow")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if want := f.issued() - 1; ids[len(ids)-1] != want {
		t.Fatalf("last id %d, want %d (the first batch)", ids[len(ids)-1], want)
	}
	// The cache is empty now: the next call waits for the held refill.
	done := make(chan error, 1)
	go func() {
		id, err := c.Next(ctx, "slow")
		ids = append(ids, id)
		done <- err
	}()
	close(f.hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, id := range ids[:100] {
		if id != int64(i+1) {
			t.Fatalf("ids[%d] = %d, want %d", i, id, i+1)
		}
	}
	if ids[100] <= 100 { // from whichever held refill arrived first
		t.Fatalf("id after the wait: %d, want one of a refill", ids[100])
	}
}

// The refill size follows the rate at which ids are taken.
func TestBatchGrowsWithRate(t *testing.T) {
	url := natsURL(t)
	f := serveFake(t, natstest.Connect(t, url), wire.SegmentPrefix+"fast", nil)
	c := newClient(t, url)
	ctx := ctxFor(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		for range 1000 {
			if _, err := c.Next(ctx, "fast"); err != nil {
				t.Fatal(err)
			}
		}
		counts := f.requestCounts()
		if counts[0] != DefaultMinBatch {
			t.Fatalf("first refill asked for %d, want %d", counts[0], DefaultMinBatch)
		}
		if slices.Max(counts) >= 20*DefaultMinBatch {
			t.Logf("refill sizes: %v…; %v", counts[:min(len(counts), 12)], c.lookup("fast"))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("refill sizes did not grow: %v", counts)
		}
	}
}

// The sizing itself, on a fake clock.
func TestSizeFollowsRate(t *testing.T) {
	clk := newFakeClock()
	c := newClient(t, natsURL(t), withClock(clk), WithHold(100*time.Millisecond), WithPipeline(8))
	tc := c.newCache("x", "leaf.segment.x", false)
	step := func(d time.Duration, taken int64) (int, int) {
		clk.Advance(d)
		tc.installed += taken
		tc.observeLocked(clk.Now(), 0)
		return tc.sizeLocked()
	}
	tests := []struct {
		name         string
		d            time.Duration
		taken        int64
		size, target int
	}{
		{"start", 0, 0, DefaultMinBatch, 2 * DefaultMinBatch},
		{"1k/s", time.Second, 1000, 100, 200},
		{"1M/s", time.Second, 1_000_000, 10000, 100_000},
		{"100M/s: capped by the pipeline", time.Second, 100_000_000, 10000, 160_000},
		{"an hour idle forgets", time.Hour, 0, DefaultMinBatch, 2 * DefaultMinBatch},
	}
	for _, tt := range tests {
		size, target := step(tt.d, tt.taken)
		if size != tt.size || target != tt.target {
			t.Errorf("%s: size %d, target %d; want %d, %d", tt.name, size, target, tt.size, tt.target)
		}
	}
	// Snowflake holds at most a quarter of the max age.
	sc := c.newCache("", wire.SnowflakeSubject, true)
	c.o.maxAge = 40 * time.Millisecond
	sc.rate = 1e5
	if size, _ := sc.sizeLocked(); size != 1000 {
		t.Errorf("snowflake size %d, want 1000 (10ms of 100k/s)", size)
	}
}

// Close drops the cached ids (no other client ever gets them either: the
// servers handed them out once) and leaves no goroutine behind; it is
// idempotent and later calls fail with ErrClosed.
func TestClose(t *testing.T) {
	url := natsURL(t)
	startLeafd(t, url, config.Config{})
	ctx := ctxFor(t)
	before := len(clientGoroutines())
	a := newClient(t, url)
	tags := []string{"c0", "c1", "c2"}
	for _, tag := range tags {
		if _, err := a.Next(ctx, tag); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Snowflake(ctx); err != nil {
		t.Fatal(err)
	}
	cached := map[string]map[int64]bool{} // each tag has its own ids
	for _, tag := range tags {
		tc := a.lookup(tag)
		settled(t, tc)
		cached[tag] = map[int64]bool{}
		for _, id := range tc.cachedIDs() {
			cached[tag][id] = true
		}
		if len(cached[tag]) == 0 {
			t.Fatalf("nothing cached for %s", tag)
		}
	}
	// Takers racing Close get ids or ErrClosed, nothing else.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := a.Next(ctx, "racing"); err != nil {
					if !errors.Is(err, ErrClosed) {
						errs <- err
					}
					return
				}
			}
		}()
	}
	a.Close()
	a.Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, tag := range tags {
		if ids := a.lookup(tag); ids != nil {
			t.Fatalf("tag %s still cached after Close", tag)
		}
	}
	if ids := a.snow.cachedIDs(); len(ids) != 0 {
		t.Fatalf("%d snowflake ids still cached", len(ids))
	}
	calls := []func() error{
		func() error { _, err := a.Next(ctx, "c0"); return err },
		func() error { _, err := a.NextN(ctx, "c0", 2); return err },
		func() error { _, err := a.Snowflake(ctx); return err },
		func() error { _, err := a.SnowflakeN(ctx, 3); return err },
	}
	for i, call := range calls {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Fatalf("call %d after Close: %v", i, err)
		}
	}
	eventually(t, "goroutines to end", func() bool { return len(clientGoroutines()) <= before })

	b := newClient(t, url)
	for _, tag := range tags {
		ids, err := b.NextN(ctx, tag, 500)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if cached[tag][id] {
				t.Fatalf("id %d of %s was cached by the closed client and handed out again", id, tag)
			}
		}
	}
}

// Cached snowflake ids older than the max age are dropped, not handed out.
func TestSnowflakeMaxAge(t *testing.T) {
	url := natsURL(t)
	f := serveFake(t, natstest.Connect(t, url), wire.SnowflakeSubject, nil)
	clk := newFakeClock()
	c := newClient(t, url, withClock(clk), WithSnowflakeMaxAge(time.Second))
	ctx := ctxFor(t)
	first, err := c.Snowflake(ctx)
	if err != nil {
		t.Fatal(err)
	}
	settled(t, c.snow)
	if n := len(c.snow.cachedIDs()); n == 0 {
		t.Fatal("nothing cached")
	}
	clk.Advance(999 * time.Millisecond)
	if id, err := c.Snowflake(ctx); err != nil || id != first+1 {
		t.Fatalf("before the max age: %d, %v; want %d", id, err, first+1)
	}
	clk.Advance(time.Millisecond)
	issued := f.issued()
	for _, call := range []func() (int64, error){
		func() (int64, error) { return c.Snowflake(ctx) },
		func() (int64, error) {
			ids, err := c.SnowflakeN(ctx, 3)
			if err != nil {
				return 0, err
			}
			return ids[0], nil
		},
	} {
		id, err := call()
		if err != nil {
			t.Fatal(err)
		}
		if id < issued {
			t.Fatalf("got id %d, issued before the max age passed (< %d)", id, issued)
		}
	}
}

// The same on a real leafd and the real clock: after a pause longer than the
// max age, the ids cached before it are not handed out.
//
// The age is the time since the client asked for the ids: a leafd serves
// snowflake ids from a pre-filled ring, so an id's own time may be older.
func TestSnowflakeMaxAgeLeafd(t *testing.T) {
	url := natsURL(t)
	startLeafd(t, url, config.Config{})
	const maxAge = 50 * time.Millisecond
	c := newClient(t, url, WithSnowflakeMaxAge(maxAge))
	ctx := ctxFor(t)
	for round := range 3 {
		id, err := c.Snowflake(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := c.Decode(id); d.Worker != 1 {
			t.Fatalf("worker %d, want 1", d.Worker)
		}
		settled(t, c.snow)
		stale := c.snow.cachedIDs()
		if len(stale) == 0 {
			t.Fatal("nothing cached")
		}
		time.Sleep(2 * maxAge)
		ids, err := c.SnowflakeN(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if slices.Contains(stale, id) {
				t.Fatalf("round %d: id %d was cached before the pause", round, id)
			}
		}
	}
}

// Many tags do not grow the client: at most WithMaxTags are cached, the
// least recently used is dropped, and idle ones go away.
func TestTagCardinality(t *testing.T) {
	url := natsURL(t)
	startLeafd(t, url, config.Config{})
	ctx := ctxFor(t)
	before := len(clientGoroutines())
	c := newClient(t, url, WithMaxTags(3))
	seen := map[string]map[int64]bool{}
	for i := range 60 {
		tag := fmt.Sprintf("k%d", i%20)
		if i%2 == 1 {
			tag = "hot" // used all along: never the least recently used
		}
		id, err := c.Next(ctx, tag)
		if err != nil {
			t.Fatal(err)
		}
		if seen[tag] == nil {
			seen[tag] = map[int64]bool{}
		}
		if seen[tag][id] {
			t.Fatalf("tag %s: id %d twice", tag, id)
		}
		seen[tag][id] = true
		if n := len(*c.tags.Load()); n > 3 {
			t.Fatalf("%d tags cached, max 3", n)
		}
		if i > 1 && c.lookup("hot") == nil {
			t.Fatalf("the hot tag was evicted at %d", i)
		}
	}
	c.Close()
	eventually(t, "goroutines to end", func() bool { return len(clientGoroutines()) <= before })

	// More tags in use than the cap: they evict one another, and every
	// caller still gets its ids, unique.
	thrash := newClient(t, url, WithMaxTags(1))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	got := make([][]int64, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3000 {
				id, err := thrash.Next(ctx, fmt.Sprintf("thrash%d", g%2))
				if err != nil {
					errs <- err
					return
				}
				got[g] = append(got[g], id)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for tag := range 2 {
		ids := slices.Concat(got[tag], got[tag+2])
		slices.Sort(ids)
		if len(slices.Compact(ids)) != 6000 {
			t.Fatalf("thrash%d: duplicate ids", tag)
		}
	}

	idle := newClient(t, url, WithIdleTimeout(20*time.Millisecond))
	if _, err := idle.Next(ctx, "idle"); err != nil {
		t.Fatal(err)
	}
	if _, err := idle.Snowflake(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the idle tag to be dropped", func() bool { return idle.lookup("idle") == nil })
	eventually(t, "idle snowflake ids to be dropped", func() bool { return len(idle.snow.cachedIDs()) == 0 })
	if id, err := idle.Next(ctx, "idle"); err != nil || seen["idle"][id] {
		t.Fatalf("after the drop: %d, %v", id, err)
	}
}

// Without prefetch every call is a request, and big NextN calls are split
// into requests of at most the max batch.
func TestWithoutPrefetch(t *testing.T) {
	url := natsURL(t)
	startLeafd(t, url, config.Config{})
	c := newClient(t, url, WithoutPrefetch())
	ctx := ctxFor(t)
	for i := range 5 {
		id, err := c.Next(ctx, "np")
		if err != nil {
			t.Fatal(err)
		}
		if id != int64(i+1) {
			t.Fatalf("id %d, want %d", id, i+1)
		}
	}
	if n := c.requests.Load(); n != 5 {
		t.Fatalf("%d requests for 5 ids", n)
	}
	ids, err := c.NextN(ctx, "np", 25000)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.requests.Load(); n != 8 {
		t.Fatalf("%d requests, want 8 (5 + 3 for 25000 ids)", n)
	}
	slices.Sort(ids)
	if len(slices.Compact(ids)) != 25000 || ids[0] < 6 {
		t.Fatalf("ids not unique or reused: first %d", ids[0])
	}
	sf, err := c.SnowflakeN(ctx, 3)
	if err != nil || len(sf) != 3 {
		t.Fatal(sf, err)
	}
}

func TestOptions(t *testing.T) {
	nc := natstest.Connect(t, natsURL(t))
	tests := []struct {
		name string
		nc   *nats.Conn
		opts []Option
		want error
	}{
		{"defaults", nc, nil, nil},
		{"nil conn", nil, nil, ErrBadOption},
		{"batch min 0", nc, []Option{WithBatch(0, 10)}, ErrBadOption},
		{"batch max < min", nc, []Option{WithBatch(10, 5)}, ErrBadOption},
		{"pipeline 0", nc, []Option{WithPipeline(0)}, ErrBadOption},
		{"timeout 0", nc, []Option{WithTimeout(0)}, ErrBadOption},
		{"max wait -1", nc, []Option{WithMaxWait(-1)}, ErrBadOption},
		{"hold 0", nc, []Option{WithHold(0)}, ErrBadOption},
		{"max age 0", nc, []Option{WithSnowflakeMaxAge(0)}, ErrBadOption},
		{"max tags 0", nc, []Option{WithMaxTags(0)}, ErrBadOption},
		{"idle 0", nc, []Option{WithIdleTimeout(0)}, ErrBadOption},
		{"backoff", nc, []Option{WithBackoff(time.Second, time.Millisecond)}, ErrBadOption},
		{"layout", nc, []Option{WithLayout(snowflake.Layout{TimeBits: 40, WorkerBits: 10, SequenceBits: 10})}, snowflake.ErrInvalidLayout},
		{"uidgen layout", nc, []Option{WithLayout(snowflake.UidGenLayout(time.Time{}))}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.nc, tt.opts...)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if c != nil {
				c.Close()
			}
		})
	}
}
