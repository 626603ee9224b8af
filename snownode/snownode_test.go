package snownode_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snownode"
	"github.com/leafmq/leafmq/wire"
)

// config is a Server's configuration on a static worker id in dir, with
// nobody else to ask.
func config(t testing.TB, dir string, layout snowflake.Layout, worker int64) snownode.Config {
	t.Helper()
	return snownode.Config{
		Name:       "n1",
		Registry:   "static",
		Layout:     layout,
		DataDir:    dir,
		LeaseAhead: time.Second,
		Ring:       64,
		Open: func(context.Context) (snowflake.Registry, error) {
			st, err := snowflake.NewStatic(layout, worker)
			if err != nil {
				return nil, err
			}
			return snowflake.NewLeaseFile(st, filepath.Join(dir, "snowflake", "static.json")), nil
		},
	}
}

func leaf(t testing.TB, epoch string) snowflake.Layout {
	t.Helper()
	l, err := snowflake.ParseLayout("leaf", "ms", epoch)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func start(t testing.TB, cfg snownode.Config) (*snownode.Server, error) {
	t.Helper()
	s := snownode.New(cfg)
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s, s.Start(ctx)
}

// TestClaimBeforeHolder: the worker id a node registers is in its status
// before the live nodes are asked who holds it: of two nodes that register
// one worker id at once, the later question then sees the earlier claim.
func TestClaimBeforeHolder(t *testing.T) {
	t.Parallel()
	cfg := config(t, t.TempDir(), leaf(t, ""), 7)
	var s *snownode.Server
	var seen *wire.SnowflakeStatus
	cfg.Holder = func(_ context.Context, worker int64) (string, error) {
		seen = s.Starting()
		return "", nil
	}
	s = snownode.New(cfg)
	t.Cleanup(func() { _ = s.Close() })
	if st := s.Starting(); st.Claim != nil || st.Layout != cfg.Layout.String() || st.Registry != "static" {
		t.Fatalf("before registering: %+v, want no claim, layout %s, registry static", st, cfg.Layout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if seen == nil || seen.Claim == nil || *seen.Claim != 7 {
		t.Fatalf("status while the holder was asked: %+v, want claim 7", seen)
	}
	if st := s.Status(false); st == nil || st.Worker != 7 || st.Claim == nil || *st.Claim != 7 {
		t.Fatalf("status once started: %+v, want worker 7 and claim 7", st)
	}
}

// TestHeldWorkerRefused: a worker id a live node holds is not served: the
// Source gives up (a static registry has no other) and the start fails.
func TestHeldWorkerRefused(t *testing.T) {
	t.Parallel()
	cfg := config(t, t.TempDir(), leaf(t, ""), 3)
	cfg.Holder = func(context.Context, int64) (string, error) { return "live node n2", nil }
	s, err := start(t, cfg)
	if err == nil || !strings.Contains(err.Error(), "n2") {
		t.Fatalf("start beside a holder of worker 3: %v, want an error naming it", err)
	}
	if s.Ring() != nil {
		t.Fatal("a ring beside a holder")
	}
}

// TestLayoutRecorded: the first start records the layout in the data
// directory; a start with another one there is refused with ErrConfig
// (the same time maps to other bits), and the record is kept.
func TestLayoutRecorded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := start(t, config(t, dir, leaf(t, ""), 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "snowflake", "layout"))
	if err != nil || strings.TrimSpace(string(b)) != leaf(t, "").String() {
		t.Fatalf("recorded layout %q (%v), want %s", b, err, leaf(t, ""))
	}
	other := leaf(t, "2020-01-01")
	if _, err := start(t, config(t, dir, other, 1)); !errors.Is(err, snownode.ErrConfig) || !strings.Contains(err.Error(), "layout was") {
		t.Fatalf("start with layout %s over %s: %v, want ErrConfig naming the recorded layout", other, leaf(t, ""), err)
	}
	if _, err := start(t, config(t, dir, leaf(t, ""), 1)); err != nil {
		t.Fatalf("start again with the recorded layout: %v", err)
	}
}

// TestPeerLayoutRefused: a live node that serves another layout refuses
// the start; one that takes worker ids from another registry does not.
func TestPeerLayoutRefused(t *testing.T) {
	t.Parallel()
	l := leaf(t, "")
	for _, tc := range []struct {
		name string
		peer wire.SnowflakeStatus
		want bool // refused
	}{
		{"same", wire.SnowflakeStatus{Layout: l.String(), Registry: "static"}, false},
		{"other registry", wire.SnowflakeStatus{Layout: l.String(), Registry: "kv"}, false},
		{"other layout", wire.SnowflakeStatus{Layout: leaf(t, "2020-01-01").String(), Registry: "static"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := config(t, t.TempDir(), l, 1)
			cfg.Peers = func(context.Context) ([]wire.NodeStatus, error) {
				return []wire.NodeStatus{{Node: "n2"}, {Node: "n3", Snow: &tc.peer}}, nil
			}
			_, err := start(t, cfg)
			if got := errors.Is(err, snownode.ErrConfig); got != tc.want || !tc.want && err != nil {
				t.Fatalf("beside %+v: %v, want refused %v", tc.peer, err, tc.want)
			}
		})
	}
}

// TestNilServer: a node without snowflake has a nil *Server, which does
// nothing and reports none.
func TestNilServer(t *testing.T) {
	var s *snownode.Server
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(nil); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if s.Source() != nil || s.Ring() != nil || s.Starting() != nil || s.Status(true) != nil || s.Held() || s.Close() != nil {
		t.Fatal("a nil Server reports a snowflake")
	}
	if msg, fatal := s.Problem(); msg != "" || fatal {
		t.Fatalf("a nil Server's problem: %q %v", msg, fatal)
	}
}

// group is a queue group membership that records the node's joins and
// leaves (snownode.Group).
type group struct {
	mu sync.Mutex
	in bool
}

// member stands for the micro service of a node in the group.
type member struct{ micro.Service }

func (g *group) SetSnowflake(on bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.in = on
	return nil
}

func (g *group) SnowflakeService() micro.Service {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.in {
		return member{}
	}
	return nil
}

// TestServeYieldsWhileSlow: a serving node stays in the snowflake queue
// group while Yield says no, leaves within its next round once Yield says
// it is slow beside a fast node, and joins again once Yield no longer
// says so. Yield is asked with a context that Stop ends.
func TestServeYieldsWhileSlow(t *testing.T) {
	t.Parallel()
	cfg := config(t, t.TempDir(), leaf(t, ""), 3)
	var yield atomic.Bool
	var asked atomic.Int64
	cfg.Yield = func(ctx context.Context) bool {
		asked.Add(1)
		if ctx.Err() != nil {
			t.Error("Yield asked with an ended context")
		}
		return yield.Load()
	}
	s, err := start(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := &group{}
	waitIn := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for (g.SnowflakeService() != nil) != want {
			if time.Now().After(deadline) {
				t.Fatalf("in the group: %v after 10 s, want %v (source %v)", !want, want, s.Source().State())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := s.Serve(g); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitIn(true)
	if asked.Load() == 0 {
		t.Fatal("Yield not asked before joining")
	}
	yield.Store(true)
	waitIn(false)
	// Out while Yield says so: every round keeps it out.
	before := asked.Load()
	for asked.Load() < before+2 {
		time.Sleep(10 * time.Millisecond)
	}
	if g.SnowflakeService() != nil {
		t.Fatal("joined again while Yield says slow")
	}
	yield.Store(false)
	waitIn(true)
}

// TestRegionWorkerField: a node of region 2 on a layout with region bits
// reports (status, claim, past workers of its lease files) the ids' worker
// fields, not its registry's worker ids: a node of another region with the
// same registry worker id is another worker.
func TestRegionWorkerField(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	layout := snowflake.LeafDCLayout()
	cfg := config(t, dir, layout, 5)
	cfg.Region = 2
	cfg.LeaseFiles = "kv"
	// A worker id this data directory held before a restart, in region 2.
	past := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	if err := os.MkdirAll(filepath.Join(dir, "snowflake"), 0o755); err != nil {
		t.Fatal(err)
	}
	rec := `{"worker":9,"lease":"` + past.Format(time.RFC3339Nano) + `"}`
	if err := os.WriteFile(filepath.Join(dir, "snowflake", "kv-9.json"), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int64
	cfg.Holder = func(_ context.Context, worker int64) (string, error) {
		asked.Store(worker)
		return "", nil
	}
	s, err := start(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const field, pastField = 2<<5 | 5, 2<<5 | 9
	st := s.Status(false)
	if st.Worker != field || st.Claim == nil || *st.Claim != field || asked.Load() != field {
		t.Fatalf("status worker %d, claim %v, holder asked about %d; want worker field %d", st.Worker, st.Claim, asked.Load(), field)
	}
	if len(st.Past) != 1 || st.Past[0].Worker != pastField || st.Past[0].Until != past.UnixNano() {
		t.Fatalf("past workers %+v, want worker field %d until %v", st.Past, pastField, past)
	}
	if st.Layout != layout.String() {
		t.Errorf("layout %q, want %q", st.Layout, layout)
	}
}
