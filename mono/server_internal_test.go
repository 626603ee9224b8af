package mono

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// heardFloors records the floors a node announced.
type heardFloors struct {
	mu  sync.Mutex
	got []heardFloor
}

type heardFloor struct {
	tag  string
	end  int64
	mode string
}

func (h *heardFloors) Announce(tag string, end int64, mode string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, heardFloor{tag: tag, end: end, mode: mode})
}

// TestReserverAbovePeerFloor: a monotonic leader reserves as the engine
// does. A store whose max_id lies below a peer's floor of the tag (a
// hand-back this node did not hear) but not below this node's own is
// raised to the peer's floor and the range taken above it, recorded and
// announced; a range of a tag that is not monotonic in the store is
// refused and not announced.
func TestReserverAbovePeerFloor(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	mt, seg := wire.MustTag("ticks"), wire.MustTag("orders")
	for _, tag := range []segment.Tag{
		{Name: mt, Step: 10, MaxID: 101, Mode: segment.Mode{Kind: segment.KindMono}},
		{Name: seg, Step: 10},
	} {
		if err := s.Create(ctx, tag); err != nil {
			t.Fatal(err)
		}
	}
	floors := segment.NewMemFloors()
	if err := floors.Raise("ticks", 101); err != nil {
		t.Fatal(err)
	}
	heard := &heardFloors{}
	r := reserver(ServerConfig{Store: s, Floors: floors, PeerFloor: func(string) (int64, error) { return 500, nil },
		PeerMode: func(string) string { return "" }, Announce: heard, Logger: slog.New(slog.DiscardHandler)})
	a, err := r.Reserve(ctx, mt, 10)
	if err != nil || a.Start() != 500 || a.End() != 510 {
		t.Fatalf("Reserve of a monotonic tag below a peer's floor = %+v, %v; want [500,510)", a, err)
	}
	if f := floors.Floor("ticks"); f != 510 {
		t.Fatalf("floor = %d, want 510", f)
	}
	if _, err := r.Reserve(ctx, seg, 10); !errors.Is(err, segment.ErrMode) {
		t.Fatalf("Reserve of a segment tag = %v, want ErrMode", err)
	}
	want := heardFloor{tag: "ticks", end: 510, mode: "mono"}
	if len(heard.got) != 1 || heard.got[0] != want {
		t.Fatalf("announced %+v, want only %+v", heard.got, want)
	}
}
