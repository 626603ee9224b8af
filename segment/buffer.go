package segment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafmq/leafmq/wire"
)

// maxEmptyLoads bounds how many segments in a row may hold no id >= 1 before
// the loader reports an error and backs off (only a store with a negative
// max_id can produce them).
const maxEmptyLoads = 16

// span is one segment: the ids [lo, end) of one Alloc, with the ids below 1
// cut off. lo, end, mark and step never change after newSpan; a span is
// published through tagBuf.cur (an atomic.Pointer) or under tagBuf.mu, both
// of which order the initialisation before any read.
type span struct {
	lo, end int64 // ids [lo, end); lo >= 1; lo >= end means no id at all
	top     int64 // Alloc.End: the store's max_id after the allocation; above end when end was clamped to an opaque domain
	mark    int64 // taking the id mark-1 starts loading the next segment
	step    int   // Alloc.Step
	// final, when set, is the error once this span is used up: an opaque
	// tag's domain ends within it (end was clamped to the domain).
	final error

	// cursor is the next id to hand out. Callers reserve [old, old+k) with
	// one atomic add, so the ranges of concurrent callers never overlap
	// (the add is a single linearizable read-modify-write). It may run past
	// end by at most one k per concurrent caller (see take), and may even
	// wrap around to a negative value when end is near MaxInt64; both are
	// read as "exhausted" because a valid cursor lies in [lo, end).
	cursor atomic.Int64
}

func newSpan(a Alloc, loadFactor float64) *span {
	return newSpanTo(a, loadFactor, a.End())
}

// newSpanTo is newSpan with the ids cut off at end (<= a.End()).
func newSpanTo(a Alloc, loadFactor float64, end int64) *span {
	s := &span{lo: max(a.Start(), 1), end: end, top: a.End(), step: a.Step}
	s.mark = s.end
	if s.lo < s.end {
		s.mark = s.lo + markCount(s.end-s.lo, loadFactor)
	}
	s.cursor.Store(s.lo)
	return s
}

// markCount is how many ids of a segment of size ids are used when the next
// segment starts loading: ceil(size*f), but a product that is an integer up
// to rounding error (2000*0.1) counts as that integer; at least 1, at most
// size.
func markCount(size int64, f float64) int64 {
	x := float64(size) * f
	r := math.Round(x)
	m := int64(math.Ceil(x))
	if math.Abs(x-r) <= 1e-9*math.Max(1, x) {
		m = int64(r)
	}
	return min(max(m, 1), size)
}

// take reserves up to k (>= 1) consecutive ids. ok is false when the span is
// exhausted.
func (s *span) take(k int64) (first, n int64, ok bool) {
	if size := s.end - s.lo; k > size {
		k = size // also bounds how far the cursor can run past end
	}
	if k <= 0 {
		return 0, 0, false
	}
	// The load is only a filter that keeps callers from pushing the cursor
	// further once it is past end; correctness rests on the add below.
	if c := s.cursor.Load(); c < s.lo || c >= s.end {
		return 0, 0, false
	}
	old := s.cursor.Add(k) - k // exact even if the add wrapped around
	if old < s.lo || old >= s.end {
		return 0, 0, false
	}
	return old, min(k, s.end-old), true
}

// remaining is the number of ids left.
func (s *span) remaining() int64 {
	if s == nil {
		return 0
	}
	c := s.cursor.Load()
	if c < s.lo || c >= s.end {
		return 0
	}
	return s.end - c
}

func (s *span) state() SegmentState {
	if s == nil {
		return SegmentState{}
	}
	st := SegmentState{Value: s.end, Max: s.end, Step: s.step}
	if c := s.cursor.Load(); c >= s.lo && c < s.end {
		st.Value, st.Ready = c, true
	}
	return st
}

// nextStep is Leaf's dynamic step: since is the time since the previous
// load, minStep the step column of the row. The result is never below
// minStep (an improvement on Leaf, where a raised table step only took effect
// once the dynamic step caught up).
// maxGrowth bounds how much the step grows in one load; growth beyond
// Leaf's 2x needs loads at least minGrowthSpan apart: a shorter gap is a
// burst (a ring's first fill, one large batch), not a rate.
const (
	maxGrowth     = 16
	minGrowthSpan = time.Second
)

func nextStep(step, minStep, maxStep int, since, window time.Duration) int {
	switch {
	case since < window:
		// Leaf doubles. Here a segment used up much faster than the window,
		// but over a second or more, grows more, by the power of two
		// nearest below window/since, at most 16x: a node under heavy load
		// reaches a step that lasts in a few loads instead of ten, so its
		// buffers outlast a store outage sooner.
		factor := int64(2)
		if since >= minGrowthSpan {
			for factor < maxGrowth && time.Duration(factor*2) <= window/since {
				factor *= 2
			}
		}
		// Leaf keeps the step when doubling would pass MAX_STEP, so a table
		// step of 2000 tops out at 512,000; clamping reaches the cap and
		// with it one store transaction per MaxStep ids under load.
		step = int(min(int64(step)*factor, int64(maxStep)))
	case since < 2*window:
	default:
		if step/2 >= minStep {
			step /= 2
		}
	}
	return max(step, minStep)
}

// tagBuf is the double buffer of one tag (Leaf's SegmentBuffer).
//
// Lock order: Engine.mu before tagBuf.mu; Engine.lifeMu is taken last (by
// spawn). Engine.missMu is never held together with Engine.mu or tagBuf.mu.
type tagBuf struct {
	e      *Engine
	name   string
	tag    wire.Tag           // name, checked
	gen    uint64             // Engine.gen when the tag was added to the cache
	ctx    context.Context    // canceled when the tag is dropped or the engine closes
	cancel context.CancelFunc // cancels ctx

	// cur is the current segment, read lock-free on the hot path and
	// written under mu.
	cur atomic.Pointer[span]
	// firstDone is closed when the first load attempt has finished.
	firstDone chan struct{}
	// mode is the tag's mode, set once (setMode) by its first load or
	// lookup, before any id of it is handed out; read lock-free.
	mode atomic.Pointer[tagMode]

	mu        sync.Mutex
	next      *span         // the next segment, nil until loaded
	pos       int           // index of cur in TagState.Segments; flips on a switch
	loading   bool          // a loader goroutine is running
	sleeping  bool          // the loader is waiting out a backoff after a failure
	removed   bool          // dropped from the cache; no more loads
	step      int           // step of the last load (0 before the first)
	minStep   int           // step column of the row, as of the last load
	loads     int           // successful store allocations
	failures  int           // failed load attempts since the last success
	lastLoad  time.Time     // Config.Clock at the last successful load
	lastErr   error         // error of the last attempt; nil after a success
	exhausted error         // set with a span whose final is set: no more loads, and the answer once the spans are used up
	changed   chan struct{} // closed and replaced whenever an attempt finishes
	firstSeen bool          // firstDone is closed
}

func newTagBuf(e *Engine, tag wire.Tag, gen uint64) *tagBuf {
	ctx, cancel := context.WithCancel(e.ctx)
	return &tagBuf{
		e: e, name: tag.String(), tag: tag, gen: gen, ctx: ctx, cancel: cancel,
		firstDone: make(chan struct{}),
		changed:   make(chan struct{}),
	}
}

// take is the hot path: up to k ids from the current segment, no lock. The
// one caller whose reservation covers the id at the load mark starts the
// loader; ranges are disjoint, so exactly one caller per segment does.
func (t *tagBuf) take(k int) (int64, int, bool) {
	s := t.cur.Load()
	if s == nil {
		return 0, 0, false
	}
	first, n, ok := s.take(int64(k))
	if !ok {
		return 0, 0, false
	}
	if first < s.mark && first+n >= s.mark {
		t.triggerLoad()
	}
	return first, int(n), true
}

func (t *tagBuf) triggerLoad() {
	t.mu.Lock()
	t.startLoadLocked()
	t.mu.Unlock()
}

// startLoadLocked starts the loader unless one runs or the next segment is
// already there.
func (t *tagBuf) startLoadLocked() {
	if t.loading || t.removed || t.next != nil || t.exhausted != nil {
		return
	}
	if m := t.mode.Load(); m != nil && m.refuse != nil {
		return // a monotonic tag, or an opaque one this node cannot serve
	}
	if t.e.spawn(t.loadLoop) {
		t.loading = true
	}
}

// switchLocked makes the next segment current when the current one is
// exhausted. It reports whether the current segment has ids now.
func (t *tagBuf) switchLocked() bool {
	cur := t.cur.Load()
	if cur.remaining() > 0 {
		return true
	}
	if t.next == nil {
		return false
	}
	if cur != nil {
		t.pos ^= 1
	}
	t.cur.Store(t.next)
	t.next = nil
	return true
}

func (t *tagBuf) notifyLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
	if !t.firstSeen {
		t.firstSeen = true
		close(t.firstDone)
	}
}

// remove drops the tag: the loader stops and waiters get ErrUnknownTag once
// the segments are empty.
func (t *tagBuf) remove() {
	t.mu.Lock()
	t.removed = true
	t.notifyLocked()
	t.mu.Unlock()
	t.cancel()
}

// loadLoop loads one segment, retrying failures with capped exponential
// backoff until it succeeds, the tag is dropped or the engine closes.
func (t *tagBuf) loadLoop() {
	e := t.e
	backoff := e.cfg.RetryBackoff
	empty := 0
	for {
		s, ev, err := t.attempt()
		if err == nil && s.lo >= s.end {
			empty++
			if empty < maxEmptyLoads {
				e.log.Debug("segment: skipped a segment without ids >= 1", "tag", t.name, "start", ev.Start, "end", ev.End)
				e.emit(ev)
				continue
			}
			err = fmt.Errorf("%w: tag %q: %d segments in a row without ids >= 1 (last [%d,%d))", ErrInvalid, t.name, empty, ev.Start, ev.End)
			ev.Err = err
		}
		if err == nil {
			// Emit before installing: once loading is false another
			// loader may start and emit, and events of a tag must come in
			// order.
			e.log.Debug("segment: loaded", "tag", t.name, "start", ev.Start, "end", ev.End, "step", ev.Step, "took", ev.Took)
			e.emit(ev)
			t.mu.Lock()
			if s.final != nil {
				t.exhausted = s.final
			}
			if cur := t.cur.Load(); cur.remaining() == 0 {
				if cur != nil {
					t.pos ^= 1
				}
				t.cur.Store(s)
			} else {
				t.next = s
			}
			failures := t.failures
			t.failures, t.lastErr, t.loading = 0, nil, false
			t.notifyLocked()
			t.mu.Unlock()
			if failures > 0 {
				e.log.Info("segment: load recovered", "tag", t.name, "failures", failures)
			}
			return
		}

		stopping := t.ctx.Err() != nil
		unknown := !stopping && errors.Is(err, ErrUnknownTag)
		m := t.mode.Load()
		refused := !stopping && (errors.Is(err, ErrMode) || m != nil && m.refuse != nil && errors.Is(err, m.refuse))
		t.mu.Lock()
		t.failures++
		failures := t.failures
		t.lastErr = err
		if stopping || unknown || refused {
			t.loading = false
			t.removed = t.removed || unknown
		} else {
			t.sleeping = true
		}
		t.notifyLocked()
		t.mu.Unlock()
		if stopping {
			return // closing or dropped: not a load failure worth reporting
		}
		e.emit(ev)
		if refused {
			return // no more loads (tagMode.refuse); callers get the reason
		}
		if unknown {
			e.log.Warn("segment: tag deleted from the store; dropping it", "tag", t.name)
			e.forget(t)
			t.cancel()
			return
		}
		lvl := slog.LevelWarn
		if failures > 1 {
			lvl = slog.LevelDebug
		}
		e.log.Log(t.ctx, lvl, "segment: load failed; retrying", "tag", t.name, "err", err, "failures", failures, "backoff", backoff)
		serr := e.sleep(t.ctx, backoff)
		t.mu.Lock()
		t.sleeping = false
		if serr != nil || t.ctx.Err() != nil {
			t.loading = false
			t.notifyLocked()
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		backoff = min(2*backoff, e.cfg.MaxRetryBackoff)
	}
}

// attempt asks the store for one segment and records the new step.
func (t *tagBuf) attempt() (*span, LoadEvent, error) {
	e := t.e
	t.mu.Lock()
	first := t.loads == 0
	prev := t.step
	step := prev
	if !first {
		step = nextStep(prev, t.minStep, e.cfg.MaxStep, e.clock.Now().Sub(t.lastLoad), e.cfg.StepWindow)
	}
	t.mu.Unlock()
	recalled, recalledAt := 0, time.Time{}
	if first {
		recalled, recalledAt = recallStep(e.cfg.Steps, t.name, e.clock.Now(), e.cfg.StepWindow, e.cfg.MaxStep)
		step = recalled
	}

	ev := LoadEvent{Tag: t.name, Step: step, PrevStep: prev}
	began := e.clock.Now()
	var end int64  // where the span's ids end when not at a.End() (the end of the tag's domain)
	var last error // the span's final
	// The mode is checked before the floor is raised: a mode this node
	// keeps goes to disk with the floor's write.
	a, err := e.res.reserve(t.ctx, t.tag, step, func(a Alloc) error {
		if err := t.setMode(a.Mode); err != nil {
			return err
		}
		m := t.mode.Load()
		// The ids of a tag are Regions.ID of its local numbers, those of
		// an opaque tag permuted first within [1, Max]: the local
		// numbers served end at top, the last whose id is within the
		// limit (one region, a plain tag: 2^63-1, which no range passes).
		top := t.top(m)
		if a.End()-1 <= top {
			return nil
		}
		what := fmt.Sprintf("tag %q has handed out every id of region %d of %d below 2^63", t.name, e.cfg.Regions.R, e.cfg.Regions.N)
		if m.perm != nil {
			what = fmt.Sprintf("opaque tag %q has handed out every id of its %d-bit domain", t.name, m.mode.Width)
			if e.cfg.Regions.Many() {
				what += fmt.Sprintf(" in region %d of %d", e.cfg.Regions.R, e.cfg.Regions.N)
			}
		}
		// A range that reaches past top is served up to top and no
		// further; the store's max_id and this node's floor stay at the
		// range's end, past the domain, so no later load, here or on
		// another node, after a restart or not, can start inside it.
		domain := top + 1
		if a.Start() >= domain {
			err := fmt.Errorf("%w: %s (its sequence is at %d, past %d)", ErrDomainExhausted, what, a.Start(), top)
			t.mode.Store(&tagMode{mode: m.mode, perm: m.perm, refuse: err})
			return err
		}
		last = fmt.Errorf("%w: %s (its last range was [%d,%d), cut at %d)", ErrDomainExhausted, what, a.Start(), a.End(), domain)
		end = domain
		e.log.Warn("segment: a tag's domain ends within this range", "tag", t.name, "mode", m.mode.String(),
			"start", a.Start(), "end", a.End(), "ids_left", domain-max(a.Start(), 1))
		return nil
	})
	ev.Took = e.clock.Since(began)
	if err != nil {
		ev.Err = fmt.Errorf("segment: loading tag %q: %w", t.name, err)
		return nil, ev, ev.Err
	}

	t.mu.Lock()
	t.step = a.Step
	if a.TableStep > 0 {
		t.minStep = a.TableStep
	} else if first {
		t.minStep = a.Step
		if recalled > 0 { // the row's step is unknown
			t.minStep = 1
		}
	}
	t.lastLoad = e.clock.Now()
	t.loads++
	at := t.lastLoad
	t.mu.Unlock()
	if recalled > 0 {
		// A load made because the node started says nothing about traffic:
		// keep the hint's age, so that restarts alone (a crash loop, an idle
		// tag) do not keep a big step alive past 2*StepWindow.
		at = recalledAt
	}
	if e.cfg.Steps != nil {
		e.cfg.Steps.Remember(t.name, a.Step, at)
	}
	if recalled > 0 {
		e.log.Debug("segment: first load with the remembered step", "tag", t.name, "step", a.Step)
	}
	ev.Start, ev.End, ev.Step = a.Start(), a.End(), a.Step
	ev.Mode = t.mode.Load().mode.String()
	if end == 0 {
		return newSpan(a, e.cfg.LoadFactor), ev, nil
	}
	sp := newSpanTo(a, e.cfg.LoadFactor, end)
	sp.final = last
	return sp, ev, nil
}

// retire stops the tag (no load, no take) and reports its unserved top.
func (t *tagBuf) retire(deadline time.Time) (Unserved, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removed = true // no load starts from now on
	// A load in flight (the next segment, asked for as the current one
	// ran low) is waited for until deadline: its range is then known and
	// handed back with the rest (a stop in the middle of one handed back
	// nothing: CI saw the next restart start 663 ids on).
	for t.loading && !t.sleeping {
		ch := t.changed
		t.mu.Unlock()
		timer := t.e.clock.NewTimer(t.e.clock.Until(deadline))
		select {
		case <-ch:
		case <-timer.C():
		}
		timer.Stop()
		t.mu.Lock()
		if !t.e.clock.Now().Before(deadline) {
			break
		}
	}
	// Push each cursor to its span's end: a take from now on gets nothing,
	// and the swap returns the first id no take reserved.
	free := func(s *span) int64 {
		c := s.cursor.Swap(s.end)
		if c < s.lo || c > s.end {
			return s.end
		}
		return c
	}
	cur, next := t.cur.Load(), t.next
	var curFree int64
	if cur != nil {
		curFree = free(cur)
	}
	if next != nil {
		_ = free(next)
	}
	if t.loading {
		return Unserved{}, false
	}
	u := Unserved{Tag: t.tag}
	if m := t.mode.Load(); m != nil {
		if m.refuse != nil && m.perm == nil {
			return Unserved{}, false // a tag this node never served
		}
		u.Opaque = m.perm != nil
	}
	switch {
	case next != nil:
		u.From, u.To = next.top, next.lo
		if cur != nil && cur.end == next.lo { // no one reserved between them
			u.To = curFree
		}
	case cur != nil:
		u.From, u.To = cur.top, curFree
	default:
		return Unserved{}, false
	}
	return u, true
}

// tagMode is what a tag's mode means to this engine.
type tagMode struct {
	mode   Mode
	perm   Permuter // an opaque tag's permutation
	refuse error    // why the engine serves none of the tag's ids
}

// setMode records m, the tag's mode as the store reports it, on the first
// call; it returns why the engine will not serve the tag (a monotonic tag,
// an opaque one without its key), or, when m is not the mode recorded
// before, an error wrapping ErrMode: a tag's mode never changes, and ids
// of one mode are never served as another's.
func (t *tagBuf) setMode(m Mode) error {
	e := t.e
	if m.IsSegment() {
		m = Mode{Kind: KindSegment}
	}
	if had := t.mode.Load(); had != nil {
		if !had.mode.Equal(m) {
			err := fmt.Errorf("%w: tag %q: the store now reports mode %s, this node served it as %s: no id is served from it",
				ErrMode, t.name, m, had.mode)
			e.log.Error("segment: a tag's mode changed in the store", "tag", t.name, "was", had.mode.String(), "now", m.String())
			// The segments already loaded stay as they were (perm kept);
			// no more are loaded.
			t.mode.Store(&tagMode{mode: had.mode, perm: had.perm, refuse: err})
			return err
		}
		return had.refuse
	}
	tm := &tagMode{mode: m}
	keeper, _ := e.cfg.Floors.(ModeKeeper)
	var known, peer string
	if keeper != nil {
		known, _ = keeper.Mode(t.name)
	}
	if e.cfg.PeerMode != nil {
		peer = e.cfg.PeerMode(t.name)
	}
	switch {
	case known != "" && known != m.String():
		tm.refuse = fmt.Errorf("%w: tag %q: the store reports mode %s, but this node served it as %s (recorded with its floors): "+
			"a mode never changes; no id is served", ErrMode, t.name, m, known)
	case peer != "" && peer != m.String():
		tm.refuse = fmt.Errorf("%w: tag %q: the store reports mode %s, but other nodes serve it as %s: "+
			"a mode never changes; no id is served", ErrMode, t.name, m, peer)
	}
	switch {
	case tm.refuse != nil:
	case m.Kind == KindSegment:
	case m.Kind == KindMono:
		tm.refuse = fmt.Errorf("%w: tag %q is monotonic (strictly increasing): ask %s%s", ErrMode, t.name, wire.MonoPrefix, t.name)
	case m.Kind == KindOpaque:
		if e.cfg.Opaque == nil {
			tm.refuse = fmt.Errorf("%w: tag %q is opaque and this node has no opaque key", ErrNoKey, t.name)
			break
		}
		if rg := e.cfg.Regions; rg.Many() && rg.Last(1<<m.Width-1) < MinOpaqueShare {
			// A 400, not ErrNoKey's 503: no node and no retry can serve it.
			tm.refuse = fmt.Errorf("%w: opaque tag %q: its %d-bit domain leaves region %d of %d only %d ids, fewer than %d: it needs a wider domain",
				ErrMode, t.name, m.Width, rg.R, rg.N, rg.Last(1<<m.Width-1), MinOpaqueShare)
			break
		}
		p, err := e.cfg.Opaque(t.name, m)
		if err != nil {
			tm.refuse = fmt.Errorf("%w: opaque tag %q: %w", ErrNoKey, t.name, err)
			break
		}
		// A permutation of any other range would put ids past 2^W-1 (or,
		// with one region, leave ids of the domain unserved).
		if share := e.cfg.Regions.Last(1<<m.Width - 1); p.Max() != share {
			tm.refuse = fmt.Errorf("%w: opaque tag %q: its permutation is of [1, %d], not of region %d of %d's share of the %d-bit domain, [1, %d]",
				ErrMode, t.name, p.Max(), e.cfg.Regions.R, e.cfg.Regions.N, m.Width, share)
			break
		}
		tm.perm = p
	default:
		tm.refuse = fmt.Errorf("%w: tag %q has mode %q, which this node does not know", ErrMode, t.name, m.Kind)
	}
	if !t.mode.CompareAndSwap(nil, tm) {
		return t.setMode(m) // set meanwhile by the lookup
	}
	if keeper != nil && known == "" && (peer == "" || peer == m.String()) {
		keeper.KeepMode(t.name, m.String())
	}
	if tm.refuse != nil && m.Kind != KindMono {
		e.log.Error("segment: refusing a tag", "tag", t.name, "err", tm.refuse)
	}
	return tm.refuse
}

// top is the last local number a tag of mode m may serve: the one whose
// id is the last within its limit (2^63-1; an opaque tag's 2^W-1, the
// last local number its permutation takes, Regions.Last(2^W-1)).
func (t *tagBuf) top(m *tagMode) int64 {
	if m.perm != nil {
		return m.perm.Max()
	}
	return t.e.cfg.Regions.Last(math.MaxInt64)
}

func (t *tagBuf) state() TagState {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := TagState{
		Tag:      t.name,
		Current:  t.pos,
		Step:     t.step,
		MinStep:  t.minStep,
		Loading:  t.loading,
		LastLoad: t.lastLoad,
		Loads:    t.loads,
	}
	if t.lastErr != nil {
		st.LastError = t.lastErr.Error()
	}
	st.Segments[t.pos] = t.cur.Load().state()
	st.Segments[1-t.pos] = t.next.state()
	st.Headroom = -1
	if m := t.mode.Load(); m != nil && t.loads > 0 {
		st.Headroom = max(t.top(m)-max(st.Segments[0].Max, st.Segments[1].Max)+1, 0)
	}
	return st
}
