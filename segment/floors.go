package segment

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/leafmq/leafmq/internal/fsutil"
	"github.com/leafmq/leafmq/wire"
)

// Floors remembers, for each tag, the highest range end this node ever
// received from the store (the tag's floor), and the incarnation of the
// store it served from (see Incarnation). The engine refuses a range that
// starts below the floor: a lowered max_id, a row or key deleted and made
// again, a replaced bucket can then never make this node hand out an id
// twice. Implementations must be safe for concurrent use.
type Floors interface {
	// Floor returns tag's floor, 0 when there is none.
	Floor(tag string) int64
	// Raise records end as tag's floor if it is higher than the current
	// one. The engine calls it from the loader, before it hands out an id
	// of the range; it may block until the floor is durable (FloorFile
	// does). An error (of this or an earlier write) means floors may not
	// survive a restart (the range is served anyway: the store is the
	// source of truth, the floor a second guard).
	Raise(tag string, end int64) error
	// Incarnation returns the store incarnation recorded, "" if none.
	Incarnation() string
	// SetIncarnation records the store incarnation.
	SetIncarnation(inc string) error
}

// ModeKeeper is implemented by Floors that also remember the mode each
// tag was served in (Mode.String()), so that a node never serves a tag in
// another mode than before, whatever the store says later (a mode removed
// or edited by hand). FloorFile and the in-memory Floors implement it.
type ModeKeeper interface {
	// Mode returns the mode recorded for tag, false if none.
	Mode(tag string) (string, bool)
	// KeepMode records tag's mode; it is written with the next Raise.
	KeepMode(tag, mode string)
}

// memFloors is the process-local Floors an Engine uses without
// Config.Floors: it guards the process, not a restart.
type memFloors struct {
	mu     sync.Mutex
	floors map[string]int64
	modes  map[string]string
	inc    string
}

func newMemFloors() *memFloors {
	return &memFloors{floors: map[string]int64{}, modes: map[string]string{}}
}

// Lower sets tag's floor down to floor (see FloorFile.Lower).
func (m *memFloors) Lower(tag string, floor int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.floors[tag]; ok && floor < cur {
		m.floors[tag] = floor
	}
	return nil
}

func (m *memFloors) Mode(tag string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	md, ok := m.modes[tag]
	return md, ok
}

func (m *memFloors) KeepMode(tag, mode string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.modes[tag] = mode
}

// NewMemFloors returns Floors kept in memory: what an Engine uses without
// Config.Floors, for callers that share them with other range takers.
func NewMemFloors() Floors { return newMemFloors() }

func (m *memFloors) Floor(tag string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.floors[tag]
}

func (m *memFloors) Raise(tag string, end int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if end > m.floors[tag] {
		m.floors[tag] = end
	}
	return nil
}

func (m *memFloors) Incarnation() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inc
}

func (m *memFloors) SetIncarnation(inc string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inc = inc
	return nil
}

// FloorFile is a Floors kept in a JSON file (leafd's
// <data>/segment-floors.json):
//
//	{"version":1,"store":"kv:leaf_alloc:2026-11-24T18:00:00.123456789Z","tags":{"orders":40001}}
//
// Raise updates the memory at once and starts a write (to a temporary
// file, fsynced, renamed over the old one, the directory fsynced) unless
// one is under way, which then writes again: changes that arrive during a
// write share the next. Raise returns once its change is on disk, so a
// range's floor is durable before any id of the range is handed out; the
// engine calls it from the loader, off the request path. Floors are never
// dropped, whatever their age.
//
// Why the order is safe. The memory is what the engine checks, and it is
// loaded from the file before the engine asks the store for anything. A
// range reaches the engine only after the store committed it, so while the
// store keeps its max_id no range can start below ids already handed out,
// with or without the file: the store is the source of truth. The file
// guards against the store going back (a lowered max_id, a key or bucket
// deleted and made again). A node that dies (kill -9, power loss) right
// after a load finds the load's floor in the file at restart: the range was
// not served before it was written. The cost is one fsync per load, shared
// by concurrent loads, on the loader: a tag's first load waits for it
// (within the engine's ColdWait), later loads happen while the other
// buffer still serves.
type FloorFile struct {
	path string

	mu      sync.Mutex // guards floors, modes, inc, ver, writing and err
	floors  map[string]int64
	modes   map[string]string
	unsaved bool // a mode was kept that no write has begun to cover
	inc     string
	ver     uint64        // bumped by every change
	writing chan struct{} // non-nil while a write-behind goroutine runs; closed when it ends
	err     error         // of the last write; nil after a good one
	wmu     sync.Mutex
	written uint64 // ver on disk; guarded by wmu
}

type floorFileJSON struct {
	Version int              `json:"version"`
	Store   string           `json:"store,omitempty"`
	Tags    map[string]int64 `json:"tags"`
	// Modes is each served tag's mode (Mode.String()); absent in files
	// written before modes.
	Modes map[string]string `json:"modes,omitempty"`
}

const floorFileVersion = 1

// floorWriteHook, if set (tests), runs before each write of a floor file.
var floorWriteHook func()

// OpenFloorFile reads the floor file at path, if there is one. Unlike a
// step file, a floor file that cannot be read or parsed is an error: the
// floors it held would be lost, and with them the guard. The operator
// repairs or removes it.
func OpenFloorFile(path string) (*FloorFile, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("segment: floor file: %w", err)
	}
	f := &FloorFile{path: path, floors: map[string]int64{}, modes: map[string]string{}}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return f, nil
	case err != nil:
		return nil, fmt.Errorf("segment: floor file: %w", err)
	}
	var doc floorFileJSON
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("segment: floor file %s is not valid JSON (repair it, or remove it to drop every floor): %w", path, err)
	}
	if doc.Version != floorFileVersion {
		return nil, fmt.Errorf("segment: floor file %s has version %d, want %d", path, doc.Version, floorFileVersion)
	}
	for tag, end := range doc.Tags {
		if _, err := wire.ParseTag(tag); err == nil && end > 0 {
			f.floors[tag] = end
		}
	}
	for tag, md := range doc.Modes {
		if _, err := wire.ParseTag(tag); err == nil && md != "" {
			f.modes[tag] = md
		}
	}
	f.inc = doc.Store
	return f, nil
}

// Modes returns a copy of every recorded mode, by tag.
func (f *FloorFile) Modes() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.modes)
}

// Mode implements ModeKeeper.
func (f *FloorFile) Mode(tag string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	md, ok := f.modes[tag]
	return md, ok
}

// KeepMode implements ModeKeeper: the mode is written, fsynced, with the
// next Raise (the engine raises the floor of the range it learned the mode
// from before serving it).
func (f *FloorFile) KeepMode(tag, mode string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.modes[tag] != mode {
		f.modes[tag] = mode
		f.ver++
		f.unsaved = true
	}
}

// All returns a copy of every floor, by tag.
func (f *FloorFile) All() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.floors)
}

// Path returns the file's path.
func (f *FloorFile) Path() string { return f.path }

// Floor implements Floors.
func (f *FloorFile) Floor(tag string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.floors[tag]
}

// Raise implements Floors: it returns once the file holds end, fsynced,
// sharing the write with every Raise under way (group commit), or with the
// error of that write.
func (f *FloorFile) Raise(tag string, end int64) error {
	f.mu.Lock()
	if end <= f.floors[tag] && !f.unsaved {
		err := f.err
		f.mu.Unlock()
		return err
	}
	if end > f.floors[tag] {
		f.floors[tag] = end
		f.ver++
	}
	if f.writing == nil {
		f.writing = make(chan struct{})
		go f.writeBehind(f.writing)
	}
	w := f.writing
	f.mu.Unlock()
	<-w // the writer ends once it wrote every change it saw, ours among them, or failed
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// writeBehind writes the file until it holds every change, then ends. A
// failed write ends it too; the next Raise or Flush tries again.
func (f *FloorFile) writeBehind(done chan struct{}) {
	for {
		f.mu.Lock()
		v := f.ver
		f.mu.Unlock()
		err := f.sync(v)
		f.mu.Lock()
		f.err = err
		if err != nil || f.ver == v {
			f.writing = nil
			close(done)
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
	}
}

// Flush returns once the file holds every change made before the call,
// fsynced, and the write-behind goroutine it found has ended; or the error
// of writing it.
func (f *FloorFile) Flush() error {
	f.mu.Lock()
	v, w := f.ver, f.writing
	f.mu.Unlock()
	if w != nil {
		<-w
	}
	err := f.sync(v)
	f.mu.Lock()
	if f.ver == v {
		f.err = err
	}
	f.mu.Unlock()
	return err
}

// Lower sets tag's floor down to floor and returns once the file holds it,
// fsynced: for a node that handed back the unserved top of its last range
// (HandBacker), whose floor is then where its served ids end.
func (f *FloorFile) Lower(tag string, floor int64) error {
	f.mu.Lock()
	if cur, ok := f.floors[tag]; !ok || floor >= cur {
		f.mu.Unlock()
		return nil
	}
	f.floors[tag] = floor
	f.ver++
	v := f.ver
	f.mu.Unlock()
	return f.sync(v)
}

// Incarnation implements Floors.
func (f *FloorFile) Incarnation() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inc
}

// SetIncarnation implements Floors.
func (f *FloorFile) SetIncarnation(inc string) error {
	f.mu.Lock()
	if f.inc == inc {
		f.mu.Unlock()
		return nil
	}
	f.inc = inc
	f.ver++
	v := f.ver
	f.mu.Unlock()
	return f.sync(v)
}

// sync writes the file unless a write that began after change v already
// made it to disk. SetIncarnation, rare, waits for its write.
func (f *FloorFile) sync(v uint64) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if f.written >= v {
		return nil // a write that started after our change covered it
	}
	f.mu.Lock()
	doc := floorFileJSON{Version: floorFileVersion, Store: f.inc, Tags: make(map[string]int64, len(f.floors)), Modes: maps.Clone(f.modes)}
	f.unsaved = false
	for tag, end := range f.floors {
		doc.Tags[tag] = end
	}
	cur := f.ver
	f.mu.Unlock()
	data, err := json.MarshalIndent(doc, "", "  ")
	if floorWriteHook != nil {
		floorWriteHook()
	}
	if err == nil {
		err = fsutil.WriteFile(f.path, append(data, '\n'))
	}
	if err != nil {
		return fmt.Errorf("segment: floor file: %w", err)
	}
	f.written = cur
	return nil
}
