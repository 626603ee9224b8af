package storetest

import (
	"context"
	"errors"
	"fmt"
	"github.com/leafmq/leafmq/wire"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafmq/leafmq/segment"
)

// Factory builds stores for the suite.
type Factory struct {
	// New returns a fresh, empty store that the suite may Close. Required.
	New func(t testing.TB) segment.Store
	// Unreachable returns a store whose backend cannot be reached (a dead
	// address, a stopped server). The constructor may fail instead, with an
	// error wrapping segment.ErrUnavailable. Nil skips that test.
	Unreachable func(t testing.TB) (segment.Store, error)
}

// Run runs the whole suite as subtests of t.
func Run(t *testing.T, f Factory) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s segment.Store)
	}{
		{"CreateGet", testCreateGet},
		{"CreateDefaults", testCreateDefaults},
		{"CreateExists", testCreateExists},
		{"Invalid", testInvalid},
		{"UnknownTag", testUnknownTag},
		{"NextSequence", testNextSequence},
		{"NextStep", testNextStep},
		{"SetStep", testSetStep},
		{"SetMaxID", testSetMaxID},
		{"TagsAndDelete", testTagsAndDelete},
		{"DeleteThenCreateRefused", testDeleteThenCreate},
		{"RestartDeleted", testRestartDeleted},
		{"RestartLive", testRestartLive},
		{"RestartUnknown", testRestartUnknown},
		{"AdvanceFloor", testAdvanceFloor},
		{"HandBack", testHandBack},
		{"Modes", testModes},
		{"ModeSurvivesDelete", testModeSurvivesDelete},
		{"ModeInvalid", testModeInvalid},
		{"Overflow", testOverflow},
		{"OpaqueDomainEnd", testOpaqueDomainEnd},
		{"RegionsDomainEnd", testRegionsDomainEnd},
		{"RegionMark", testRegionMark},
		{"ConcurrentNoOverlap", testConcurrent},
		{"ContextCanceled", testContextCanceled},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := f.New(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
	t.Run("Unreachable", func(t *testing.T) {
		if f.Unreachable == nil {
			t.Skip("backend has no unreachable factory")
		}
		testUnreachable(t, f)
	})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func mustCreate(t *testing.T, s segment.Store, tag segment.Tag) {
	t.Helper()
	if err := s.Create(ctx(t), tag); err != nil {
		t.Fatalf("Create(%+v): %v", tag, err)
	}
}

func mustNext(t *testing.T, s segment.Store, tag wire.Tag) segment.Alloc {
	t.Helper()
	a, err := s.Advance(ctx(t), tag, 0, 0)
	if err != nil {
		t.Fatalf("Advance(%q): %v", tag, err)
	}
	return a
}

func testCreateGet(t *testing.T, s segment.Store) {
	desc := strings.Repeat("d", segment.MaxDescLen)
	name := wire.MustTag(strings.Repeat("T", segment.MaxTagLen-3) + "_-9")
	mustCreate(t, s, segment.Tag{Name: name, MaxID: 1000, Step: 50, Description: desc})
	got, err := s.Get(ctx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != name || got.MaxID != 1000 || got.Step != 50 || got.Description != desc {
		t.Fatalf("Get = %+v, want name/max 1000/step 50/description", got)
	}
}

func testCreateDefaults(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("defaults")})
	got, err := s.Get(ctx(t), wire.MustTag("defaults"))
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxID != 1 || got.Step != segment.DefaultStep {
		t.Fatalf("Get = %+v, want max_id 1 step %d", got, segment.DefaultStep)
	}
	a := mustNext(t, s, wire.MustTag("defaults"))
	if a.Start() != 1 || a.End() != 1+segment.DefaultStep {
		t.Fatalf("first range = [%d,%d), want [1,%d)", a.Start(), a.End(), 1+segment.DefaultStep)
	}
}

func testCreateExists(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("dup"), Step: 10})
	err := s.Create(ctx(t), segment.Tag{Name: wire.MustTag("dup"), Step: 20})
	if !errors.Is(err, segment.ErrTagExists) {
		t.Fatalf("second Create = %v, want ErrTagExists", err)
	}
	got, err := s.Get(ctx(t), wire.MustTag("dup"))
	if err != nil || got.Step != 10 {
		t.Fatalf("after failed Create: %+v, %v; want step 10 kept", got, err)
	}
}

func testInvalid(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("ok"), Step: 10})
	c := ctx(t)
	cases := []struct {
		name string
		call func() error
	}{
		// A bad name never reaches a store (wire.ParseTag refuses it at
		// the edge); the zero Tag is the only one left to refuse.
		{"create zero tag", func() error { return s.Create(c, segment.Tag{}) }},
		{"create negative step", func() error { return s.Create(c, segment.Tag{Name: wire.MustTag("neg"), Step: -1}) }},
		{"create negative max", func() error { return s.Create(c, segment.Tag{Name: wire.MustTag("neg"), MaxID: -5}) }},
		{"create long description", func() error {
			return s.Create(c, segment.Tag{Name: wire.MustTag("neg"), Description: strings.Repeat("x", 257)})
		}},
		{"advance step negative", func() error { _, err := s.Advance(c, wire.MustTag("ok"), -3, 0); return err }},
		{"advance step above MaxStep", func() error { _, err := s.Advance(c, wire.MustTag("ok"), segment.MaxStep+1, 0); return err }},
		{"setstep zero", func() error { return s.SetStep(c, wire.MustTag("ok"), 0) }},
		{"restart zero tag", func() error { return s.Restart(c, wire.Tag{}, 10) }},
		{"restart zero floor", func() error { return s.Restart(c, wire.MustTag("ok"), 0) }},
		{"restart negative floor", func() error { return s.Restart(c, wire.MustTag("neg"), -1) }},
	}
	for _, tc := range cases {
		if err := tc.call(); !errors.Is(err, segment.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
		}
	}
	if _, err := s.Get(c, wire.MustTag("neg")); !errors.Is(err, segment.ErrUnknownTag) {
		t.Errorf("a rejected Create left a row: Get = %v", err)
	}
}

func testUnknownTag(t *testing.T, s segment.Store) {
	c := ctx(t)
	calls := map[string]func() error{
		"Advance":      func() error { _, err := s.Advance(c, wire.MustTag("nope"), 0, 0); return err },
		"Advance step": func() error { _, err := s.Advance(c, wire.MustTag("nope"), 5, 0); return err },
		"Get":          func() error { _, err := s.Get(c, wire.MustTag("nope")); return err },
		"SetStep":      func() error { return s.SetStep(c, wire.MustTag("nope"), 5) },
		"SetMaxID":     func() error { return s.SetMaxID(c, wire.MustTag("nope"), 5) },
		"Delete":       func() error { return s.Delete(c, wire.MustTag("nope")) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, segment.ErrUnknownTag) {
			t.Errorf("%s: err = %v, want ErrUnknownTag", name, err)
		}
	}
	// The zero wire.Tag names no tag: it finds no row, or is refused.
	var zero wire.Tag
	zeroCalls := map[string]func() error{
		"Advance":      func() error { _, err := s.Advance(c, zero, 0, 0); return err },
		"Advance step": func() error { _, err := s.Advance(c, zero, 5, 0); return err },
		"Get":          func() error { _, err := s.Get(c, zero); return err },
		"SetStep":      func() error { return s.SetStep(c, zero, 5) },
		"SetMaxID":     func() error { return s.SetMaxID(c, zero, 5) },
		"Delete":       func() error { return s.Delete(c, zero) },
	}
	for name, call := range zeroCalls {
		if err := call(); !errors.Is(err, segment.ErrUnknownTag) && !errors.Is(err, segment.ErrInvalid) {
			t.Errorf("%s of the zero Tag: err = %v, want ErrUnknownTag or ErrInvalid", name, err)
		}
	}
}

func testNextSequence(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("seq"), MaxID: 1, Step: 100})
	for i := 0; i < 3; i++ {
		a := mustNext(t, s, wire.MustTag("seq"))
		wantMax := int64(1 + 100*(i+1))
		if a.Tag != wire.MustTag("seq") || a.MaxID != wantMax || a.Step != 100 || a.TableStep != 100 {
			t.Fatalf("Next #%d = %+v, want max %d step 100", i, a, wantMax)
		}
		if a.Start() != wantMax-100 || a.End() != wantMax {
			t.Fatalf("range = [%d,%d)", a.Start(), a.End())
		}
	}
	got, err := s.Get(ctx(t), wire.MustTag("seq"))
	if err != nil || got.MaxID != 301 {
		t.Fatalf("Get after 3 Next = %+v, %v; want max_id 301", got, err)
	}
}

func testNextStep(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("custom"), MaxID: 10, Step: 100})
	a, err := s.Advance(ctx(t), wire.MustTag("custom"), 7, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.MaxID != 17 || a.Step != 7 || a.TableStep != 100 || a.Start() != 10 {
		t.Fatalf("NextStep = %+v, want max 17 step 7 table step 100", a)
	}
	a = mustNext(t, s, wire.MustTag("custom"))
	if a.MaxID != 117 || a.Step != 100 {
		t.Fatalf("Next after NextStep = %+v, want max 117", a)
	}
}

func testSetStep(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("step"), MaxID: 1, Step: 100})
	if err := s.SetStep(ctx(t), wire.MustTag("step"), 3000); err != nil {
		t.Fatal(err)
	}
	a := mustNext(t, s, wire.MustTag("step"))
	if a.MaxID != 3001 || a.Step != 3000 || a.TableStep != 3000 {
		t.Fatalf("Next after SetStep = %+v", a)
	}
}

func testSetMaxID(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("max"), MaxID: 100, Step: 10})
	if err := s.SetMaxID(ctx(t), wire.MustTag("max"), 5000); err != nil {
		t.Fatal(err)
	}
	if err := s.SetMaxID(ctx(t), wire.MustTag("max"), 4999); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("lowering max_id: err = %v, want ErrInvalid", err)
	}
	a := mustNext(t, s, wire.MustTag("max"))
	if a.MaxID != 5010 {
		t.Fatalf("Next after SetMaxID = %+v, want max 5010", a)
	}
}

func testTagsAndDelete(t *testing.T, s segment.Store) {
	for _, name := range []string{"b", "a", "c"} {
		mustCreate(t, s, segment.Tag{Name: wire.MustTag(name)})
	}
	tags, err := s.Tags(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(tags, ",") != "a,b,c" {
		t.Fatalf("Tags = %v, want [a b c]", tags)
	}
	if err := s.Delete(ctx(t), wire.MustTag("b")); err != nil {
		t.Fatal(err)
	}
	tags, err = s.Tags(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(tags, ",") != "a,c" {
		t.Fatalf("Tags after Delete = %v, want [a c]", tags)
	}
	if _, err := s.Advance(ctx(t), wire.MustTag("b"), 0, 0); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Next of deleted tag = %v, want ErrUnknownTag", err)
	}
}

// testDeleteThenCreate: a deleted tag is not unknown. Create (and so
// auto-create) refuses it: starting it at 1 again would repeat its ids.
func testDeleteThenCreate(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("gone"), MaxID: 1, Step: 10})
	mustNext(t, s, wire.MustTag("gone"))
	if err := s.Delete(ctx(t), wire.MustTag("gone")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx(t), wire.MustTag("gone")); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Get of deleted tag = %v, want ErrUnknownTag", err)
	}
	for _, tag := range []segment.Tag{{Name: wire.MustTag("gone")}, {Name: wire.MustTag("gone"), MaxID: 1000, Step: 5}} {
		err := s.Create(ctx(t), tag)
		if !errors.Is(err, segment.ErrTagDeleted) {
			t.Fatalf("Create(%+v) of a deleted tag = %v, want ErrTagDeleted", tag, err)
		}
	}
	if _, err := s.Advance(ctx(t), wire.MustTag("gone"), 0, 0); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Next after a refused Create = %v, want ErrUnknownTag", err)
	}
	if tags, err := s.Tags(ctx(t)); err != nil || len(tags) != 0 {
		t.Fatalf("Tags = %v, %v; want none", tags, err)
	}
}

// testRestartDeleted: Restart brings a deleted tag back, never below the
// max_id it had.
func testRestartDeleted(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("back"), MaxID: 1, Step: 10})
	mustNext(t, s, wire.MustTag("back"))
	a := mustNext(t, s, wire.MustTag("back")) // max_id 21
	if err := s.Delete(ctx(t), wire.MustTag("back")); err != nil {
		t.Fatal(err)
	}
	for _, floor := range []int64{1, a.End() - 1} {
		if err := s.Restart(ctx(t), wire.MustTag("back"), floor); !errors.Is(err, segment.ErrBelowFloor) {
			t.Fatalf("Restart(back, %d) below max_id %d = %v, want ErrBelowFloor", floor, a.End(), err)
		}
	}
	if err := s.Restart(ctx(t), wire.MustTag("back"), 0); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("Restart(back, 0) = %v, want ErrInvalid", err)
	}
	if _, err := s.Get(ctx(t), wire.MustTag("back")); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Get after refused Restarts = %v, want ErrUnknownTag", err)
	}
	if err := s.Restart(ctx(t), wire.MustTag("back"), a.End()); err != nil {
		t.Fatalf("Restart(back, %d) at max_id: %v", a.End(), err)
	}
	b, err := s.Advance(ctx(t), wire.MustTag("back"), 10, 0)
	if err != nil || b.Start() != a.End() {
		t.Fatalf("NextStep after Restart = %+v, %v; want start %d", b, err, a.End())
	}
	tags, err := s.Tags(ctx(t))
	if err != nil || strings.Join(tags, ",") != "back" {
		t.Fatalf("Tags after Restart = %v, %v", tags, err)
	}
	// Deleted again: the floor is the new max_id.
	if err := s.Delete(ctx(t), wire.MustTag("back")); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx(t), wire.MustTag("back"), b.End()-1); !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("Restart below the second max_id = %v, want ErrBelowFloor", err)
	}
	if err := s.Restart(ctx(t), wire.MustTag("back"), 1_000_000); err != nil {
		t.Fatal(err)
	}
	if c := mustNext(t, s, wire.MustTag("back")); c.Start() != 1_000_000 {
		t.Fatalf("Next after Restart(1e6) = %+v", c)
	}
}

// testRestartLive: Restart of a live tag raises max_id, never lowers it.
func testRestartLive(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("live"), MaxID: 100, Step: 10})
	a := mustNext(t, s, wire.MustTag("live")) // [100, 110)
	if err := s.Restart(ctx(t), wire.MustTag("live"), a.End()-1); !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("Restart below max_id = %v, want ErrBelowFloor", err)
	}
	if got, err := s.Get(ctx(t), wire.MustTag("live")); err != nil || got.MaxID != a.End() || got.Step != 10 {
		t.Fatalf("Get after a refused Restart = %+v, %v", got, err)
	}
	if err := s.Restart(ctx(t), wire.MustTag("live"), 500); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx(t), wire.MustTag("live")); err != nil || got.MaxID != 500 || got.Step != 10 {
		t.Fatalf("Get after Restart(500) = %+v, %v; want max_id 500, step kept", got, err)
	}
	if b := mustNext(t, s, wire.MustTag("live")); b.Start() != 500 {
		t.Fatalf("Next after Restart = %+v, want start 500", b)
	}
}

// testRestartUnknown: Restart of a tag the store never had creates it at
// the floor.
func testRestartUnknown(t *testing.T, s segment.Store) {
	if err := s.Restart(ctx(t), wire.MustTag("fresh"), 77); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx(t), wire.MustTag("fresh"))
	if err != nil || got.MaxID != 77 || got.Step != segment.DefaultStep {
		t.Fatalf("Get = %+v, %v; want max_id 77, default step", got, err)
	}
	if err := s.Create(ctx(t), segment.Tag{Name: wire.MustTag("fresh")}); !errors.Is(err, segment.ErrTagExists) {
		t.Fatalf("Create after Restart = %v, want ErrTagExists", err)
	}
}

// testAdvanceFloor: a store refuses a range below the floor it is given
// and changes nothing (Store.Advance).
func testAdvanceFloor(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("above"), MaxID: 100, Step: 10})
	for _, step := range []int{0, 50} {
		if _, err := s.Advance(ctx(t), wire.MustTag("above"), step, 101); !errors.Is(err, segment.ErrBelowFloor) {
			t.Fatalf("Advance(step %d, floor 101) at max_id 100 = %v, want ErrBelowFloor", step, err)
		}
	}
	if got, err := s.Get(ctx(t), wire.MustTag("above")); err != nil || got.MaxID != 100 {
		t.Fatalf("a refused Advance changed the row: %+v, %v", got, err)
	}
	a, err := s.Advance(ctx(t), wire.MustTag("above"), 0, 100)
	if err != nil || a.Start() != 100 || a.Step != 10 {
		t.Fatalf("Advance(step 0, floor 100) = %+v, %v; want [100,110)", a, err)
	}
	a, err = s.Advance(ctx(t), wire.MustTag("above"), 50, 0)
	if err != nil || a.Start() != 110 || a.End() != 160 {
		t.Fatalf("Advance(step 50, no floor) = %+v, %v; want [110,160)", a, err)
	}
	if _, err := s.Advance(ctx(t), wire.MustTag("above"), -1, 0); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("Advance(step -1) = %v, want ErrInvalid", err)
	}
	if _, err := s.Advance(ctx(t), wire.MustTag("nope"), 0, 1); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Advance of an unknown tag = %v, want ErrUnknownTag", err)
	}
}

// testHandBack: a store that takes back the unserved end of the last
// range (segment.HandBacker) does so only while no one reserved after it,
// and the next range then starts where the served ids ended, without the
// store taking it for a lowered max_id.
func testHandBack(t *testing.T, s segment.Store) {
	hb, ok := s.(segment.HandBacker)
	if !ok {
		t.Skip("store does not implement segment.HandBacker")
	}
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("back"), MaxID: 1, Step: 10})
	mustNext(t, s, wire.MustTag("back")) // [1, 11)
	b := mustNext(t, s, wire.MustTag("back"))
	if b.Start() != 11 || b.End() != 21 {
		t.Fatalf("second range %+v", b)
	}
	// Ids 11..14 were served; 15..20 go back.
	if err := hb.HandBack(ctx(t), wire.MustTag("back"), 21, 15); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx(t), wire.MustTag("back")); err != nil || got.MaxID != 15 {
		t.Fatalf("Get after HandBack = %+v, %v; want max_id 15", got, err)
	}
	for _, want := range []int64{15, 25, 35} {
		if a := mustNext(t, s, wire.MustTag("back")); a.Start() != want {
			t.Fatalf("Next after the hand-back = %+v, want start %d", a, want)
		}
	}
	// Another node reserved after the range: nothing goes back.
	if err := hb.HandBack(ctx(t), wire.MustTag("back"), 35, 30); !errors.Is(err, segment.ErrMoved) {
		t.Fatalf("HandBack of a range not the last = %v, want ErrMoved", err)
	}
	if got, err := s.Get(ctx(t), wire.MustTag("back")); err != nil || got.MaxID != 45 {
		t.Fatalf("a refused HandBack changed the row: %+v, %v", got, err)
	}
	if a := mustNext(t, s, wire.MustTag("back")); a.Start() != 45 {
		t.Fatalf("Next after a refused hand-back = %+v, want start 45", a)
	}
	for _, bad := range [][2]int64{{55, 56}, {55, 0}} {
		if err := hb.HandBack(ctx(t), wire.MustTag("back"), bad[0], bad[1]); !errors.Is(err, segment.ErrInvalid) {
			t.Errorf("HandBack(%d, %d) = %v, want ErrInvalid", bad[0], bad[1], err)
		}
	}
	if err := hb.HandBack(ctx(t), wire.MustTag("nope"), 10, 5); !errors.Is(err, segment.ErrUnknownTag) {
		t.Errorf("HandBack of an unknown tag = %v, want ErrUnknownTag", err)
	}
}

var (
	monoMode   = segment.Mode{Kind: segment.KindMono}
	opaqueMode = segment.Mode{Kind: segment.KindOpaque, Width: 40, KeyID: "k1"}
)

// testModes: Create records a tag's mode; Get, every allocation and Modes
// report it; a tag with no mode is segment; a second Create with another
// mode is ErrMode, whatever the row.
func testModes(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("plain"), Step: 10})
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("mono"), Step: 10, Mode: monoMode})
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("opaque"), Step: 10, Mode: opaqueMode})
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("opaque-default"), Step: 10, Mode: segment.Mode{Kind: segment.KindOpaque, KeyID: "k2"}})
	want := map[string]segment.Mode{
		"plain":          {Kind: segment.KindSegment},
		"mono":           monoMode,
		"opaque":         opaqueMode,
		"opaque-default": {Kind: segment.KindOpaque, Width: segment.DefaultOpaqueWidth, KeyID: "k2"},
	}
	for name, m := range want {
		tag := wire.MustTag(name)
		if got, err := s.Get(ctx(t), tag); err != nil || got.Mode != m {
			t.Errorf("Get(%q).Mode = %+v, %v; want %+v", tag, got.Mode, err, m)
		}
		a := mustNext(t, s, tag)
		if a.Mode != m {
			t.Errorf("Advance(%q).Mode = %+v, want %+v", tag, a.Mode, m)
		}
		if a, err := s.Advance(ctx(t), tag, 5, 0); err != nil || a.Mode != m {
			t.Errorf("Advance(%q, step 5) = %+v, %v; want mode %+v", tag, a, err, m)
		}
	}
	got, err := s.Modes(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("Modes = %v, want %v", got, want)
	}
	for tag, m := range want {
		if got[tag] != m {
			t.Errorf("Modes[%q] = %+v, want %+v", tag, got[tag], m)
		}
	}
	for _, tc := range []struct {
		tag  string
		mode segment.Mode
	}{
		{"plain", monoMode},
		{"mono", segment.Mode{}},
		{"mono", opaqueMode},
		{"opaque", segment.Mode{Kind: segment.KindOpaque, Width: 41, KeyID: "k1"}},
		{"opaque", segment.Mode{Kind: segment.KindOpaque, Width: 40, KeyID: "k9"}},
	} {
		err := s.Create(ctx(t), segment.Tag{Name: wire.MustTag(tc.tag), Mode: tc.mode})
		if !errors.Is(err, segment.ErrMode) {
			t.Errorf("Create(%q, %s) over %s = %v, want ErrMode", tc.tag, tc.mode, want[tc.tag], err)
		}
	}
	if err := s.Create(ctx(t), segment.Tag{Name: wire.MustTag("mono"), Mode: monoMode}); !errors.Is(err, segment.ErrTagExists) {
		t.Errorf("Create of an existing tag with its own mode = %v, want ErrTagExists", err)
	}
}

// testModeSurvivesDelete: a deleted tag keeps its mode; Create with
// another mode is refused as a mode change, and Restart brings the tag
// back with the mode it was created with.
func testModeSurvivesDelete(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("gone"), Step: 10, Mode: opaqueMode})
	mustNext(t, s, wire.MustTag("gone"))
	if err := s.Delete(ctx(t), wire.MustTag("gone")); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx(t), segment.Tag{Name: wire.MustTag("gone")}); !errors.Is(err, segment.ErrMode) && !errors.Is(err, segment.ErrTagDeleted) {
		t.Fatalf("Create(plain) of a deleted opaque tag = %v, want ErrMode or ErrTagDeleted", err)
	}
	if err := s.Restart(ctx(t), wire.MustTag("gone"), 1000); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx(t), wire.MustTag("gone")); err != nil || got.Mode != opaqueMode {
		t.Fatalf("Get after Restart = %+v, %v; want mode %+v", got, err, opaqueMode)
	}
	if a := mustNext(t, s, wire.MustTag("gone")); a.Mode != opaqueMode || a.Start() != 1000 {
		t.Fatalf("Next after Restart = %+v, want start 1000 and mode %+v", a, opaqueMode)
	}
}

// testModeInvalid: a malformed mode is refused before any I/O and
// creates nothing.
func testModeInvalid(t *testing.T, s segment.Store) {
	for _, m := range []segment.Mode{
		{Kind: "strict"},
		{Kind: segment.KindMono, Width: 40},
		{Kind: segment.KindSegment, KeyID: "k"},
		{Kind: segment.KindOpaque},
		{Kind: segment.KindOpaque, Width: 19, KeyID: "k"},
		{Kind: segment.KindOpaque, Width: 64, KeyID: "k"},
	} {
		if err := s.Create(ctx(t), segment.Tag{Name: wire.MustTag("bad"), Mode: m}); !errors.Is(err, segment.ErrInvalid) {
			t.Errorf("Create with mode %+v = %v, want ErrInvalid", m, err)
		}
	}
	err := s.Create(ctx(t), segment.Tag{Name: wire.MustTag("bad"), MaxID: 1 << 40, Mode: opaqueMode})
	if !errors.Is(err, segment.ErrInvalid) {
		t.Errorf("Create of a 40-bit opaque tag at max_id 2^40 = %v, want ErrInvalid", err)
	}
	if _, err := s.Get(ctx(t), wire.MustTag("bad")); !errors.Is(err, segment.ErrUnknownTag) {
		t.Errorf("a refused Create left a row: %v", err)
	}
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("bad"), Mode: monoMode})
}

func testOverflow(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("big"), MaxID: 1, Step: 1000})
	const top = 1<<63 - 1
	if err := s.SetMaxID(ctx(t), wire.MustTag("big"), top-500); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(ctx(t), wire.MustTag("big"), 0, 0); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("Next past int64 = %v, want ErrInvalid", err)
	}
	a, err := s.Advance(ctx(t), wire.MustTag("big"), 500, 0)
	if err != nil || a.MaxID != top {
		t.Fatalf("NextStep to the top = %+v, %v", a, err)
	}
}

// seqPerm is an opaque tag's Permuter that hands out the sequence numbers
// themselves, so that a test reads which ones were served; it counts the
// ones outside [1, Max] (the real one panics on them).
type seqPerm struct {
	max     int64
	outside *atomic.Int64
}

func (p seqPerm) Permute(seq int64) int64 {
	if seq < 1 || seq > p.max {
		p.outside.Add(1)
	}
	return seq
}

func (p seqPerm) Max() int64 { return p.max }

// testOpaqueDomainEnd: an engine on the store serves an opaque tag up to
// the last id of its domain, from a last range that reaches past it, and
// not one id beyond; then it answers ErrDomainExhausted, a 400 (asking
// again cannot help). The unserved ids of that last range go back to the
// store (HandBacker) and a restarted engine serves exactly those; without
// a hand-back, or after it, the store's max_id stays at or past the
// domain's end, so no restart serves an id again.
func testOpaqueDomainEnd(t *testing.T, s segment.Store) {
	const width, step = 20, 10
	domain := int64(1) << width // sequence numbers [1, domain)
	tag := wire.MustTag("edge")
	mustCreate(t, s, segment.Tag{Name: tag, MaxID: domain - 25, Step: step,
		Mode: segment.Mode{Kind: segment.KindOpaque, Width: width, KeyID: "k1"}})
	var outside atomic.Int64
	engine := func() *segment.Engine {
		e, err := segment.New(segment.Config{
			Store: s, RefreshInterval: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Opaque: func(_ string, m segment.Mode) (segment.Permuter, error) {
				return seqPerm{max: 1<<m.Width - 1, outside: &outside}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx(t)); err != nil {
			t.Fatal(err)
		}
		return e
	}
	seen := map[int64]bool{}
	take := func(e *segment.Engine, n int) error {
		for range n {
			id, err := e.Next(ctx(t), tag)
			if err != nil {
				return err
			}
			if seen[id] {
				t.Fatalf("id %d served twice", id)
			}
			seen[id] = true
		}
		return nil
	}
	exhausted := func(err error, what string) {
		t.Helper()
		if !errors.Is(err, segment.ErrDomainExhausted) || wire.CodeOf(err) != wire.CodeBadRequest {
			t.Fatalf("%s: %v (code %q), want ErrDomainExhausted, code 400", what, err, wire.CodeOf(err))
		}
	}

	// 17 of the 25 ids left: into the second range, with the third (cut
	// at the domain's end) loaded or loading.
	e := engine()
	if err := take(e, 17); err != nil {
		t.Fatal(err)
	}
	hb, handsBack := s.(segment.HandBacker)
	if handsBack {
		for _, u := range e.Retire() {
			if u.Tag == tag {
				if err := hb.HandBack(ctx(t), u.Tag, u.From, u.To); err != nil && !errors.Is(err, segment.ErrMoved) {
					t.Fatalf("HandBack(%d, %d): %v", u.From, u.To, err)
				}
			}
		}
	}
	_ = e.Close()

	e = engine() // a restart
	defer e.Close()
	err := take(e, 100)
	exhausted(err, "after the domain's last id")
	exhausted(take(e, 1), "asked again")
	if n := outside.Load(); n != 0 {
		t.Fatalf("%d sequence numbers outside [1, %d] served", n, domain-1)
	}
	for id := range seen {
		if id < domain-25 || id >= domain {
			t.Errorf("id %d outside [%d, %d)", id, domain-25, domain)
		}
	}
	if handsBack && len(seen) != 25 {
		t.Errorf("served %d ids, want all 25 left in the domain", len(seen))
	}
	row, err := s.Get(ctx(t), tag)
	if err != nil {
		t.Fatal(err)
	}
	if row.MaxID < domain {
		t.Errorf("max_id %d after the domain is used up, want at least %d: a restart would serve ids again", row.MaxID, domain)
	}
	e3 := engine()
	defer e3.Close()
	exhausted(take(e3, 1), "a third engine")
}

// testRegionsDomainEnd: with many regions a plain tag's local numbers end
// where their ids would pass 2^63-1, far below the int64 (or signed
// bigint) max_id: the store keeps such a row and ranges past it, and an
// engine serves up to the last id that fits, then answers
// ErrDomainExhausted (a 400), on this engine and after a restart.
func testRegionsDomainEnd(t *testing.T, s segment.Store) {
	rg := segment.Regions{N: 4, R: 3}
	top := rg.Last(1<<63 - 1)
	tag := wire.MustTag("regions")
	mustCreate(t, s, segment.Tag{Name: tag, MaxID: top - 15, Step: 10})
	engine := func() *segment.Engine {
		e, err := segment.New(segment.Config{Store: s, RefreshInterval: -1, Regions: rg,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx(t)); err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := engine()
	defer e.Close()
	var last int64
	for n := 0; ; n++ {
		id, err := e.Next(ctx(t), tag)
		if err != nil {
			if !errors.Is(err, segment.ErrDomainExhausted) || wire.CodeOf(err) != wire.CodeBadRequest {
				t.Fatalf("after %d ids: %v (code %q), want ErrDomainExhausted, code 400", n, err, wire.CodeOf(err))
			}
			if n != 16 || last != rg.ID(top) {
				t.Fatalf("%d ids, the last %d; want 16 up to %d", n, last, rg.ID(top))
			}
			break
		}
		if id <= last || id%rg.N != rg.R {
			t.Fatalf("id %d after %d", id, last)
		}
		last = id
	}
	row, err := s.Get(ctx(t), tag)
	if err != nil {
		t.Fatal(err)
	}
	if row.MaxID <= top {
		t.Fatalf("max_id %d, want past the last local number %d", row.MaxID, top)
	}
	e2 := engine()
	defer e2.Close()
	if _, err := e2.Next(ctx(t), tag); !errors.Is(err, segment.ErrDomainExhausted) {
		t.Fatalf("after a restart: %v, want ErrDomainExhausted", err)
	}
}

func testConcurrent(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("race"), MaxID: 1, Step: 10})
	const workers, each = 8, 25
	var (
		mu     sync.Mutex
		ranges []segment.Alloc
		wg     sync.WaitGroup
		errs   = make(chan error, workers)
	)
	c := ctx(t)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var a segment.Alloc
				var err error
				if (w+i)%3 == 0 {
					a, err = s.Advance(c, wire.MustTag("race"), 3+w, 0)
				} else {
					a, err = s.Advance(c, wire.MustTag("race"), 0, 0)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d call %d: %w", w, i, err)
					return
				}
				mu.Lock()
				ranges = append(ranges, a)
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].Start() < ranges[j].Start() })
	var total int64
	for i, r := range ranges {
		total += int64(r.Step)
		if i > 0 && r.Start() < ranges[i-1].End() {
			t.Fatalf("ranges overlap: [%d,%d) and [%d,%d)", ranges[i-1].Start(), ranges[i-1].End(), r.Start(), r.End())
		}
	}
	got, err := s.Get(c, wire.MustTag("race"))
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxID != 1+total {
		t.Fatalf("max_id = %d, want %d (1 + sum of steps): an update was lost", got.MaxID, 1+total)
	}
	if ranges[0].Start() != 1 || ranges[len(ranges)-1].End() != got.MaxID {
		t.Fatalf("ranges do not tile [1,%d)", got.MaxID)
	}
}

func testContextCanceled(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("ctx"), Step: 10})
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Advance(c, wire.MustTag("ctx"), 0, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with canceled context = %v, want context.Canceled", err)
	}
	got, err := s.Get(ctx(t), wire.MustTag("ctx"))
	if err != nil || got.MaxID != 1 {
		t.Fatalf("canceled Next changed the row: %+v, %v", got, err)
	}
}

func testClosed(t *testing.T, s segment.Store) {
	mustCreate(t, s, segment.Tag{Name: wire.MustTag("closed"), Step: 10})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(ctx(t), wire.MustTag("closed"), 0, 0); !errors.Is(err, segment.ErrClosed) {
		t.Fatalf("Next after Close = %v, want ErrClosed", err)
	}
	_ = s.Close() // idempotent
}

func testUnreachable(t *testing.T, f Factory) {
	start := time.Now()
	s, err := f.Unreachable(t)
	if err != nil {
		if !errors.Is(err, segment.ErrUnavailable) {
			t.Fatalf("constructor error = %v, want ErrUnavailable", err)
		}
		return
	}
	defer s.Close()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Advance(c, wire.MustTag("any"), 0, 0); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Next on unreachable store = %v, want ErrUnavailable", err)
	}
	if _, err := s.Tags(c); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Tags on unreachable store = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("unreachable store took %v to fail", d)
	}
}

// testRegionMark: a store that records its region keeps the first record
// written (two nodes of one region starting at once on an empty store
// agree on it), refuses through segment.CheckRegionMark every other
// region and a node without regions, and lists no record as a tag.
func testRegionMark(t *testing.T, s segment.Store) {
	rm, ok := s.(segment.RegionMarker)
	if !ok {
		t.Skip("store keeps no region record")
	}
	c := ctx(t)
	if err := segment.CheckRegionMark(c, s, segment.RegionMark{}); err != nil {
		t.Fatalf("CheckRegionMark without regions on an empty store: %v", err)
	}
	if m, ok, err := rm.RegionMark(c); err != nil || ok {
		t.Fatalf("RegionMark of an empty store = %+v, %v, %v; want none (a node without regions records nothing)", m, ok, err)
	}
	if err := s.Create(c, segment.Tag{Name: wire.MustTag("a")}); err != nil {
		t.Fatal(err)
	}
	want := segment.RegionMark{N: 3, R: 1, Name: "r1"}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- segment.CheckRegionMark(c, s, want) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("CheckRegionMark of one region from 8 nodes at once: %v", err)
		}
	}
	if m, ok, err := rm.RegionMark(c); err != nil || !ok || m != want {
		t.Fatalf("RegionMark = %+v, %v, %v; want %+v", m, ok, err, want)
	}
	for _, other := range []segment.RegionMark{{N: 3, R: 2, Name: "r2"}, {N: 4, R: 1, Name: "r1"}, {N: 3, R: 1, Name: "R1"}, {}} {
		if err := segment.CheckRegionMark(c, s, other); !errors.Is(err, segment.ErrRegionMark) {
			t.Fatalf("CheckRegionMark(%+v) on a store of %+v: %v; want ErrRegionMark", other, want, err)
		}
	}
	if m, err := rm.SetRegionMark(c, segment.RegionMark{N: 3, R: 2, Name: "r2"}); err != nil || m != want {
		t.Fatalf("SetRegionMark over a record = %+v, %v; want the record %+v", m, err, want)
	}
	tags, err := s.Tags(c)
	if err != nil || len(tags) != 1 || tags[0] != "a" {
		t.Fatalf("Tags = %v, %v; want [a]", tags, err)
	}
	modes, err := s.Modes(c)
	if err != nil || len(modes) != 1 {
		t.Fatalf("Modes = %v, %v; want a only", modes, err)
	}
}
