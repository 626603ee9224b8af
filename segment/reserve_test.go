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
		PeerFloor: func(string) int64 { return peer }}
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
