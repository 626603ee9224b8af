package region_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/region"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// homeRegion is one region's node for the Homes tests: its store, and its
// Homes answering on its own connection, as a node's responder does.
type homeRegion struct {
	store   *memstore.Store
	homes   *region.Homes
	leaders *sync.Map // tag → the holder of its monotonic lease (string), or the error reading it
	floors  *sync.Map // tag → the node's floor of it (int64)
}

func startHomes(t *testing.T, url string, regions int) []homeRegion {
	t.Helper()
	var rs []homeRegion
	for id := range regions {
		nc := natstest.Connect(t, url)
		st := memstore.New()
		leaders, floors := &sync.Map{}, &sync.Map{}
		h := region.NewHomes(region.HomesConfig{Conn: nc, Count: regions, ID: id, Region: fmt.Sprintf("r%d", id),
			Node: fmt.Sprintf("r%d-1", id), Window: 100 * time.Millisecond, Store: st,
			Leader: func(_ context.Context, tag string) (string, error) {
				switch v, _ := leaders.Load(tag); v := v.(type) {
				case string:
					return v, nil
				case error:
					return "", v
				}
				return "", nil
			},
			MonoFloor: func(tag string) int64 { f, _ := floors.Load(tag); v, _ := f.(int64); return v }})
		if _, err := nc.Subscribe(h.Subject(), func(m *nats.Msg) {
			a := h.Answer(context.Background(), m.Subject)
			_ = m.Respond(mustJSON(t, a))
		}); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, homeRegion{st, h, leaders, floors})
	}
	return rs
}

// create is a node's create: the Homes check, the store's write, release.
func (r homeRegion) create(ctx context.Context, tag wire.Tag, m segment.Mode) error {
	return r.createAt(ctx, tag, m, 0)
}

func (r homeRegion) createAt(ctx context.Context, tag wire.Tag, m segment.Mode, maxID int64) error {
	release, err := r.homes.Create(ctx, tag, m, maxID, nil)
	if err != nil {
		return err
	}
	defer release()
	return r.store.Create(ctx, segment.Tag{Name: tag, Mode: m, MaxID: maxID})
}

// TestHomesCreatesAtOnce: two regions creating one monotonic tag at the
// same moment, again and again: never both (at most one home, I6); each
// says it creates before it asks, so the later hears the earlier.
func TestHomesCreatesAtOnce(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	rs := startHomes(t, s.ClientURL(), 2)
	mono := segment.Mode{Kind: segment.KindMono}
	won := 0
	for i := range 30 {
		tag := wire.MustTag(fmt.Sprintf("t%d", i))
		var wg sync.WaitGroup
		errs := make([]error, len(rs))
		for k, r := range rs {
			wg.Go(func() {
				time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond) // the other's window, or not
				errs[k] = r.create(t.Context(), tag, mono)
			})
		}
		wg.Wait()
		switch {
		case errs[0] == nil && errs[1] == nil:
			t.Fatalf("tag %s created as monotonic in both regions", tag)
		case errs[0] == nil || errs[1] == nil:
			won++
		}
		for _, err := range errs {
			if err != nil && !errors.Is(err, segment.ErrTagExists) {
				t.Fatalf("tag %s: %v, want ErrTagExists", tag, err)
			}
		}
	}
	t.Logf("%d of 30 created in one region, the rest in none", won)
}

// TestHomesRules: what a create asks of the other regions.
func TestHomesRules(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	rs := startHomes(t, s.ClientURL(), 3)
	ctx := t.Context()
	mono := segment.Mode{Kind: segment.KindMono}
	seg := segment.Mode{Kind: segment.KindSegment}
	opaque := segment.Mode{Kind: segment.KindOpaque, Width: 53, KeyID: "k1"}
	tag := wire.MustTag
	for _, c := range []struct {
		name  string
		setup func()
		in    int
		tag   string
		mode  segment.Mode
		want  error
	}{
		{"mono after mono", func() { must(t, rs[0].create(ctx, tag("a"), mono)) }, 1, "a", mono, segment.ErrTagExists},
		{"segment after mono", nil, 2, "a", seg, segment.ErrTagExists},
		{"mono after segment", func() { must(t, rs[0].create(ctx, tag("b"), seg)) }, 1, "b", mono, segment.ErrTagExists},
		{"segment after segment", nil, 1, "b", seg, nil},
		{"opaque after segment", nil, 2, "b", opaque, segment.ErrMode},
		{"mono after a deleted tag", func() {
			must(t, rs[2].create(ctx, tag("c"), mono))
			must(t, rs[2].store.Delete(ctx, tag("c")))
		}, 0, "c", mono, nil},
		{"mono alone", nil, 0, "d", mono, nil},
	} {
		if c.setup != nil {
			c.setup()
		}
		err := rs[c.in].create(ctx, tag(c.tag), c.mode)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := rs[1].homes.Restart(ctx, tag("a"), 0); !errors.Is(err, segment.ErrTagExists) {
		t.Errorf("restart of a tag monotonic elsewhere: %v, want ErrTagExists", err)
	}
	if err := rs[2].homes.Restart(ctx, tag("c"), 0); !errors.Is(err, segment.ErrTagExists) {
		t.Errorf("restart of a deleted tag monotonic elsewhere now: %v, want ErrTagExists", err)
	}
	if err := rs[1].homes.Restart(ctx, tag("b"), 0); err != nil {
		t.Errorf("restart of a segment tag: %v", err)
	}
}

// TestHomesRegionAway: a monotonic create needs every region's answer; a
// segment create goes ahead without a region that does not answer.
func TestHomesRegionAway(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	h := region.NewHomes(region.HomesConfig{Conn: nc, Count: 2, ID: 0, Region: "r0", Node: "r0-1",
		Window: 50 * time.Millisecond, Store: memstore.New()})
	if _, err := h.Create(t.Context(), wire.MustTag("m"), segment.Mode{Kind: segment.KindMono}, 0, nil); !errors.Is(err, segment.ErrUnavailable) {
		t.Errorf("mono create without region 1: %v, want ErrUnavailable", err)
	}
	release, err := h.Create(t.Context(), wire.MustTag("m"), segment.Mode{Kind: segment.KindMono}, 0, []int{1})
	if err != nil {
		t.Fatalf("mono create with region 1 undeployed: %v", err)
	}
	release()
	release, err = h.Create(t.Context(), wire.MustTag("s"), segment.Mode{Kind: segment.KindSegment}, 0, nil)
	if err != nil {
		t.Fatalf("segment create without region 1: %v", err)
	}
	release()
	if region.NewHomes(region.HomesConfig{Conn: nc, Count: 1, Store: memstore.New()}) != nil {
		t.Error("Homes of one region, want none")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHomesLead: a node about to serve a monotonic tag it leads asks the
// other regions (I6 at each leadership, not only at a create): refused
// where another region's store holds the tag as monotonic (two regions
// on one database, a row written by hand), allowed where none does, and
// answered as soon as every region has answered, not after the window; a
// region away is not waited for beyond it.
func TestHomesLead(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	rs := startHomes(t, s.ClientURL(), 3)
	ctx := t.Context()
	must(t, rs[0].store.Create(ctx, segment.Tag{Name: wire.MustTag("ticks"), Mode: segment.Mode{Kind: segment.KindMono}}))
	must(t, rs[1].store.Create(ctx, segment.Tag{Name: wire.MustTag("ticks"), Mode: segment.Mode{Kind: segment.KindMono}}))
	must(t, rs[0].store.Create(ctx, segment.Tag{Name: wire.MustTag("beats"), Mode: segment.Mode{Kind: segment.KindMono}}))
	must(t, rs[1].store.Create(ctx, segment.Tag{Name: wire.MustTag("orders")}))
	if err := rs[1].homes.Lead(ctx, wire.MustTag("ticks")); !errors.Is(err, segment.ErrTagExists) || !strings.Contains(err.Error(), "region r0") {
		t.Fatalf("lead ticks in r1 while r0 holds it as monotonic: %v, want ErrTagExists naming r0", err)
	}
	if err := rs[0].homes.Lead(ctx, wire.MustTag("beats")); err != nil {
		t.Fatalf("lead beats in r0, its only home: %v", err)
	}
	t0 := time.Now()
	for range 5 {
		if err := rs[0].homes.Lead(ctx, wire.MustTag("beats")); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(t0) / 5; d >= 100*time.Millisecond {
		t.Errorf("a lead with every region answering took %v, the whole window", d)
	}
	// A create of beats under way in r1 (to be refused by r0's row) does
	// not keep r0, its home, from serving it.
	release, err := rs[1].homes.Create(ctx, wire.MustTag("beats2"), segment.Mode{Kind: segment.KindMono}, 0, nil)
	if err != nil {
		t.Fatalf("create beats2 in r1: %v", err)
	}
	must(t, rs[0].store.Create(ctx, segment.Tag{Name: wire.MustTag("beats2"), Mode: segment.Mode{Kind: segment.KindMono}}))
	if err := rs[0].homes.Lead(ctx, wire.MustTag("beats2")); err != nil {
		t.Fatalf("lead beats2 in r0 while r1 says it creates it: %v, want allowed (r0 holds the row)", err)
	}
	release()
	away := region.NewHomes(region.HomesConfig{Conn: natstest.Connect(t, s.ClientURL()), Count: 4, ID: 0, Region: "r0", Node: "r0-2",
		Window: 50 * time.Millisecond, Store: rs[0].store})
	if err := away.Lead(ctx, wire.MustTag("beats")); err != nil {
		t.Fatalf("lead beats with region 3 away: %v, want allowed (its home keeps serving through a cut)", err)
	}
	closed := natstest.Connect(t, s.ClientURL())
	lost := region.NewHomes(region.HomesConfig{Conn: closed, Count: 3, ID: 0, Region: "r0", Node: "r0-3", Store: rs[0].store})
	closed.Close()
	if err := lost.Lead(ctx, wire.MustTag("beats")); err != nil {
		t.Fatalf("lead beats with no connection to ask on: %v, want allowed (the home serves through a fault)", err)
	}
	if region.LeadCheck(region.HomesConfig{Conn: natstest.Connect(t, s.ClientURL()), Count: 1, Store: rs[0].store}) != nil {
		t.Error("LeadCheck of one region, want none")
	}
}

// TestHomesLeaderWithoutRow: a home's row deleted by hand (`nats kv del
// leaf_alloc_r0 TAG`) while its leader serves the rest of its ranges: the
// home still holds the tag as monotonic, by its lease, until that leader
// stops. A create or a leadership of the tag in another region is
// refused meanwhile (it answered "no such tag" before: two leaders, ids
// out of order); a lease that cannot be read is no answer.
func TestHomesLeaderWithoutRow(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	rs := startHomes(t, s.ClientURL(), 2)
	ctx := t.Context()
	mono := segment.Mode{Kind: segment.KindMono}
	ticks := wire.MustTag("ticks")
	must(t, rs[0].create(ctx, ticks, mono))
	must(t, rs[0].store.Delete(ctx, ticks)) // as by hand: no row, the leader still runs
	rs[0].leaders.Store("ticks", "r0-1")
	if err := rs[1].create(ctx, ticks, mono); !errors.Is(err, segment.ErrTagExists) || !strings.Contains(err.Error(), "node r0-1 leads it") {
		t.Fatalf("create ticks in r1 while r0-1 leads it without a row: %v, want ErrTagExists naming the leader", err)
	}
	if err := rs[1].create(ctx, ticks, segment.Mode{Kind: segment.KindSegment}); !errors.Is(err, segment.ErrTagExists) {
		t.Fatalf("create ticks as segment in r1 meanwhile: %v, want ErrTagExists", err)
	}
	if err := rs[1].homes.Lead(ctx, ticks); !errors.Is(err, segment.ErrTagExists) {
		t.Fatalf("lead ticks in r1 meanwhile (a row written there by hand): %v, want ErrTagExists", err)
	}
	rs[0].leaders.Store("ticks", fmt.Errorf("%w: lease bucket away", segment.ErrUnavailable))
	if err := rs[1].create(ctx, ticks, mono); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("create ticks in r1 while r0 cannot read its lease: %v, want ErrUnavailable", err)
	}
	rs[0].leaders.Delete("ticks") // the leader stopped
	if err := rs[1].create(ctx, ticks, mono); err != nil {
		t.Fatalf("create ticks in r1 once r0's leader stopped: %v", err)
	}
	if err := rs[0].homes.Lead(ctx, wire.MustTag("other")); err != nil {
		t.Fatalf("lead a tag no region holds: %v", err)
	}
}

// TestHomesMonoAboveOtherFloors: a monotonic tag deleted in one region
// (its row deleted by hand), whose nodes keep their floors of it, and
// created in another: its ids there must rise above every region's
// floors, as a create in one region must rise above its live nodes'
// (ErrBelowFloor, naming the node and the max_id to give). Before, the
// create went ahead at 1 and the tag's ids went down. A segment tag's ids
// make no order across regions: its create is not held to them.
func TestHomesMonoAboveOtherFloors(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	rs := startHomes(t, s.ClientURL(), 3)
	ctx := t.Context()
	mono := segment.Mode{Kind: segment.KindMono}
	moved := wire.MustTag("moved")
	rs[0].floors.Store("moved", int64(500))
	rs[2].floors.Store("moved", int64(700))
	err := rs[1].createAt(ctx, moved, mono, 600)
	if !errors.Is(err, segment.ErrBelowFloor) || !strings.Contains(err.Error(), "node r2-1 of region r2") || !strings.Contains(err.Error(), "at least 700") {
		t.Fatalf("mono create at 600 with floors 500 (r0) and 700 (r2): %v, want ErrBelowFloor naming r2-1 and 700", err)
	}
	if err := rs[1].createAt(ctx, moved, mono, 700); err != nil {
		t.Fatalf("mono create at 700: %v", err)
	}
	rs[0].floors.Store("plain", int64(900))
	if err := rs[1].create(ctx, wire.MustTag("plain"), segment.Mode{Kind: segment.KindSegment}); err != nil {
		t.Fatalf("segment create below another region's floor: %v, want created", err)
	}
	// Moved back by a restart in a region that had it (its row deleted
	// there before): above the floors of the region it moved to.
	must(t, rs[1].store.Delete(ctx, moved))
	rs[1].floors.Store("moved", int64(1200))
	if err := rs[0].homes.Restart(ctx, moved, 1000); !errors.Is(err, segment.ErrBelowFloor) || !strings.Contains(err.Error(), "floor of at least 1200") {
		t.Fatalf("restart at 1000 with r1's floor 1200: %v, want ErrBelowFloor naming 1200", err)
	}
	if err := rs[0].homes.Restart(ctx, moved, 1200); err != nil {
		t.Fatalf("restart at 1200: %v", err)
	}
	// A tag this node served as monotonic comes back so: refused where
	// another region holds it in another mode (one mode in every region).
	must(t, rs[1].create(ctx, wire.MustTag("other"), segment.Mode{Kind: segment.KindSegment}))
	rs[0].floors.Store("other", int64(10))
	if err := rs[0].homes.Restart(ctx, wire.MustTag("other"), 10); !errors.Is(err, segment.ErrTagExists) {
		t.Fatalf("restart of a monotonic tag that r1 holds as segment: %v, want ErrTagExists", err)
	}
}

// TestMonoFloor: a node's floor of a tag counts for the other regions
// only where the tag is monotonic to it (its floors' record, or a peer's
// announcement), the higher of its own and those it heard.
func TestMonoFloor(t *testing.T) {
	floors := segment.NewMemFloors()
	must(t, floors.Raise("own", 300))
	must(t, floors.Raise("heard", 100))
	must(t, floors.Raise("plain", 900))
	if k, ok := floors.(segment.ModeKeeper); ok {
		k.KeepMode("own", "mono")
		k.KeepMode("plain", "segment")
	}
	heard := map[string]int64{"heard": 500, "plain": 1000}
	f := region.MonoFloor(floors, func(tag string) (int64, error) { return heard[tag], nil },
		func(tag string) string { return map[string]string{"heard": "mono"}[tag] })
	for tag, want := range map[string]int64{"own": 300, "heard": 500, "plain": 0, "none": 0} {
		if got := f(tag); got != want {
			t.Errorf("MonoFloor(%s) = %d, want %d", tag, got, want)
		}
	}
}
