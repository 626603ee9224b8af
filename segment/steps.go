package segment

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/fsutil"
	"github.com/leafmq/leafmq/wire"
)

// Steps remembers the dynamic step of each tag across restarts
// (Config.Steps). Without it a restarted node starts every tag at the row's
// step and needs a few loads, each a store transaction, to get back to the
// step its traffic needs; with it, the first load asks for the step the
// tag had, so a restart just before a store outage does not leave the node
// with buffers far too small to bridge it. Implementations must be safe for
// concurrent use and must not block.
type Steps interface {
	// Recall returns the step of tag's last successful load and when it
	// happened (Config.Clock).
	Recall(tag string) (step int, at time.Time, ok bool)
	// Remember records a successful load. The first load of a tag that
	// used a recalled step is remembered with the recalled time, not the
	// load's: only loads driven by traffic make a step fresh again.
	Remember(tag string, step int, at time.Time)
}

// recallStep returns the step a tag's first load asks for, and when it was
// remembered: the remembered step if there is one from within 2*window
// (after which Leaf's rule would have halved it anyway), capped at maxStep;
// else 0 (use the row's step).
//
// The remembered step is used even when an operator raised the row's step
// meanwhile; the next load applies the row's step.
func recallStep(s Steps, tag string, now time.Time, window time.Duration, maxStep int) (int, time.Time) {
	if s == nil {
		return 0, time.Time{}
	}
	step, at, ok := s.Recall(tag)
	if !ok || step < 1 {
		return 0, time.Time{}
	}
	// A remembered time ahead of now (the clock went back) counts as fresh.
	if age := now.Sub(at); age >= 2*window {
		return 0, time.Time{}
	}
	return min(step, maxStep), at
}

// StepFile is a Steps kept in a JSON file: Remember updates memory and a
// background writer replaces the file (write to a temporary file, rename) at
// most once per FlushEvery, so the steps survive even a kill -9 of the
// process, give or take the last FlushEvery. Entries not updated for
// StepFileMaxAge are dropped when the file is written. Two processes sharing
// the file overwrite each other's entries, which costs at most a few extra
// loads: the steps are hints, never ids. Its clock (OpenStepFileClock) times
// the writes and the age cut.
type StepFile struct {
	path  string
	log   *slog.Logger
	clock clock.Clock

	mu    sync.Mutex
	steps map[string]stepEntry
	dirty bool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type stepEntry struct {
	Step int       `json:"step"`
	At   time.Time `json:"at"`
}

type stepFileJSON struct {
	Version int                  `json:"version"`
	Tags    map[string]stepEntry `json:"tags"`
}

// Step file settings.
const (
	// FlushEvery is the most often a StepFile rewrites its file.
	FlushEvery = time.Second
	// StepFileMaxAge is how long an entry that is not updated stays in a
	// StepFile. A step older than twice Config.StepWindow is not used anyway.
	StepFileMaxAge = 24 * time.Hour

	stepFileVersion = 1
)

// OpenStepFile reads the step file at path, if there is one, and starts the
// writer; Close stops it after a last write. The directory must exist or be
// creatable. A file that cannot be parsed is not fatal: OpenStepFile then
// returns a usable, empty StepFile together with an error saying why (the
// caller logs it), and the next write replaces the bad file. It runs on the
// real clock: OpenStepFileClock(path, log, nil).
func OpenStepFile(path string, log *slog.Logger) (*StepFile, error) {
	return OpenStepFileClock(path, log, nil)
}

// OpenStepFileClock is OpenStepFile with c (default clock.Real, clock.Or)
// timing the writer's FlushEvery and the StepFileMaxAge cut.
func OpenStepFileClock(path string, log *slog.Logger, c clock.Clock) (*StepFile, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("segment: step file: %w", err)
	}
	f := &StepFile{
		path:  path,
		log:   log,
		clock: clock.Or(c),
		steps: map[string]stepEntry{},
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	var bad error
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("segment: step file: %w", err)
	default:
		var doc stepFileJSON
		if err := json.Unmarshal(data, &doc); err != nil {
			bad = fmt.Errorf("segment: step file %s is not valid JSON, starting without remembered steps: %w", path, err)
		} else if doc.Version != stepFileVersion {
			bad = fmt.Errorf("segment: step file %s has version %d, want %d; starting without remembered steps", path, doc.Version, stepFileVersion)
		} else {
			for tag, e := range doc.Tags {
				if _, err := wire.ParseTag(tag); err == nil && e.Step >= 1 && e.Step <= MaxStep {
					f.steps[tag] = e
				}
			}
		}
	}
	go f.writer()
	return f, bad
}

// Recall implements Steps.
func (f *StepFile) Recall(tag string) (int, time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.steps[tag]
	return e.Step, e.At, ok
}

// Remember implements Steps.
func (f *StepFile) Remember(tag string, step int, at time.Time) {
	f.mu.Lock()
	f.steps[tag] = stepEntry{Step: step, At: at}
	f.dirty = true
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Close writes what is not written yet and stops the writer. It is
// idempotent.
func (f *StepFile) Close() error {
	f.once.Do(func() { close(f.stop) })
	<-f.done
	return f.flush()
}

func (f *StepFile) writer() {
	defer close(f.done)
	for {
		select {
		case <-f.stop:
			return
		case <-f.kick:
		}
		if err := f.flush(); err != nil {
			f.log.Warn("segment: writing the step file", "err", err)
		}
		t := f.clock.NewTimer(FlushEvery)
		select {
		case <-f.stop:
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// flush writes the file if anything changed since the last write.
func (f *StepFile) flush() error {
	f.mu.Lock()
	if !f.dirty {
		f.mu.Unlock()
		return nil
	}
	doc := stepFileJSON{Version: stepFileVersion, Tags: make(map[string]stepEntry, len(f.steps))}
	now := f.clock.Now()
	cut, future := now.Add(-StepFileMaxAge), now.Add(StepFileMaxAge)
	for tag, e := range f.steps {
		if e.At.Before(cut) || e.At.After(future) {
			delete(f.steps, tag)
			continue
		}
		doc.Tags[tag] = e
	}
	f.dirty = false
	f.mu.Unlock()
	data, err := json.MarshalIndent(doc, "", "  ")
	if err == nil {
		err = fsutil.WriteFile(f.path, append(data, '\n'))
	}
	if err != nil {
		f.mu.Lock()
		f.dirty = true // try again on the next change or Close
		f.mu.Unlock()
		return fmt.Errorf("segment: step file: %w", err)
	}
	return nil
}
