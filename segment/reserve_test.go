package segment_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// announcements records what a Reserver announced, and this node's floor
// of the tag at the moment of each announcement.
type announcements struct {
	floors segment.Floors
	mu     sync.Mutex
	got    []announced
}

type announced struct {
	tag        string
	end, floor int64
	mode       string
}

func (a *announcements) Announce(tag string, end int64, mode string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, announced{tag: tag, end: end, floor: a.floors.Floor(tag), mode: mode})
}

func (a *announcements) list() []announced {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]announced(nil), a.got...)
}

func newReserverStore(t *testing.T, tag segment.Tag) *memstore.Store {
	t.Helper()
	s := memstore.New()
	if err := s.Create(context.Background(), tag); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReserverRecordsThenAnnounces: every range a Reserver returns has its
// floor recorded before it is announced, with the tag's mode; a range the
// caller refuses (Accept) still raises the floor (the store moved past
// it) but is neither returned nor announced.
func TestReserverRecordsThenAnnounces(t *testing.T) {
	tag := wire.MustTag("m")
	s := newReserverStore(t, segment.Tag{Name: tag, Step: 10, Mode: segment.Mode{Kind: segment.KindMono}})
	floors := segment.NewMemFloors()
	ann := &announcements{floors: floors}
	var refuse error
	r := &segment.Reserver{Store: s, Floors: floors, Announce: ann, Logger: slog.New(slog.DiscardHandler),
		Accept: func(segment.Alloc) error { return refuse }}
	a, err := r.Reserve(context.Background(), tag, 0)
	if err != nil || a.Start() != 1 || a.End() != 11 {
		t.Fatalf("Reserve = %+v, %v; want [1,11)", a, err)
	}
	want := []announced{{tag: "m", end: 11, floor: 11, mode: "mono"}}
	if got := ann.list(); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("announced %+v, want %+v (the floor recorded first)", got, want)
	}
	refuse = segment.ErrMode
	if _, err := r.Reserve(context.Background(), tag, 5); !errors.Is(err, segment.ErrMode) {
		t.Fatalf("Reserve refused by Accept = %v, want ErrMode", err)
	}
	if f := floors.Floor("m"); f != 16 {
		t.Fatalf("floor after a refused range = %d, want 16 (its end)", f)
	}
	if got := ann.list(); len(got) != 1 {
		t.Fatalf("a refused range was announced: %+v", got)
	}
}

// TestReserverAbovePeerFloor: a store below a peer's floor but not below
// this node's own is raised to the peer's floor and the range taken above
// it; one below this node's own floor is refused and left as it is.
func TestReserverAbovePeerFloor(t *testing.T) {
	tag := wire.MustTag("t")
	s := newReserverStore(t, segment.Tag{Name: tag, Step: 10, MaxID: 101})
	floors := segment.NewMemFloors()
	if err := floors.Raise("t", 101); err != nil {
		t.Fatal(err)
	}
	ann := &announcements{floors: floors}
	peer := int64(500)
	r := &segment.Reserver{Store: s, Floors: floors, Announce: ann, Logger: slog.New(slog.DiscardHandler),
		PeerFloor: func(string) (int64, error) { return peer, nil }}
	a, err := r.Reserve(context.Background(), tag, 0)
	if err != nil || a.Start() != 500 || a.End() != 510 {
		t.Fatalf("Reserve below a peer's floor = %+v, %v; want [500,510)", a, err)
	}
	if got := ann.list(); len(got) != 1 || got[0].end != 510 || got[0].floor != 510 {
		t.Fatalf("announced %+v, want end and floor 510", got)
	}

	// Below this node's own floor: refused, nothing taken.
	if err := floors.Raise("t", 900); err != nil {
		t.Fatal(err)
	}
	peer = 1000
	if _, err := r.Reserve(context.Background(), tag, 0); !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("Reserve below this node's own floor = %v, want ErrBelowFloor", err)
	}
	if row, err := s.Get(context.Background(), tag); err != nil || row.MaxID != 510 {
		t.Fatalf("row after a refused Reserve = %+v, %v; want max_id 510", row, err)
	}
}

// TestReserverRequireFloor: with RequireFloor, a range whose floor could
// not be written is not returned (nor announced); without it the range is
// served and the failure only logged.
func TestReserverRequireFloor(t *testing.T) {
	tag := wire.MustTag("d")
	s := newReserverStore(t, segment.Tag{Name: tag, Step: 10})
	dir := filepath.Join(t.TempDir(), "data")
	floors, err := segment.OpenFloorFile(filepath.Join(dir, "floors.json"))
	if err != nil {
		t.Fatal(err)
	}
	// A file where the directory was: every write fails from now on.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ann := &announcements{floors: floors}
	r := &segment.Reserver{Store: s, Floors: floors, Announce: ann, Logger: slog.New(slog.DiscardHandler), RequireFloor: true}
	if a, err := r.Reserve(context.Background(), tag, 0); err == nil {
		t.Fatalf("Reserve with RequireFloor and an unwritable floor file = %+v, want an error", a)
	}
	if got := ann.list(); len(got) != 0 {
		t.Fatalf("a range whose floor was not recorded was announced: %+v", got)
	}
	r.RequireFloor = false
	if a, err := r.Reserve(context.Background(), tag, 0); err != nil || a.Start() != 11 {
		t.Fatalf("Reserve without RequireFloor = %+v, %v; want [11,21) served", a, err)
	}
}

// replacingStore calls after, once, between the store's reply to an
// Advance and the caller's use of it: the KV bucket replaced while a
// range is in flight.
type replacingStore struct {
	*memstore.Store
	once  sync.Once
	after func(a segment.Alloc)
}

func (s *replacingStore) Advance(ctx context.Context, tag wire.Tag, step int, floor int64) (segment.Alloc, error) {
	a, err := s.Store.Advance(ctx, tag, step, floor)
	if err == nil && s.after != nil {
		s.once.Do(func() { s.after(a) })
	}
	return a, err
}

// TestReserverDropsARangeOfAReplacedStore (I1, docs/protocol.md): the
// store is replaced after it granted a range and before the Reserver
// recorded its floor; another node makes the tag in the new store and
// takes the same ids. The Reserver records the floor, finds the store's
// incarnation changed, and serves nothing of the range.
func TestReserverDropsARangeOfAReplacedStore(t *testing.T) {
	ctx := context.Background()
	tag := wire.MustTag("x")
	s := &replacingStore{Store: newReserverStore(t, segment.Tag{Name: tag, Step: 10})}
	var other segment.Alloc
	s.after = func(segment.Alloc) {
		s.Replace()
		if err := s.Create(ctx, segment.Tag{Name: tag, Step: 10}); err != nil {
			t.Error(err)
			return
		}
		a, err := s.Store.Advance(ctx, tag, 0, 0) // the other node's range
		if err != nil {
			t.Error(err)
		}
		other = a
	}
	floors := segment.NewMemFloors()
	ann := &announcements{floors: floors}
	var replaced []string
	r := &segment.Reserver{Store: s, Floors: floors, Announce: ann, Logger: slog.New(slog.DiscardHandler),
		Replaced: func(old, cur string) { replaced = append(replaced, old, cur) }}
	a, err := r.Reserve(ctx, tag, 0)
	if !errors.Is(err, segment.ErrStoreChanged) {
		t.Fatalf("Reserve across a replaced store = [%d,%d), %v; want ErrStoreChanged (the other node holds [%d,%d))",
			a.Start(), a.End(), err, other.Start(), other.End())
	}
	if got := floors.Floor("x"); got != 11 {
		t.Fatalf("floor of x = %d, want 11: the dropped range's floor stays recorded", got)
	}
	if len(replaced) != 2 || replaced[0] == replaced[1] {
		t.Fatalf("Replaced heard %q, want the old and the new incarnation", replaced)
	}
	if got := ann.list(); len(got) != 0 {
		t.Fatalf("a dropped range was announced: %+v", got)
	}
	// The next range is asked of the new store and served above the floor.
	a, err = r.Reserve(ctx, tag, 0)
	if err != nil || a.Start() < 11 {
		t.Fatalf("next Reserve = [%d,%d), %v; want a range at or above 11", a.Start(), a.End(), err)
	}
}

// TestEngineReplacedWhileLoading (I1): node A's first load of a tag it
// never served commits in the old store; the store is replaced; node B
// auto-creates the tag (A's floor is still 0, so B's create check passes)
// and serves ids from 1. A must serve none of B's ids, and its auto-create
// is off from then on, as for a replacement found at start.
func TestEngineReplacedWhileLoading(t *testing.T) {
	ctx := context.Background()
	tag := wire.MustTag("x")
	s := &replacingStore{Store: newReserverStore(t, segment.Tag{Name: tag, Step: 10})}
	floorsA := segment.NewMemFloors()
	b := newEngine(t, segment.Config{Store: s.Store, RefreshInterval: -1, AutoCreate: true, DefaultStep: 10,
		CreateCheck: func(_ context.Context, tag wire.Tag) error {
			if f := floorsA.Floor(tag.String()); f > 0 {
				return &segment.PeerFloorError{Tag: tag, Node: "a", Floor: f}
			}
			return nil
		}})
	servedB := map[int64]bool{}
	s.after = func(segment.Alloc) {
		s.Replace()
		for range 5 {
			id, err := b.Next(ctx, tag)
			if err != nil {
				t.Errorf("B's Next after the replacement: %v", err)
				return
			}
			servedB[id] = true
		}
	}
	a := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, AutoCreate: true, DefaultStep: 10, Floors: floorsA})
	start(t, a)
	// A's dropped range leaves the tag failing until a load from the new
	// store succeeds; every id A serves must be none of B's.
	var loadErr error
	for served := 0; served < 25; {
		id, err := a.Next(ctx, tag)
		if err != nil {
			loadErr = err
			waitLoads(t, a, "x", 1)
			continue
		}
		if servedB[id] {
			t.Fatalf("A served id %d, which B served after the store was replaced (B served %v)", id, servedB)
		}
		served++
	}
	if !errors.Is(loadErr, segment.ErrStoreChanged) {
		t.Fatalf("A's first load across the replacement failed with %v; want ErrStoreChanged", loadErr)
	}
	if _, err := a.Next(ctx, wire.MustTag("new")); !errors.Is(err, segment.ErrStoreChanged) {
		t.Fatalf("A's auto-create after the replacement: %v; want ErrStoreChanged", err)
	}
}
