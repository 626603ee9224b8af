package kvstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/kvstore"
	"github.com/leafmq/leafmq/segment/storetest"
)

var bucketSeq atomic.Int64

// freshBucket returns a bucket name unused in this test binary, so the
// suite's subtests can share one server.
func freshBucket() string { return fmt.Sprintf("t%d", bucketSeq.Add(1)) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newJS(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func open(t testing.TB, js jetstream.JetStream, opts kvstore.Options) *kvstore.Store {
	t.Helper()
	s, err := kvstore.Open(testCtx(t), js, opts)
	if err != nil {
		t.Fatalf("Open(%+v): %v", opts, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// unreachable opens a store on a server of its own and then shuts the
// server down; the connection keeps trying to reconnect.
func unreachable(t testing.TB) (segment.Store, error) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s, err := kvstore.Open(testCtx(t), js, kvstore.Options{Timeout: 500 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	return s, nil
}

func TestConformanceSingle(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	storetest.Run(t, storetest.Factory{
		New: func(t testing.TB) segment.Store {
			return open(t, js, kvstore.Options{Bucket: freshBucket()})
		},
		Unreachable: unreachable,
	})
}

func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	servers := natstest.RunCluster(t, 3)
	// One connection per node: stores take turns, so reads and writes
	// arrive through leaders and followers alike.
	jss := make([]jetstream.JetStream, len(servers))
	for i, srv := range servers {
		jss[i] = newJS(t, srv.ClientURL())
	}
	var n atomic.Int64
	storetest.Run(t, storetest.Factory{
		New: func(t testing.TB) segment.Store {
			js := jss[int(n.Add(1))%len(jss)]
			return open(t, js, kvstore.Options{Bucket: freshBucket(), Replicas: 3})
		},
		Unreachable: unreachable,
	})
}

// TestValueFormat pins the documented JSON value.
func TestValueFormat(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := open(t, js, kvstore.Options{})
	if s.Bucket() != kvstore.DefaultBucket {
		t.Fatalf("Bucket() = %q, want %q", s.Bucket(), kvstore.DefaultBucket)
	}
	ctx := testCtx(t)
	before := time.Now().Add(-time.Second)
	if err := s.Create(ctx, segment.Tag{Name: "order", MaxID: 9007199254740993, Step: 7, Description: "orders"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(ctx, "order"); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "order")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]json.RawMessage
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		t.Fatalf("value %s: %v", e.Value(), err)
	}
	if len(v) != 4 || string(v["max_id"]) != "9007199254741000" || string(v["step"]) != "7" || string(v["description"]) != `"orders"` {
		t.Fatalf("value = %s", e.Value())
	}
	var ut time.Time
	if err := json.Unmarshal(v["update_time"], &ut); err != nil || ut.Before(before) || ut.Location() != time.UTC {
		t.Fatalf("update_time = %s (%v)", v["update_time"], err)
	}
	got, err := s.Get(ctx, "order")
	if err != nil || !got.UpdateTime.Equal(ut) {
		t.Fatalf("Get = %+v, %v; want update_time %v", got, err, ut)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 1 {
		t.Fatalf("bucket history = %d, want 1", st.History())
	}
}

func TestCreateAfterDelete(t *testing.T) {
	srv := natstest.RunServer(t)
	s := open(t, newJS(t, srv.ClientURL()), kvstore.Options{Bucket: freshBucket()})
	ctx := testCtx(t)
	for i := range 3 {
		if err := s.Create(ctx, segment.Tag{Name: "again", MaxID: int64(100 * (i + 1)), Step: 5}); err != nil {
			t.Fatalf("Create #%d: %v", i, err)
		}
		if a, err := s.Next(ctx, "again"); err != nil || a.Start() != int64(100*(i+1)) {
			t.Fatalf("Next #%d = %+v, %v", i, a, err)
		}
		if err := s.Delete(ctx, "again"); err != nil {
			t.Fatalf("Delete #%d: %v", i, err)
		}
		if err := s.Delete(ctx, "again"); !errors.Is(err, segment.ErrUnknownTag) {
			t.Fatalf("second Delete #%d = %v, want ErrUnknownTag", i, err)
		}
	}
	tags, err := s.Tags(ctx)
	if err != nil || len(tags) != 0 {
		t.Fatalf("Tags = %v, %v; want empty", tags, err)
	}
}

func TestEmptyBucketTags(t *testing.T) {
	srv := natstest.RunServer(t)
	s := open(t, newJS(t, srv.ClientURL()), kvstore.Options{Bucket: freshBucket()})
	tags, err := s.Tags(testCtx(t))
	if err != nil || tags == nil || len(tags) != 0 {
		t.Fatalf("Tags = %#v, %v; want empty, non-nil", tags, err)
	}
}

// TestOpenKeepsBucket: Open on an existing bucket neither fails nor
// reconfigures it, and two stores on one bucket see one another's rows.
func TestOpenKeepsBucket(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	ctx := testCtx(t)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "mine", History: 5, Description: "ops"}); err != nil {
		t.Fatal(err)
	}
	a := open(t, js, kvstore.Options{Bucket: "mine"})
	b := open(t, js, kvstore.Options{Bucket: "mine"})
	if err := a.Create(ctx, segment.Tag{Name: "shared", Step: 10}); err != nil {
		t.Fatal(err)
	}
	for range 3 { // history 5 keeps old revisions; only the newest counts
		if _, err := b.Next(ctx, "shared"); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := a.Get(ctx, "shared"); err != nil || got.MaxID != 31 {
		t.Fatalf("Get = %+v, %v; want max_id 31", got, err)
	}
	if tags, err := a.Tags(ctx); err != nil || len(tags) != 1 || tags[0] != "shared" {
		t.Fatalf("Tags = %v, %v", tags, err)
	}
	kv, err := js.KeyValue(ctx, "mine")
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 5 {
		t.Fatalf("history = %d after Open, want 5 (unchanged)", st.History())
	}
}

func TestOpenInvalid(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	for _, tc := range []struct {
		name string
		opts kvstore.Options
	}{
		{"dotted bucket", kvstore.Options{Bucket: "a.b"}},
		{"replicas", kvstore.Options{Replicas: 6}},
		{"negative replicas", kvstore.Options{Replicas: -1}},
		{"negative timeout", kvstore.Options{Timeout: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := kvstore.Open(testCtx(t), js, tc.opts); !errors.Is(err, segment.ErrInvalid) {
				t.Fatalf("Open = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestOpenUnavailable(t *testing.T) {
	t.Run("no jetstream", func(t *testing.T) {
		srv := natstest.RunServer(t, func(o *server.Options) { o.JetStream = false })
		_, err := kvstore.Open(testCtx(t), newJS(t, srv.ClientURL()), kvstore.Options{Timeout: 300 * time.Millisecond})
		if !errors.Is(err, segment.ErrUnavailable) {
			t.Fatalf("Open = %v, want ErrUnavailable", err)
		}
	})
	t.Run("server gone", func(t *testing.T) {
		srv := natstest.RunServer(t)
		js := newJS(t, srv.ClientURL())
		srv.Shutdown()
		start := time.Now()
		_, err := kvstore.Open(testCtx(t), js, kvstore.Options{Timeout: 300 * time.Millisecond})
		if !errors.Is(err, segment.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Open = %v, want ErrUnavailable (and not the caller's deadline)", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Open took %v with a 300ms timeout", d)
		}
	})
	t.Run("caller deadline", func(t *testing.T) {
		srv := natstest.RunServer(t)
		js := newJS(t, srv.ClientURL())
		s := open(t, js, kvstore.Options{})
		if err := s.Create(testCtx(t), segment.Tag{Name: "x"}); err != nil {
			t.Fatal(err)
		}
		srv.Shutdown()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := s.Next(ctx, "x"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Next = %v, want the caller's context.DeadlineExceeded", err)
		}
	})
}

func TestCloseConn(t *testing.T) {
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, js, kvstore.Options{})
	_ = s.Close()
	if nc.IsClosed() {
		t.Fatal("Close closed a connection the store does not own")
	}
	s = open(t, js, kvstore.Options{CloseConn: true})
	_ = s.Close()
	_ = s.Close()
	if !nc.IsClosed() {
		t.Fatal("Close with CloseConn left the connection open")
	}
	if _, err := s.Tags(testCtx(t)); !errors.Is(err, segment.ErrClosed) {
		t.Fatalf("Tags after Close = %v, want ErrClosed", err)
	}
}

// allocate calls Next on tag until it has n ranges, retrying
// ErrUnavailable (a leader election) for up to 30 s; it sends the ranges to
// out and returns the first other error.
func allocate(ctx context.Context, s segment.Store, tag string, n int, out chan<- segment.Alloc, unavailable *atomic.Int64) error {
	deadline := time.Now().Add(30 * time.Second)
	for got := 0; got < n; {
		a, err := s.Next(ctx, tag)
		switch {
		case err == nil:
			out <- a
			got++
		case errors.Is(err, segment.ErrUnavailable) && time.Now().Before(deadline):
			unavailable.Add(1)
			time.Sleep(50 * time.Millisecond)
		default:
			return err
		}
	}
	return nil
}

// checkRanges fails unless ranges are disjoint and lie in [start, maxID);
// without gaps they must tile it exactly. (A call that timed out after its
// write was applied leaves a gap: allowed, never an overlap.)
func checkRanges(t *testing.T, ranges []segment.Alloc, start, maxID int64, gaps bool) {
	t.Helper()
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].Start() < ranges[j].Start() })
	next := start
	for _, r := range ranges {
		if r.Start() < next || (!gaps && r.Start() != next) {
			t.Fatalf("range [%d,%d) after %d: overlap or lost update", r.Start(), r.End(), next)
		}
		next = r.End()
	}
	if next > maxID || (!gaps && next != maxID) {
		t.Fatalf("ranges end at %d, max_id is %d", next, maxID)
	}
}

// TestClusterTwoStores: two stores, each on its own connection to its own
// node, allocate concurrently on one R3 tag.
func TestClusterTwoStores(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	servers := natstest.RunCluster(t, 3)
	bucket := freshBucket()
	stores := []*kvstore.Store{
		open(t, newJS(t, servers[0].ClientURL()), kvstore.Options{Bucket: bucket, Replicas: 3}),
		open(t, newJS(t, servers[1].ClientURL()), kvstore.Options{Bucket: bucket, Replicas: 3}),
	}
	ctx := testCtx(t)
	if err := stores[0].Create(ctx, segment.Tag{Name: "shared", MaxID: 1, Step: 10}); err != nil {
		t.Fatal(err)
	}
	const perWorker, workersPerStore = 40, 4
	out := make(chan segment.Alloc, 2*perWorker*workersPerStore)
	errs := make(chan error, 2*workersPerStore)
	var unavailable atomic.Int64
	var wg sync.WaitGroup
	for _, s := range stores {
		for range workersPerStore {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- allocate(ctx, s, "shared", perWorker, out, &unavailable)
			}()
		}
	}
	wg.Wait()
	close(out)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var ranges []segment.Alloc
	for a := range out {
		ranges = append(ranges, a)
	}
	if len(ranges) != 2*perWorker*workersPerStore {
		t.Fatalf("%d ranges", len(ranges))
	}
	got, err := stores[1].Get(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(1 + 10*len(ranges)); got.MaxID != want {
		t.Fatalf("max_id = %d, want %d (1 + sum of steps)", got.MaxID, want)
	}
	checkRanges(t, ranges, 1, got.MaxID, false)
	if unavailable.Load() != 0 {
		t.Errorf("%d ErrUnavailable answers on a healthy cluster", unavailable.Load())
	}
	// The replicated stream answers conflicts with code 10164: they must
	// have been seen, and retried, for the sums above to hold.
	c0, c1 := stores[0].Conflicts(), stores[1].Conflicts()
	t.Logf("CAS conflicts retried: %d + %d", c0, c1)
	if c0+c1 == 0 {
		t.Error("no CAS conflict among 8 concurrent writers: the test did not exercise the retry path")
	}
}

// TestClusterNodeLoss: with an R3 bucket, shutting down a node the client is
// not connected to — the bucket's stream leader, the hardest case — stops
// allocations at most for a leader election; they go on without overlap.
func TestClusterNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	servers := natstest.RunCluster(t, 3)
	bucket := freshBucket()
	stream := "KV_" + bucket
	// Create the bucket through one node, then find its leader.
	first := open(t, newJS(t, servers[0].ClientURL()), kvstore.Options{Bucket: bucket, Replicas: 3})
	ctx := testCtx(t)
	if err := first.Create(ctx, segment.Tag{Name: "loss", MaxID: 1, Step: 100}); err != nil {
		t.Fatal(err)
	}
	leader := -1
	for i, srv := range servers {
		if srv.JetStreamIsStreamLeader(globalAccount, stream) {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no stream leader")
	}
	conn := (leader + 1) % len(servers)
	// Connect to that one node only: no reconnect elsewhere.
	nc := natstest.Connect(t, servers[conn].ClientURL(), nats.DontRandomize(), nats.NoReconnect())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, js, kvstore.Options{Bucket: bucket, Timeout: time.Second})

	out := make(chan segment.Alloc, 1000)
	var unavailable atomic.Int64
	if err := allocate(ctx, s, "loss", 20, out, &unavailable); err != nil {
		t.Fatal(err)
	}
	servers[leader].Shutdown()
	servers[leader].WaitForShutdown()
	start := time.Now()
	if err := allocate(ctx, s, "loss", 20, out, &unavailable); err != nil {
		t.Fatalf("after losing node %d: %v", leader, err)
	}
	t.Logf("20 allocations after losing the stream leader took %v (%d ErrUnavailable answers meanwhile)",
		time.Since(start), unavailable.Load())
	close(out)
	var ranges []segment.Alloc
	for a := range out {
		ranges = append(ranges, a)
	}
	got, err := s.Get(ctx, "loss")
	if err != nil {
		t.Fatal(err)
	}
	checkRanges(t, ranges, 1, got.MaxID, true)
	if !nc.IsConnected() || nc.ConnectedUrl() != servers[conn].ClientURL() {
		t.Fatalf("client moved: connected=%v url=%s", nc.IsConnected(), nc.ConnectedUrl())
	}
}

const globalAccount = "$G"
