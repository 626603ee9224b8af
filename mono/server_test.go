package mono_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/mono/memlease"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// served records which tags a Server has answered now.
type served struct {
	mu   sync.Mutex
	tags map[string]*mono.Leader
}

func (s *served) serve(tag wire.Tag, l *mono.Leader) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tags[tag.String()]; ok {
		return nil, errors.New("served twice")
	}
	s.tags[tag.String()] = l
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.tags, tag.String())
	}, nil
}

func (s *served) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for tag := range s.tags {
		out = append(out, tag)
	}
	slices.Sort(out)
	return out
}

func createTags(t *testing.T, s *memstore.Store, kind segment.Kind, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := s.Create(context.Background(), segment.Tag{Name: wire.MustTag(name), Step: 10, Mode: segment.Mode{Kind: kind}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServerLeadsMonoTags: a Server leads every monotonic tag of the store
// (those listed at start and those announced later), not the others; it
// answers a tag only while it leads it, with strictly increasing ids; it
// stops leading a tag that is no longer monotonic, and Close stops
// answering and releases every lease.
func TestServerLeadsMonoTags(t *testing.T) {
	s := memstore.New()
	createTags(t, s, segment.KindMono, "a", "b")
	createTags(t, s, segment.KindSegment, "seg")
	lease := memlease.New(600*time.Millisecond, nil)
	sv := &served{tags: map[string]*mono.Leader{}}
	var announced func(string)
	m, err := mono.StartServer(context.Background(), mono.ServerConfig{
		Node: "n1", Store: s, Lease: lease, Floors: segment.NewMemFloors(), Serve: sv.serve,
		Subscribe: func(f func(string)) (func(), error) { announced = f; return func() {}, nil },
		Refresh:   50 * time.Millisecond, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			m.Close()
		}
	}()
	same := func(want ...string) func() bool {
		return func() bool {
			serving, waiting, dry := m.ServingNow()
			return slices.Equal(m.LeadingTags(), want) && slices.Equal(sv.names(), want) &&
				m.Leading() == len(want) && serving == len(want) && len(waiting) == 0 && len(dry) == 0
		}
	}
	testenv.Eventually(t, "a and b led and answered", 10*time.Second, same("a", "b"))

	createTags(t, s, segment.KindMono, "c")
	announced("c")
	testenv.Eventually(t, "c led after its announcement", 10*time.Second, same("a", "b", "c"))
	sv.mu.Lock()
	l := sv.tags["c"]
	sv.mu.Unlock()
	var last int64
	for range 30 {
		first, k, err := l.Next(context.Background(), 1)
		if err != nil || k != 1 || first <= last {
			t.Fatalf("Next = %d, %d, %v after %d", first, k, err, last)
		}
		last = first
	}

	s.SetModeByHand(wire.MustTag("b"), segment.Mode{Kind: segment.KindSegment})
	testenv.Eventually(t, "b dropped once no longer monotonic", 10*time.Second, same("a", "c"))

	m.Close()
	closed = true
	if got := sv.names(); len(got) != 0 {
		t.Fatalf("answering %v after Close", got)
	}
	for _, tag := range []string{"a", "b", "c"} {
		if h, err := lease.Holder(context.Background(), tag); err != nil || h != "" {
			t.Fatalf("Holder(%s) after Close = %q, %v; want released", tag, h, err)
		}
	}
}

// TestServerBalanceYields: a Server leading every tag yields those above
// its share (the tags over the live nodes that are not starting, rounded
// up).
func TestServerBalanceYields(t *testing.T) {
	s := memstore.New()
	createTags(t, s, segment.KindMono, "t0", "t1", "t2", "t3")
	var (
		mu    sync.Mutex
		nodes []wire.NodeStatus
	)
	m, err := mono.StartServer(context.Background(), mono.ServerConfig{
		Node: "n1", Store: s, Lease: memlease.New(600*time.Millisecond, nil), Serve: (&served{tags: map[string]*mono.Leader{}}).serve,
		Nodes: func(context.Context) ([]wire.NodeStatus, error) {
			mu.Lock()
			defer mu.Unlock()
			return nodes, nil
		},
		BalanceEvery: 50 * time.Millisecond, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	testenv.Eventually(t, "all four led", 10*time.Second, func() bool { return len(m.LeadingTags()) == 4 })
	mu.Lock()
	nodes = []wire.NodeStatus{{Node: "n1"}, {Node: "n2"}, {Node: "n3", Starting: true}}
	mu.Unlock()
	testenv.Eventually(t, "two led: the share of two live nodes", 10*time.Second, func() bool { return len(m.LeadingTags()) == 2 })
}

// TestServerSlowNodeYields: a node whose round trip to NATS is above
// MaxRTT yields every tag while another node is fast, and the fast nodes
// count only each other in their share; with no fast node, the share is
// as usual.
func TestServerSlowNodeYields(t *testing.T) {
	s := memstore.New()
	createTags(t, s, segment.KindMono, "t0", "t1", "t2", "t3")
	var (
		mu    sync.Mutex
		nodes []wire.NodeStatus
		rtt   = map[string]time.Duration{}
	)
	start := func(name string) *mono.Server {
		m, err := mono.StartServer(context.Background(), mono.ServerConfig{
			Node: name, Store: s, Lease: memlease.New(600*time.Millisecond, nil), Serve: (&served{tags: map[string]*mono.Leader{}}).serve,
			Nodes: func(context.Context) ([]wire.NodeStatus, error) {
				mu.Lock()
				defer mu.Unlock()
				return nodes, nil
			},
			MaxRTT: 500 * time.Millisecond,
			RTT: func() time.Duration {
				mu.Lock()
				defer mu.Unlock()
				return rtt[name]
			},
			BalanceEvery: 50 * time.Millisecond, Logger: quiet,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return m
	}
	m := start("n1")
	testenv.Eventually(t, "all four led", 10*time.Second, func() bool { return len(m.LeadingTags()) == 4 })
	set := func(own time.Duration, st ...wire.NodeStatus) { // own: n1's round trip
		mu.Lock()
		rtt["n1"], nodes = own, st
		mu.Unlock()
	}
	slow, fast := int64(800*time.Millisecond), int64(time.Millisecond)
	// A slow peer does not take a share of the fast node's tags.
	set(time.Millisecond, wire.NodeStatus{Node: "n1", NATSRTT: fast}, wire.NodeStatus{Node: "n2", NATSRTT: slow})
	time.Sleep(500 * time.Millisecond)
	if got := len(m.LeadingTags()); got != 4 {
		t.Fatalf("fast node beside a slow one leads %d tags, want 4", got)
	}
	// Alone and slow: it keeps them, nobody else could answer.
	set(800*time.Millisecond, wire.NodeStatus{Node: "n1", NATSRTT: slow})
	time.Sleep(500 * time.Millisecond)
	if got := len(m.LeadingTags()); got != 4 {
		t.Fatalf("a lone slow node leads %d tags, want 4", got)
	}
	// Slow beside a fast node: it yields every tag, and the fast one takes them.
	other := start("n2")
	set(800*time.Millisecond, wire.NodeStatus{Node: "n1", NATSRTT: slow}, wire.NodeStatus{Node: "n2", NATSRTT: fast})
	testenv.Eventually(t, "the slow node leads none", 10*time.Second, func() bool { return len(m.LeadingTags()) == 0 })
	testenv.Eventually(t, "the fast node leads all four", 10*time.Second, func() bool { return len(other.LeadingTags()) == 4 })
}

// TestServerMayLead: a tag this node leads is answered only once MayLead
// allows it (no other region holds it as monotonic); a refused one is not
// answered, and its lease is yielded so that another node (or this one,
// later) asks again.
func TestServerMayLead(t *testing.T) {
	s := memstore.New()
	createTags(t, s, segment.KindMono, "home", "elsewhere")
	lease := memlease.New(600*time.Millisecond, nil)
	sv := &served{tags: map[string]*mono.Leader{}}
	var asked sync.Map
	m, err := mono.StartServer(context.Background(), mono.ServerConfig{
		Node: "n1", Store: s, Lease: lease, Floors: segment.NewMemFloors(), Serve: sv.serve,
		MayLead: func(_ context.Context, tag wire.Tag) error {
			asked.Store(tag.String(), true)
			if tag.String() == "elsewhere" {
				return errors.New("monotonic in region r0 too")
			}
			return nil
		},
		Refresh: 50 * time.Millisecond, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	testenv.Eventually(t, "home answered", 10*time.Second, func() bool { return slices.Equal(sv.names(), []string{"home"}) })
	testenv.Eventually(t, "elsewhere asked", 10*time.Second, func() bool { _, ok := asked.Load("elsewhere"); return ok })
	time.Sleep(300 * time.Millisecond)
	if got := sv.names(); !slices.Equal(got, []string{"home"}) {
		t.Fatalf("answering %v, want home only (elsewhere refused)", got)
	}
	testenv.Eventually(t, "elsewhere's lease yielded", 10*time.Second, func() bool {
		h, err := lease.Holder(context.Background(), "elsewhere")
		return err == nil && h == ""
	})
}

// TestServerDropsGoneTag: a monotonic tag's row deleted by hand while its
// leader serves: the leader's next reservation finds it gone, and the
// Server stops that leader, which hands its lease back, long before its
// next look at the store's tags; one whose deletion is announced
// (wire.TagChangedPrefix) is dropped at once. A lease held on would make the region answer that it
// holds the tag (I6), refusing its create in another region. A tag whose
// reservation fails otherwise (a store away) keeps its leader.
func TestServerDropsGoneTag(t *testing.T) {
	s := memstore.New()
	createTags(t, s, segment.KindMono, "gone", "kept", "deleted")
	lease := memlease.New(600*time.Millisecond, nil)
	sv := &served{tags: map[string]*mono.Leader{}}
	var announced func(string)
	m, err := mono.StartServer(context.Background(), mono.ServerConfig{
		Node: "n1", Store: s, Lease: lease, Floors: segment.NewMemFloors(), Serve: sv.serve,
		Subscribe: func(f func(string)) (func(), error) { announced = f; return func() {}, nil },
		Refresh:   time.Hour, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	testenv.Eventually(t, "all answered", 10*time.Second, func() bool { return slices.Equal(sv.names(), []string{"deleted", "gone", "kept"}) })
	if err := s.Delete(context.Background(), wire.MustTag("deleted")); err != nil {
		t.Fatal(err)
	}
	announced("deleted")
	testenv.Eventually(t, "deleted's leader stopped at the announcement", 10*time.Second, func() bool {
		h, err := lease.Holder(context.Background(), "deleted")
		return err == nil && h == "" && slices.Equal(sv.names(), []string{"gone", "kept"})
	})
	sv.mu.Lock()
	gone, kept := sv.tags["gone"], sv.tags["kept"]
	sv.mu.Unlock()
	drain := func(l *mono.Leader) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for range 40 { // past the two ranges of 10 a leader holds
			if _, _, err := l.Next(ctx, 1); err != nil {
				return
			}
		}
		t.Fatal("40 ids served after the store stopped giving ranges")
	}
	s.SetDown(true)
	drain(kept)
	s.SetDown(false)
	if err := s.Delete(context.Background(), wire.MustTag("gone")); err != nil {
		t.Fatal(err)
	}
	drain(gone)
	testenv.Eventually(t, "gone's leader stopped, its lease handed back", 10*time.Second, func() bool {
		h, err := lease.Holder(context.Background(), "gone")
		return err == nil && h == "" && slices.Equal(sv.names(), []string{"kept"})
	})
	if h, err := lease.Holder(context.Background(), "kept"); err != nil || h != "n1" {
		t.Fatalf("kept's holder = %q, %v after a store away: want n1 still", h, err)
	}
}

// TestServerHolderWithoutLease: a node without a lease bucket (starting,
// or its NATS user denied the bucket) cannot say that no node leads a tag:
// its region's answer to a create elsewhere must not read "none" while
// another node of the region leads the tag (I6).
func TestServerHolderWithoutLease(t *testing.T) {
	var m *mono.Server
	if h, err := m.Holder(context.Background(), "t"); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Holder without a lease bucket = %q, %v; want ErrUnavailable", h, err)
	}
}
