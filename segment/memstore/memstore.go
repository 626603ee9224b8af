package memstore

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// Store is an in-memory segment.Store.
type Store struct {
	mu     sync.Mutex
	rows   map[wire.Tag]segment.Tag
	gone   map[wire.Tag]segment.Tag // deleted rows, as they were: Create refuses them
	down   bool
	closed bool
	calls  int // Advance calls that reached the store
	inc    int // incarnation: bumped by Replace
	clock  clock.Clock
	region *segment.RegionMark // nil: no record
}

// New returns an empty store.
func New() *Store {
	return &Store{rows: make(map[wire.Tag]segment.Tag), gone: make(map[wire.Tag]segment.Tag), clock: clock.Real}
}

// SetClock makes the store stamp update_time with c (default clock.Real).
func (s *Store) SetClock(c clock.Clock) {
	s.mu.Lock()
	s.clock = clock.Or(c)
	s.mu.Unlock()
}

// SetDown makes the store unreachable (true) or reachable again (false).
func (s *Store) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// Allocations reports how many Advance calls succeeded.
func (s *Store) Allocations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *Store) checkLocked(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed {
		return segment.ErrClosed
	}
	if s.down {
		return fmt.Errorf("%w: memstore is down", segment.ErrUnavailable)
	}
	return nil
}

// Advance implements segment.Store.
func (s *Store) Advance(ctx context.Context, tag wire.Tag, step int, floor int64) (segment.Alloc, error) {
	if err := segment.CheckAdvanceStep(step); err != nil {
		return segment.Alloc{}, err
	}
	return s.advance(ctx, tag, step, floor)
}

func (s *Store) advance(ctx context.Context, tag wire.Tag, step int, floor int64) (segment.Alloc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(ctx); err != nil {
		return segment.Alloc{}, err
	}
	row, ok := s.rows[tag]
	if !ok {
		return segment.Alloc{}, fmt.Errorf("%w: %q", segment.ErrUnknownTag, tag)
	}
	if step == 0 {
		step = row.Step
	}
	if row.MaxID < floor {
		return segment.Alloc{}, fmt.Errorf("%w: tag %q: max_id %d is below the floor %d", segment.ErrBelowFloor, tag, row.MaxID, floor)
	}
	if err := segment.CheckAdvance(tag, row.MaxID, step); err != nil {
		return segment.Alloc{}, err
	}
	row.MaxID += int64(step)
	row.UpdateTime = s.clock.Now()
	s.rows[tag] = row
	s.calls++
	return segment.Alloc{Tag: tag, MaxID: row.MaxID, Step: step, TableStep: row.Step, Mode: row.Mode}, nil
}

// Tags implements segment.Store.
func (s *Store) Tags(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(ctx); err != nil {
		return nil, err
	}
	tags := make([]string, 0, len(s.rows))
	for name := range s.rows {
		tags = append(tags, name.String())
	}
	sort.Strings(tags)
	return tags, nil
}

// Modes implements segment.Store.
func (s *Store) Modes(ctx context.Context) (map[string]segment.Mode, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(ctx); err != nil {
		return nil, err
	}
	modes := make(map[string]segment.Mode, len(s.rows))
	for name, row := range s.rows {
		modes[name.String()] = row.Mode
	}
	return modes, nil
}

// Get implements segment.Store.
func (s *Store) Get(ctx context.Context, tag wire.Tag) (segment.Tag, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(ctx); err != nil {
		return segment.Tag{}, err
	}
	row, ok := s.rows[tag]
	if !ok {
		return segment.Tag{}, fmt.Errorf("%w: %q", segment.ErrUnknownTag, tag)
	}
	return row, nil
}

// Create implements segment.Store.
func (s *Store) Create(ctx context.Context, t segment.Tag) error {
	t, err := segment.Normalize(t)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(ctx); err != nil {
		return err
	}
	if row, ok := s.rows[t.Name]; ok {
		if !row.Mode.Equal(t.Mode) {
			return segment.ModeConflict(t.Name, row.Mode, t.Mode)
		}
		return fmt.Errorf("%w: %q", segment.ErrTagExists, t.Name)
	}
	if row, ok := s.gone[t.Name]; ok {
		if !row.Mode.Equal(t.Mode) {
			return segment.ModeConflict(t.Name, row.Mode, t.Mode)
		}
		return fmt.Errorf("%w: %q", segment.ErrTagDeleted, t.Name)
	}
	t.UpdateTime = s.clock.Now()
	s.rows[t.Name] = t
	return nil
}

// SetStep implements segment.Store.
func (s *Store) SetStep(ctx context.Context, tag wire.Tag, step int) error {
	if err := segment.CheckStep(step); err != nil {
		return err
	}
	return s.update(ctx, tag, func(row *segment.Tag) error { row.Step = step; return nil })
}

// SetMaxID implements segment.Store.
func (s *Store) SetMaxID(ctx context.Context, tag wire.Tag, maxID int64) error {
	return s.update(ctx, tag, func(row *segment.Tag) error {
		if maxID < row.MaxID {
			return fmt.Errorf("%w: max_id %d is below the current %d of %q", segment.ErrInvalid, maxID, row.MaxID, tag)
		}
		row.MaxID = maxID
		return nil
	})
}

func (s *Store) update(ctx context.Context, tag wire.Tag, f func(*segment.Tag) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(ctx); err != nil {
		return err
	}
	row, ok := s.rows[tag]
	if !ok {
		return fmt.Errorf("%w: %q", segment.ErrUnknownTag, tag)
	}
	if err := f(&row); err != nil {
		return err
	}
	row.UpdateTime = s.clock.Now()
	s.rows[tag] = row
	return nil
}

// Delete implements segment.Store.
func (s *Store) Delete(ctx context.Context, tag wire.Tag) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(ctx); err != nil {
		return err
	}
	if _, ok := s.rows[tag]; !ok {
		return fmt.Errorf("%w: %q", segment.ErrUnknownTag, tag)
	}
	s.gone[tag] = s.rows[tag]
	delete(s.rows, tag)
	return nil
}

// Restart implements segment.Store.
func (s *Store) Restart(ctx context.Context, tag wire.Tag, floor int64) error {
	if err := segment.CheckFloor(tag, floor, 0); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(ctx); err != nil {
		return err
	}
	row, ok := s.rows[tag]
	if !ok {
		row, ok = s.gone[tag]
		if !ok {
			row = segment.Tag{Name: tag, Step: segment.DefaultStep, Mode: segment.Mode{Kind: segment.KindSegment}}
		}
	}
	if err := segment.CheckFloor(tag, floor, row.MaxID); err != nil {
		return err
	}
	row.MaxID = floor
	row.UpdateTime = s.clock.Now()
	s.rows[tag] = row
	delete(s.gone, tag)
	return nil
}

// Lower sets tag's max_id to maxID, below the current one if asked: an
// operator's mistake (UPDATE leaf_alloc SET max_id = ...) for tests.
func (s *Store) Lower(tag wire.Tag, maxID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.rows[tag]
	row.MaxID = maxID
	s.rows[tag] = row
}

// SetModeByHand rewrites tag's recorded mode, live row or deleted: an
// operator editing the store behind leafmq's back, for tests.
func (s *Store) SetModeByHand(tag wire.Tag, m segment.Mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if row, ok := s.rows[tag]; ok {
		row.Mode = m
		s.rows[tag] = row
	}
	if row, ok := s.gone[tag]; ok {
		row.Mode = m
		s.gone[tag] = row
	}
}

// Replace drops every row and every deletion record and gives the store a
// new incarnation: a KV bucket deleted and made again, for tests.
func (s *Store) Replace() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = make(map[wire.Tag]segment.Tag)
	s.gone = make(map[wire.Tag]segment.Tag)
	s.inc++
	s.region = nil
}

// RegionMark implements segment.RegionMarker.
func (s *Store) RegionMark(ctx context.Context) (segment.RegionMark, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(ctx); err != nil || s.region == nil {
		return segment.RegionMark{}, false, err
	}
	return *s.region, true, nil
}

// SetRegionMark implements segment.RegionMarker.
func (s *Store) SetRegionMark(ctx context.Context, m segment.RegionMark) (segment.RegionMark, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(ctx); err != nil {
		return segment.RegionMark{}, err
	}
	if s.region == nil {
		s.region = &m
	}
	return *s.region, nil
}

// Incarnation implements segment.Incarnation: it changes with each Replace.
func (s *Store) Incarnation(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLocked(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("memstore/%d", s.inc), nil
}

// Forget drops every trace of tag, row and deletion record: a store that
// lost its history (a replaced KV bucket) for tests.
func (s *Store) Forget(tag wire.Tag) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.rows, tag)
	delete(s.gone, tag)
}

// Close implements segment.Store.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

var (
	_ segment.Store        = (*Store)(nil)
	_ segment.Incarnation  = (*Store)(nil)
	_ segment.RegionMarker = (*Store)(nil)
)

// HandBack implements segment.HandBacker.
func (s *Store) HandBack(ctx context.Context, tag wire.Tag, from, to int64) error {
	if err := segment.CheckHandBack(tag, from, to); err != nil {
		return err
	}
	return s.update(ctx, tag, func(row *segment.Tag) error {
		if row.MaxID != from {
			return fmt.Errorf("%w: tag %q: max_id is %d, not %d", segment.ErrMoved, tag, row.MaxID, from)
		}
		row.MaxID = to
		return nil
	})
}

var _ segment.HandBacker = (*Store)(nil)
