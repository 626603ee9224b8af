package segment_test

import (
	"context"
	"errors"
	"github.com/leafmq/leafmq/wire"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/segment"
)

// takeAll takes ids of tag until Next fails, checking that none repeats
// one in seen, and returns the error.
func takeAll(t *testing.T, e *segment.Engine, tag string, seen map[int64]bool) error {
	t.Helper()
	for range 100_000 {
		id, err := e.Next(context.Background(), wire.MustTag(tag))
		if err != nil {
			return err
		}
		if seen[id] {
			t.Fatalf("id %d of %q handed out twice", id, tag)
		}
		seen[id] = true
	}
	t.Fatalf("Next(%q) never failed", tag)
	return nil
}

func maxEnd(allocs []segment.Alloc) int64 {
	var end int64
	for _, a := range allocs {
		end = max(end, a.End())
	}
	return end
}

// TestFloorRefusesLoweredMaxID: an operator lowers max_id under a running
// node. The node refuses the range below what it received (no id from it,
// ErrBelowFloor), and serves again once the tag is restarted at its floor.
func TestFloorRefusesLoweredMaxID(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 10)
	sl := newStepSleeper()
	rec := newRecorder()
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, Sleep: sl.Sleep, OnLoad: rec.OnLoad})
	seen := map[int64]bool{}
	for range 5 {
		seen[next(t, e, "t")] = true
	}
	waitLoads(t, e, "t", 2)
	floor := maxEnd(s.Allocs())
	s.Lower(wire.MustTag("t"), 1) // UPDATE leaf_alloc SET max_id = 1

	err := takeAll(t, e, "t", seen)
	if !errors.Is(err, segment.ErrNotReady) || !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("Next after max_id was lowered = %v, want ErrNotReady wrapping ErrBelowFloor", err)
	}
	// The requester did nothing wrong: a 503, which clients ask again.
	if code := wire.CodeOf(err); code != wire.CodeUnavailable || !wire.Retryable(code) {
		t.Fatalf("code of %v = %s, want a retryable 503", err, code)
	}
	for id := range seen {
		if id >= floor {
			t.Fatalf("id %d served at or above the floor %d: from a refused range", id, floor)
		}
	}
	// The loader reports the failed load after it wakes the callers.
	testenv.Eventually(t, "a LoadEvent reporting ErrBelowFloor", 10*time.Second, func() bool {
		for _, ev := range rec.Events() {
			if errors.Is(ev.Err, segment.ErrBelowFloor) {
				return true
			}
		}
		return false
	})

	// The operator restarts the tag at the floor the error names (or the
	// row's max_id, which the refused load advanced, if that is higher).
	row, err := s.Get(context.Background(), wire.MustTag("t"))
	if err != nil {
		t.Fatal(err)
	}
	floor = max(floor, row.MaxID)
	if err := s.Restart(context.Background(), wire.MustTag("t"), floor); err != nil {
		t.Fatal(err)
	}
	sl.next(t).release <- struct{}{}
	waitLoads(t, e, "t", 3)
	if id := next(t, e, "t"); id != floor {
		t.Fatalf("first id after the restart = %d, want %d", id, floor)
	}
}

// TestPeerFloorAboveStoreReservesAbove: a peer announced a floor above
// the store's max_id and then handed back the top of its last range,
// unheard by this node, so max_id stays below that floor for good. The
// engine takes its next range above the peer's floor (the ids between
// are skipped) instead of refusing the tag until max_id passes it; a
// store below this node's own floor is still refused.
func TestPeerFloorAboveStoreReservesAbove(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*testStore) segment.Store
	}{
		{"Advance", func(s *testStore) segment.Store { return s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore()
			s.create(t, "t", 10)
			var peer atomic.Int64
			e := newEngine(t, segment.Config{Store: tc.wrap(s), RefreshInterval: -1, Sleep: newStepSleeper().Sleep,
				PeerFloor: func(string) (int64, error) { return peer.Load(), nil }})
			seen := map[int64]bool{}
			for range 5 {
				seen[next(t, e, "t")] = true
			}
			waitLoads(t, e, "t", 2)
			own := e.Floor("t")
			high := own + 1000
			peer.Store(high)
			var above int
			for range 40 {
				id := next(t, e, "t")
				switch {
				case seen[id]:
					t.Fatalf("id %d handed out twice", id)
				case id >= own && id < high:
					t.Fatalf("id %d below the peer's floor %d", id, high)
				case id >= high:
					above++
				}
				seen[id] = true
			}
			if above == 0 {
				t.Fatalf("no id above the peer's floor %d", high)
			}

			// Below this node's own floor: the store went back under ids
			// this node served, and an operator restarts the tag.
			s.Lower(wire.MustTag("t"), 1)
			peer.Store(e.Floor("t") + 1000)
			if err := takeAll(t, e, "t", seen); !errors.Is(err, segment.ErrBelowFloor) {
				t.Fatalf("Next with max_id below this node's floor = %v, want ErrBelowFloor", err)
			}
		})
	}
}

// TestAutoCreateRefusesDeletedTag: a tag deleted from
// the store is not created again at 1 by auto-create.
func TestAutoCreateRefusesDeletedTag(t *testing.T) {
	s := newTestStore()
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, AutoCreate: true, DefaultStep: 10})
	seen := map[int64]bool{}
	for range 15 {
		seen[next(t, e, "gone")] = true
	}
	if err := s.Delete(context.Background(), wire.MustTag("gone")); err != nil {
		t.Fatal(err)
	}
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.Known(wire.MustTag("gone")) {
		t.Fatal("deleted tag still cached after Refresh")
	}
	for range 3 {
		id, err := e.Next(context.Background(), wire.MustTag("gone"))
		if err == nil {
			t.Fatalf("Next of a deleted tag = id %d (seen before: %v), want ErrTagDeleted", id, seen[id])
		}
		if !errors.Is(err, segment.ErrTagDeleted) {
			t.Fatalf("Next of a deleted tag = %v, want ErrTagDeleted", err)
		}
	}
	if _, err := s.Get(context.Background(), wire.MustTag("gone")); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("the tag was made again: Get = %v", err)
	}
}

// TestReplacedStoreKeepsFloors: the store is replaced (a KV bucket deleted
// and made again) while the node is down. The restarted node reads its
// floors and the store's old incarnation from its floor file: it refuses to
// auto-create anything, and serves a tag again only at or above its floor.
func TestReplacedStoreKeepsFloors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "segment-floors.json")
	s := newTestStore()
	ff, err := segment.OpenFloorFile(path)
	if err != nil {
		t.Fatal(err)
	}
	e1 := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, AutoCreate: true, DefaultStep: 10, Floors: ff})
	start(t, e1)
	seen := map[int64]bool{}
	for range 15 {
		seen[next(t, e1, "a")] = true
	}
	waitLoads(t, e1, "a", 2)
	_ = e1.Close()
	floor := maxEnd(s.Allocs())

	s.Replace() // the bucket is deleted and made again: empty, new incarnation

	ff2, err := segment.OpenFloorFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := ff2.Floor("a"); got != floor {
		t.Fatalf("floor of a after reopening = %d, want %d", got, floor)
	}
	sl := newStepSleeper() // a refused load waits for the test: no retries
	e2 := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, AutoCreate: true, DefaultStep: 10, Floors: ff2, Sleep: sl.Sleep})
	start(t, e2)
	for _, tag := range []string{"a", "never-seen"} {
		id, err := e2.Next(context.Background(), wire.MustTag(tag))
		if !errors.Is(err, segment.ErrStoreChanged) {
			t.Fatalf("Next(%q) on a replaced store = %d, %v; want ErrStoreChanged", tag, id, err)
		}
	}
	if tags, err := s.Tags(context.Background()); err != nil || len(tags) != 0 {
		t.Fatalf("auto-create made rows in the replaced store: %v, %v", tags, err)
	}

	// An operator restarts the tag below the floor: this node refuses it.
	if err := s.Restart(context.Background(), wire.MustTag("a"), 1); err != nil {
		t.Fatal(err)
	}
	if err := e2.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if id, err := e2.Next(context.Background(), wire.MustTag("a")); !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("Next of a restarted below the floor = %d, %v; want ErrBelowFloor", id, err)
	}
}

// TestFloorSurvivesRestart: the store loses a tag without a trace (a KV
// delete marker compacted away) and gets it again at 1 while the node is
// down; the restarted node, reading its floor file, serves no id below what
// it served before.
func TestFloorSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "segment-floors.json")
	s := newTestStore()
	s.create(t, "t", 10)
	ff, err := segment.OpenFloorFile(path)
	if err != nil {
		t.Fatal(err)
	}
	e1 := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, Floors: ff})
	seen := map[int64]bool{}
	for range 25 {
		seen[next(t, e1, "t")] = true
	}
	waitLoads(t, e1, "t", 3)
	floor := maxEnd(s.Allocs())
	// No Close (kill -9): the write behind the last load lands by itself.
	waitFor(t, "the floor on disk", func() bool {
		g, err := segment.OpenFloorFile(path)
		return err == nil && g.Floor("t") == floor
	})

	s.Forget(wire.MustTag("t"))
	s.create(t, "t", 10)

	ff2, err := segment.OpenFloorFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sl := newStepSleeper()
	e2 := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, Floors: ff2, Sleep: sl.Sleep})
	id, err := e2.Next(context.Background(), wire.MustTag("t"))
	if !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("Next after the tag came back at 1 = %d, %v; want ErrBelowFloor (floor %d)", id, err, floor)
	}
}

// An id of a range is handed out only once the range's floor is on disk:
// a kill -9 right after the first id must not lose it, even when the disk
// is slow.
func TestFloorDurableBeforeServe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "segment-floors.json")
	s := newTestStore()
	s.create(t, "t", 10)
	ff, err := segment.OpenFloorFile(path)
	if err != nil {
		t.Fatal(err)
	}
	segment.SetFloorWriteHook(func() { time.Sleep(200 * time.Millisecond) }) // a slow disk
	t.Cleanup(func() { segment.SetFloorWriteHook(nil) })
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, Floors: ff, ReadyWait: time.Second})
	id := next(t, e, "t")
	g, err := segment.OpenFloorFile(path) // what a restart after kill -9 would read
	if err != nil {
		t.Fatal(err)
	}
	if f := g.Floor("t"); f <= id {
		t.Fatalf("id %d handed out while the floor on disk was %d", id, f)
	}
}

func TestFloorFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "floors.json")
	f, err := segment.OpenFloorFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Floor("x") != 0 || f.Incarnation() != "" {
		t.Fatal("a new floor file is not empty")
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if err := f.Raise("x", int64(i)); err != nil {
				t.Error(err)
			}
			if err := f.Raise("y", int64(1000-i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	if g, err := segment.OpenFloorFile(path); err != nil || g.Floor("x") != 49 || g.Floor("y") != 1000 {
		t.Fatalf("after Flush: %v", err)
	}
	if err := f.SetIncarnation("inc-1"); err != nil {
		t.Fatal(err)
	}
	if err := f.Raise("x", 3); err != nil { // lower: no change
		t.Fatal(err)
	}
	g, err := segment.OpenFloorFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if g.Floor("x") != 49 || g.Floor("y") != 1000 || g.Incarnation() != "inc-1" {
		t.Fatalf("reopened: x %d y %d inc %q; want 49 1000 inc-1", g.Floor("x"), g.Floor("y"), g.Incarnation())
	}

	for name, content := range map[string]string{
		"not json":      "{",
		"wrong version": `{"version":9,"tags":{}}`,
	} {
		p := filepath.Join(dir, name+".json")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := segment.OpenFloorFile(p); err == nil {
			t.Errorf("%s: OpenFloorFile = nil error, want one: the floors would be lost", name)
		}
	}
}

// TestRefusedLoadsTakeNoRange: two nodes share a tag and max_id is lowered
// under them. A refused load must not advance the row: if it did, the
// retries would soon push max_id past one node's floor, and that node would
// hand out ids the other node already served.
func TestRefusedLoadsTakeNoRange(t *testing.T) {
	s := newTestStore()
	s.create(t, "t", 10)
	nodes := []*segment.Engine{
		newEngine(t, segment.Config{Store: s, RefreshInterval: -1, ReadyWait: 20 * time.Millisecond}),
		newEngine(t, segment.Config{Store: s, RefreshInterval: -1, ReadyWait: 20 * time.Millisecond}),
	}
	seen := map[int64]int{} // id -> node
	take := func(i int) error {
		id, err := nodes[i].Next(context.Background(), wire.MustTag("t"))
		if err != nil {
			return err
		}
		if n, ok := seen[id]; ok {
			t.Fatalf("id %d handed out by node %d and node %d", id, n, i)
		}
		seen[id] = i
		return nil
	}
	for range 200 { // interleaved ranges
		for i := range nodes {
			if err := take(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Lower(wire.MustTag("t"), 1)
	for range 2000 {
		for i := range nodes {
			_ = take(i)
		}
	}
	row, err := s.Get(context.Background(), wire.MustTag("t"))
	if err != nil {
		t.Fatal(err)
	}
	if row.MaxID != 1 {
		t.Fatalf("refused loads advanced the lowered row to max_id %d", row.MaxID)
	}
}
