package segment_test

import (
	"context"
	"github.com/leafmq/leafmq/wire"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/segment"
)

// mapSteps is an in-memory Steps.
type mapSteps struct {
	mu sync.Mutex
	m  map[string]stepAt
}

type stepAt struct {
	step int
	at   time.Time
}

func newMapSteps() *mapSteps { return &mapSteps{m: map[string]stepAt{}} }

func (s *mapSteps) Recall(tag string) (int, time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[tag]
	return e.step, e.at, ok
}

func (s *mapSteps) Remember(tag string, step int, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[tag] = stepAt{step, at}
}

func TestRememberedStep(t *testing.T) {
	cases := []struct {
		name     string
		step     int
		age      time.Duration // of the remembered step
		wantStep int           // of the first load
	}{
		{"fresh", 500, time.Minute, 500},
		{"just under 2 windows", 500, 30*time.Minute - time.Second, 500},
		{"2 windows old", 500, 30 * time.Minute, 10},
		{"capped at MaxStep", 5000, time.Minute, 800},
		{"from the future (clock went back)", 500, -time.Hour, 500},
		{"below the row's step", 4, 0, 4}, // the next load raises it
		{"invalid", 0, 0, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := newClock()
			now := clock.Now()
			s := newTestStore()
			s.create(t, "t", 10)
			s.create(t, "other", 10)
			steps := newMapSteps()
			steps.Remember("t", c.step, now.Add(-c.age))
			rec := newRecorder()
			e := newEngine(t, segment.Config{Store: s, MaxStep: 800, StepWindow: 15 * time.Minute,
				RefreshInterval: -1, Clock: clock, OnLoad: rec.OnLoad, Steps: steps, PreloadWindow: -1})
			start(t, e)
			byTag := map[string]segment.LoadEvent{}
			for range 2 {
				ev := rec.next(t)
				byTag[ev.Tag] = ev
			}
			if ev := byTag["t"]; ev.Err != nil || ev.Step != c.wantStep || ev.End-ev.Start != int64(c.wantStep) {
				t.Fatalf("first load of t = %+v, want step %d", ev, c.wantStep)
			}
			if ev := byTag["other"]; ev.Step != 10 {
				t.Fatalf("first load of a tag without a remembered step = %+v, want the row's 10", ev)
			}
			// Every load is remembered, with the engine's clock; a first
			// load that used a remembered step keeps that step's time, so
			// restarts alone never make a step fresh again.
			for _, tag := range []string{"t", "other"} {
				wantAt := now
				if tag == "t" && c.wantStep != 10 {
					wantAt = now.Add(-c.age)
				}
				step, at, ok := steps.Recall(tag)
				if !ok || step != byTag[tag].Step || !at.Equal(wantAt) {
					t.Fatalf("remembered %s: %d at %v (%v), want %d at %v", tag, step, at, ok, byTag[tag].Step, wantAt)
				}
			}
			// The rule goes on from the step granted; never below the row's.
			d := &stepDriver{t: t, e: e, s: s, clock: clock, rec: rec, want: byTag["t"].Start}
			ev := d.load(time.Hour)
			want := max(c.wantStep/2, 10)
			if ev.Step != want {
				t.Fatalf("second load an hour later = %+v, want step %d", ev, want)
			}
		})
	}
}

// Start preloads only the tags this node loaded within PreloadWindow (as
// Steps remembers them); the others reserve no range until their first
// request: a rolling restart must not burn a range per tag and node.
func TestPreloadsOnlyRecentTags(t *testing.T) {
	clock := newClock()
	now := clock.Now()
	s := newTestStore()
	for _, tag := range []string{"recent", "stale", "never"} {
		s.create(t, tag, 10)
	}
	steps := newMapSteps()
	steps.Remember("recent", 10, now.Add(-time.Hour))
	steps.Remember("stale", 10, now.Add(-25*time.Hour))
	rec := newRecorder()
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, Clock: clock, OnLoad: rec.OnLoad, Steps: steps})
	start(t, e)
	if ev := rec.next(t); ev.Tag != "recent" {
		t.Fatalf("first preload = %+v, want tag recent", ev)
	}
	for _, tag := range []string{"stale", "never"} {
		row, err := s.Get(context.Background(), wire.MustTag(tag))
		if err != nil || row.MaxID != 1 {
			t.Fatalf("%s: row %+v, %v; want no range reserved (max_id 1)", tag, row, err)
		}
	}
	if got := e.Tags(); len(got) != 3 {
		t.Fatalf("cached tags %v, want all three", got)
	}
	if id := next(t, e, "never"); id != 1 {
		t.Fatalf("first id of a tag loaded on request = %d, want 1", id)
	}
}

func TestStepFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "steps.json")
	quiet := slog.New(slog.DiscardHandler)
	c := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// written waits until the writer has written and waits FlushEvery on
	// the clock, and returns the file.
	written := func() string {
		t.Helper()
		if err := c.BlockUntil(ctx, 1); err != nil {
			t.Fatalf("the writer is not waiting on the clock: %v", err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	f, err := segment.OpenStepFileClock(path, quiet, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := f.Recall("a"); ok {
		t.Fatal("a new file recalls a step")
	}
	at := c.Now()
	f.Remember("a", 64000, at)
	// The writer writes without Close (a kill -9 keeps what was written).
	if data := written(); !strings.Contains(data, `"a"`) || !strings.Contains(data, "64000") {
		t.Fatalf("file after the first Remember: %q", data)
	}
	f.Remember("b", 2000, at.Add(-time.Minute))
	f.Remember("old", 2000, at.Add(-segment.StepFileMaxAge-time.Minute))
	if step, got, ok := f.Recall("a"); !ok || step != 64000 || !got.Equal(at) {
		t.Fatalf("Recall(a) = %d, %v, %v", step, got, ok)
	}
	// At most one write per FlushEvery.
	c.Advance(segment.FlushEvery - time.Nanosecond)
	if data, _ := os.ReadFile(path); strings.Contains(string(data), `"b"`) {
		t.Fatalf("file rewritten within FlushEvery: %q", data)
	}
	c.Advance(time.Nanosecond)
	if data := written(); !strings.Contains(data, `"b"`) || strings.Contains(data, `"old"`) {
		t.Fatalf("file a FlushEvery later: %q, want b and not old (StepFileMaxAge)", data)
	}
	f.Remember("a", 128000, at)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	g, err := segment.OpenStepFileClock(path, quiet, c)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if step, got, ok := g.Recall("a"); !ok || step != 128000 || !got.Equal(at) {
		t.Fatalf("after reopening, Recall(a) = %d, %v, %v; want 128000 at %v", step, got, ok, at)
	}
	if step, _, ok := g.Recall("b"); !ok || step != 2000 {
		t.Fatalf("after reopening, Recall(b) = %d, %v", step, ok)
	}
	if _, _, ok := g.Recall("old"); ok {
		t.Fatal("an entry older than StepFileMaxAge was kept")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file (no temporary files left)", len(entries))
	}
	// The age cut is the clock's: StepFileMaxAge later, less 30s, b (a
	// minute older than a) is dropped at the next write and a is kept.
	c.Advance(segment.StepFileMaxAge - 30*time.Second)
	g.Remember("c", 5, c.Now())
	if data := written(); !strings.Contains(data, `"a"`) || strings.Contains(data, `"b"`) {
		t.Fatalf("file a day later: %q, want a and not b", data)
	}
}

func TestStepFileBad(t *testing.T) {
	for name, content := range map[string]string{
		"not JSON":      "{nope",
		"other version": `{"version": 2, "tags": {"a": {"step": 5, "at": "2026-01-01T00:00:00Z"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "steps.json")
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := segment.OpenStepFile(path, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("err = %v, want one naming the file", err)
			}
			if f == nil {
				t.Fatal("no usable StepFile with the error")
			}
			if _, _, ok := f.Recall("a"); ok {
				t.Fatal("a bad file gave a step")
			}
			// The next write replaces the bad file.
			f.Remember("a", 7, time.Now())
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			g, err := segment.OpenStepFile(path, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if step, _, ok := g.Recall("a"); !ok || step != 7 {
				t.Fatalf("Recall(a) = %d, %v after the rewrite", step, ok)
			}
		})
	}
	t.Run("invalid entries dropped", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "steps.json")
		now := time.Now().UTC().Format(time.RFC3339)
		doc := `{"version": 1, "tags": {"ok": {"step": 5, "at": "` + now + `"}, "bad.tag": {"step": 5, "at": "` + now +
			`"}, "zero": {"step": 0, "at": "` + now + `"}, "neg": {"step": -3, "at": "` + now + `"}}}`
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := segment.OpenStepFile(path, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for tag, want := range map[string]bool{"ok": true, "bad.tag": false, "zero": false, "neg": false} {
			if _, _, ok := f.Recall(tag); ok != want {
				t.Errorf("Recall(%q) ok = %v, want %v", tag, ok, want)
			}
		}
	})
	t.Run("unreadable directory", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := segment.OpenStepFile(filepath.Join(file, "steps.json"), slog.New(slog.DiscardHandler)); err == nil {
			t.Fatal("a path under a regular file opened")
		}
	})
}

// Restarts alone do not keep a remembered step alive: a node restarted
// every 20 minutes with no traffic starts at the row's step once the step
// is 2*StepWindow old.
func TestRememberedStepAgesWithoutTraffic(t *testing.T) {
	clock := newClock()
	s := newTestStore()
	s.create(t, "t", 10)
	steps := newMapSteps()
	steps.Remember("t", 500, clock.Now().Add(-20*time.Minute))
	firstStep := func() int {
		t.Helper()
		rec := newRecorder()
		e := newEngine(t, segment.Config{Store: s, StepWindow: 15 * time.Minute, RefreshInterval: -1,
			Clock: clock, OnLoad: rec.OnLoad, Steps: steps})
		start(t, e)
		ev := rec.next(t)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		return ev.Step
	}
	if got := firstStep(); got != 500 {
		t.Fatalf("first restart: step %d, want the remembered 500", got)
	}
	clock.Advance(20 * time.Minute) // the step is 40 minutes old now
	if got := firstStep(); got != 10 {
		t.Fatalf("second restart: step %d, want the row's 10", got)
	}
}

// Whatever the step file holds, OpenStepFile does not panic, and what it
// recalls is a valid tag with a step the engine accepts.
func FuzzStepFile(f *testing.F) {
	f.Add([]byte(`{"version": 1, "tags": {"a": {"step": 64000, "at": "2026-11-22T04:59:18Z"}}}`))
	f.Add([]byte(`{"version": 1, "tags": {"a.b": {"step": -1, "at": "nope"}}}`))
	f.Add([]byte(`{"version": 2}`))
	f.Add([]byte(`{nope`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "steps.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sf, err := segment.OpenStepFile(path, slog.New(slog.DiscardHandler))
		if sf == nil {
			t.Fatalf("no StepFile: %v", err)
		}
		defer sf.Close()
		for _, tag := range []string{"a", "a.b", "", "x"} {
			step, _, ok := sf.Recall(tag)
			if _, err := wire.ParseTag(tag); ok && (err != nil || step < 1 || step > segment.MaxStep) {
				t.Fatalf("recalled tag %q step %d", tag, step)
			}
		}
	})
}
