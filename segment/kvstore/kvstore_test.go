package kvstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/leafmq/leafmq/wire"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
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
			// 10 s, not 3: ConcurrentNoOverlap's racing writers waited
			// longer than 3 s for a loaded server under -race (CI).
			return open(t, js, kvstore.Options{Bucket: freshBucket(), Timeout: 10 * time.Second})
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
			return open(t, js, kvstore.Options{Bucket: freshBucket(), Replicas: 3, Timeout: 10 * time.Second})
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
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("order"), MaxID: 9007199254740993, Step: 7, Description: "orders"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(ctx, wire.MustTag("order"), 0, 0); err != nil {
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
	got, err := s.Get(ctx, wire.MustTag("order"))
	if err != nil || !got.UpdateTime.Equal(ut) {
		t.Fatalf("Get = %+v, %v; want update_time %v", got, err, ut)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 2 {
		t.Fatalf("bucket history = %d, want 2", st.History())
	}
}

// TestRestartAfterDelete: Delete leaves a purge marker carrying the row,
// Create refuses the key, and Restart brings it back only at or above the
// max_id the marker keeps, over and over.
func TestRestartAfterDelete(t *testing.T) {
	srv := natstest.RunServer(t)
	s := open(t, newJS(t, srv.ClientURL()), kvstore.Options{Bucket: freshBucket()})
	ctx := testCtx(t)
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("again"), MaxID: 100, Step: 5}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		a, err := s.Advance(ctx, wire.MustTag("again"), 0, 0)
		if err != nil {
			t.Fatalf("Next #%d: %v", i, err)
		}
		if err := s.Delete(ctx, wire.MustTag("again")); err != nil {
			t.Fatalf("Delete #%d: %v", i, err)
		}
		if err := s.Delete(ctx, wire.MustTag("again")); !errors.Is(err, segment.ErrUnknownTag) {
			t.Fatalf("second Delete #%d = %v, want ErrUnknownTag", i, err)
		}
		if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("again"), MaxID: a.End() + 1000, Step: 5}); !errors.Is(err, segment.ErrTagDeleted) {
			t.Fatalf("Create #%d over the marker = %v, want ErrTagDeleted", i, err)
		}
		if err := s.Restart(ctx, wire.MustTag("again"), a.End()-1); !errors.Is(err, segment.ErrBelowFloor) {
			t.Fatalf("Restart #%d below the marker's max_id = %v, want ErrBelowFloor", i, err)
		}
		if err := s.Restart(ctx, wire.MustTag("again"), a.End()); err != nil {
			t.Fatalf("Restart #%d: %v", i, err)
		}
		if got, err := s.Get(ctx, wire.MustTag("again")); err != nil || got.Step != 5 || got.MaxID != a.End() {
			t.Fatalf("Get #%d after Restart = %+v, %v; want the old step", i, got, err)
		}
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
	if err := a.Create(ctx, segment.Tag{Name: wire.MustTag("shared"), Step: 10}); err != nil {
		t.Fatal(err)
	}
	for range 3 { // history 5 keeps old revisions; only the newest counts
		if _, err := b.Advance(ctx, wire.MustTag("shared"), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := a.Get(ctx, wire.MustTag("shared")); err != nil || got.MaxID != 31 {
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
		if err := s.Create(testCtx(t), segment.Tag{Name: wire.MustTag("x")}); err != nil {
			t.Fatal(err)
		}
		srv.Shutdown()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := s.Advance(ctx, wire.MustTag("x"), 0, 0); !errors.Is(err, context.DeadlineExceeded) {
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
		a, err := s.Advance(ctx, wire.MustTag(tag), 0, 0)
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
	// A generous call timeout: 8 writers contend on one key of an R3
	// stream, and on a machine busy with other tests a call that retries
	// its conflicts can pass the default 3 s; the test is about the sums.
	o := kvstore.Options{Bucket: bucket, Replicas: 3, Timeout: 20 * time.Second}
	stores := []*kvstore.Store{
		open(t, newJS(t, servers[0].ClientURL()), o),
		open(t, newJS(t, servers[1].ClientURL()), o),
	}
	ctx := testCtx(t)
	if err := stores[0].Create(ctx, segment.Tag{Name: wire.MustTag("shared"), MaxID: 1, Step: 10}); err != nil {
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
	got, err := stores[1].Get(ctx, wire.MustTag("shared"))
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
	if err := first.Create(ctx, segment.Tag{Name: wire.MustTag("loss"), MaxID: 1, Step: 100}); err != nil {
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
	got, err := s.Get(ctx, wire.MustTag("loss"))
	if err != nil {
		t.Fatal(err)
	}
	checkRanges(t, ranges, 1, got.MaxID, true)
	if !nc.IsConnected() || nc.ConnectedUrl() != servers[conn].ClientURL() {
		t.Fatalf("client moved: connected=%v url=%s", nc.IsConnected(), nc.ConnectedUrl())
	}
}

const globalAccount = "$G"

// TestOperatorDeletesKey: `nats kv del leaf_alloc TAG`
// (and `nats kv purge`) under a node with auto-create on: the next request
// gets an error, never an id already handed out, and the tag comes back
// only through Restart, not below what the bucket still knows.
func TestOperatorDeletesKey(t *testing.T) {
	for _, how := range []string{"del", "purge", "del on history 1"} {
		t.Run(how, func(t *testing.T) {
			srv := natstest.RunServer(t)
			js := newJS(t, srv.ClientURL())
			ctx := testCtx(t)
			bucket := freshBucket()
			if how == "del on history 1" { // a bucket made by an older leafmq
				if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1}); err != nil {
					t.Fatal(err)
				}
			}
			s := open(t, js, kvstore.Options{Bucket: bucket})
			e, err := segment.New(segment.Config{Store: s, AutoCreate: true, DefaultStep: 100, RefreshInterval: -1,
				Logger: slog.New(slog.DiscardHandler), ReadyWait: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close() })
			seen := map[int64]bool{}
			for range 250 {
				id, err := e.Next(ctx, wire.MustTag("orders"))
				if err != nil {
					t.Fatal(err)
				}
				seen[id] = true
			}
			// Let the next segment's load finish: the row is then still.
			testenv.Eventually(t, "next segment loaded", 5*time.Second, func() bool {
				st, ok := e.State("orders")
				return ok && !st.Loading && st.Segments[1-st.Current].Ready
			})
			row, err := s.Get(ctx, wire.MustTag("orders"))
			if err != nil {
				t.Fatal(err)
			}

			kv, err := js.KeyValue(ctx, bucket)
			if err != nil {
				t.Fatal(err)
			}
			if how == "purge" {
				err = kv.Purge(ctx, "orders")
			} else {
				err = kv.Delete(ctx, "orders")
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				id, err := e.Next(ctx, wire.MustTag("orders"))
				if err == nil {
					t.Fatalf("Next after %s = id %d (already issued: %v), want an error", how, id, seen[id])
				}
				if !errors.Is(err, segment.ErrTagDeleted) {
					t.Fatalf("Next after %s = %v, want ErrTagDeleted", how, err)
				}
			}
			if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("orders")}); !errors.Is(err, segment.ErrTagDeleted) {
				t.Fatalf("Create after %s = %v, want ErrTagDeleted", how, err)
			}
			// history 2 keeps the row behind `nats kv del`: the floor is checked.
			err = s.Restart(ctx, wire.MustTag("orders"), row.MaxID-1)
			if how == "del" && !errors.Is(err, segment.ErrBelowFloor) {
				t.Fatalf("Restart below the row behind the marker = %v, want ErrBelowFloor", err)
			}
			if how != "del" && err != nil {
				t.Fatalf("Restart with nothing behind the marker = %v, want it accepted", err)
			}
			if how != "del" {
				// The bucket could not tell; the node's floor can.
				if err := e.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
				id, err := e.Next(ctx, wire.MustTag("orders"))
				switch {
				case err == nil && (seen[id] || id < row.MaxID):
					t.Fatalf("Next after a Restart below the node's floor = %d, already issued", id)
				case err != nil && !errors.Is(err, segment.ErrBelowFloor):
					t.Fatalf("Next after a Restart below the node's floor = %v, want ErrBelowFloor", err)
				}
			}
			if how == "del" {
				if err := s.Restart(ctx, wire.MustTag("orders"), row.MaxID); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestIncarnation: a bucket keeps its incarnation across stores and a
// server restart; a bucket deleted and made again gets a new one.
func TestIncarnation(t *testing.T) {
	dir := t.TempDir()
	withDir := func(o *server.Options) { o.StoreDir = dir }
	srv := natstest.RunServer(t, withDir)
	ctx := testCtx(t)
	js := newJS(t, srv.ClientURL())
	s := open(t, js, kvstore.Options{})
	inc1, err := s.Incarnation(ctx)
	if err != nil || !strings.HasPrefix(inc1, "kv:leaf_alloc:") {
		t.Fatalf("Incarnation = %q, %v", inc1, err)
	}
	if inc, err := open(t, js, kvstore.Options{}).Incarnation(ctx); err != nil || inc != inc1 {
		t.Fatalf("second store: %q, %v; want %q", inc, err, inc1)
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	srv = natstest.RunServer(t, withDir)
	js = newJS(t, srv.ClientURL())
	s = open(t, js, kvstore.Options{})
	if inc, err := s.Incarnation(ctx); err != nil || inc != inc1 {
		t.Fatalf("after a server restart: %q, %v; want %q", inc, err, inc1)
	}

	if err := js.DeleteKeyValue(ctx, kvstore.DefaultBucket); err != nil {
		t.Fatal(err)
	}
	// The server removes a deleted stream's files after it answers the
	// delete: making it again at once can fail with "error creating store
	// for stream" (10049) until they are gone.
	testenv.Eventually(t, "the bucket made again", 10*time.Second, func() bool {
		s, err = kvstore.Open(ctx, js, kvstore.Options{})
		return err == nil
	})
	t.Cleanup(func() { _ = s.Close() })
	if inc, err := s.Incarnation(ctx); err != nil || inc == inc1 {
		t.Fatalf("after the bucket was made again: %q, %v; want other than %q", inc, err, inc1)
	}
}

// servedTag creates tag with step 10 in a fresh bucket and takes 3 ranges
// of it; it returns the store, the bucket (for the operator's hand edits)
// and the last range.
func servedTag(t *testing.T, tag string) (*kvstore.Store, jetstream.KeyValue, segment.Alloc, context.Context) {
	t.Helper()
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	bucket := freshBucket()
	s := open(t, js, kvstore.Options{Bucket: bucket})
	ctx := testCtx(t)
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag(tag), Step: 10}); err != nil {
		t.Fatal(err)
	}
	var last segment.Alloc
	for range 3 {
		a, err := s.Advance(ctx, wire.MustTag(tag), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		last = a
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	return s, kv, last, ctx
}

// TestOperatorLowersMaxID: `nats kv put leaf_alloc TAG '{"max_id":1,...}'`
// lowers max_id. The revision behind it (history 2) still has the old
// max_id: allocations are refused and change nothing until a Restart.
func TestOperatorLowersMaxID(t *testing.T) {
	s, kv, last, ctx := servedTag(t, "low")
	if _, err := kv.Put(ctx, "low", []byte(`{"max_id":1,"step":10}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(ctx, wire.MustTag("low"), 0, 0); !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("Next after max_id was lowered = %v, want ErrBelowFloor", err)
	}
	if _, err := s.Advance(ctx, wire.MustTag("low"), 1000, 0); !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("NextStep after max_id was lowered = %v, want ErrBelowFloor", err)
	}
	// An operator's own later write must not push the evidence out of the
	// history (a step or max_id written after it: else a node with a lower
	// floor repeats ids).
	if err := s.SetStep(ctx, wire.MustTag("low"), 20); !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("SetStep after max_id was lowered = %v, want ErrBelowFloor", err)
	}
	if err := s.SetMaxID(ctx, wire.MustTag("low"), 2); !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("SetMaxID below the revision behind = %v, want ErrBelowFloor", err)
	}
	if got, err := s.Get(ctx, wire.MustTag("low")); err != nil || got.MaxID != 1 {
		t.Fatalf("a refused write changed the row: %+v, %v", got, err)
	}
	if err := s.Restart(ctx, wire.MustTag("low"), last.End()-1); !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("Restart below the revision behind = %v, want ErrBelowFloor", err)
	}
	if err := s.Restart(ctx, wire.MustTag("low"), last.End()); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Advance(ctx, wire.MustTag("low"), 0, 0); err != nil || a.Start() != last.End() {
		t.Fatalf("Next after Restart = %+v, %v; want start %d", a, err, last.End())
	}
}

// TestForgedHandBackIsLowered: a HandBack's revision says the
// max_id it took back from, and the revisions up to it do not count as a
// lowered max_id. A row put by hand with a handed_back_from of its own
// choosing must not pass for one: only a handed_back_from equal to the
// max_id of the revision right before it is a hand-back (HandBack writes
// conditionally on that revision), so a single `nats kv put` with a
// forged handed_back_from does not pass the lowered-row check.
func TestForgedHandBackIsLowered(t *testing.T) {
	s, kv, last, ctx := servedTag(t, "forge")
	for _, from := range []int64{1 << 40, last.End() - 1, last.End() + 1} {
		if _, err := kv.Put(ctx, "forge", fmt.Appendf(nil, `{"max_id":1,"step":10,"handed_back_from":%d}`, from)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Advance(ctx, wire.MustTag("forge"), 0, 0); !errors.Is(err, segment.ErrBelowFloor) {
			t.Fatalf("Next after max_id was put down to 1 with handed_back_from %d = %v, want ErrBelowFloor", from, err)
		}
		// Put the real row back (a revision at the old max_id) for the next try.
		if _, err := kv.Put(ctx, "forge", fmt.Appendf(nil, `{"max_id":%d,"step":10}`, last.End())); err != nil {
			t.Fatal(err)
		}
	}

	// A real hand-back still counts as one.
	if err := s.HandBack(ctx, wire.MustTag("forge"), last.End(), last.Start()); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Advance(ctx, wire.MustTag("forge"), 0, 0); err != nil || a.Start() != last.Start() {
		t.Fatalf("Next after a hand-back = %+v, %v; want start %d", a, err, last.Start())
	}
}

// replacedAfterAdvance deletes the bucket and makes it again (another node
// then creates the tag and takes its first range) after its first Advance
// was committed and before the caller sees the answer.
type replacedAfterAdvance struct {
	*kvstore.Store
	once    sync.Once
	replace func()
}

func (s *replacedAfterAdvance) Advance(ctx context.Context, tag wire.Tag, step int, floor int64) (segment.Alloc, error) {
	a, err := s.Store.Advance(ctx, tag, step, floor)
	if err == nil {
		s.once.Do(s.replace)
	}
	return a, err
}

// TestReserverRangeOfReplacedBucket (I1, docs/protocol.md): on a real
// bucket, node A's range commits, the operator deletes the bucket and it
// is made again, node B creates the tag and takes ids from 1; A's Reserver
// records the floor, reads the new incarnation and serves nothing of its
// range.
func TestReserverRangeOfReplacedBucket(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx := testCtx(t)
	js := newJS(t, srv.ClientURL())
	bucket := freshBucket()
	tag := wire.MustTag("x")
	s := &replacedAfterAdvance{Store: open(t, js, kvstore.Options{Bucket: bucket})}
	if err := s.Create(ctx, segment.Tag{Name: tag, Step: 10}); err != nil {
		t.Fatal(err)
	}
	var other segment.Alloc
	s.replace = func() {
		if err := js.DeleteKeyValue(ctx, bucket); err != nil {
			t.Error(err)
			return
		}
		var b *kvstore.Store
		testenv.Eventually(t, "the bucket made again", 10*time.Second, func() bool {
			var err error
			b, err = kvstore.Open(ctx, js, kvstore.Options{Bucket: bucket})
			return err == nil
		})
		t.Cleanup(func() { _ = b.Close() })
		if err := b.Create(ctx, segment.Tag{Name: tag, Step: 10}); err != nil {
			t.Error(err)
			return
		}
		var err error
		if other, err = b.Advance(ctx, tag, 0, 0); err != nil {
			t.Error(err)
		}
	}
	floors := segment.NewMemFloors()
	r := &segment.Reserver{Store: s, Floors: floors, Logger: slog.New(slog.DiscardHandler)}
	a, err := r.Reserve(ctx, tag, 0)
	if !errors.Is(err, segment.ErrStoreChanged) {
		t.Fatalf("Reserve across a replaced bucket = [%d,%d), %v; want ErrStoreChanged (node B holds [%d,%d))",
			a.Start(), a.End(), err, other.Start(), other.End())
	}
	if f := floors.Floor("x"); f != 11 {
		t.Fatalf("floor of x = %d, want 11", f)
	}
}
