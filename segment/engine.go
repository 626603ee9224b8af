package segment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/wire"
)

// Defaults of Config.
const (
	DefaultLoadFactor      = 0.1
	DefaultMaxStep         = 1_000_000
	DefaultStepWindow      = 15 * time.Minute
	DefaultRefreshInterval = 60 * time.Second
	DefaultNegativeTTL     = 5 * time.Second
	DefaultMaxTags         = 10000
	DefaultReadyWait       = 50 * time.Millisecond
	DefaultColdWait        = 750 * time.Millisecond
	DefaultRetryBackoff    = 100 * time.Millisecond
	DefaultMaxRetryBackoff = time.Second
)

// negativeCap bounds the negative cache of unknown tag names.
const negativeCap = 10_000

// preloadWorkers bounds the first loads Start runs at once.
const preloadWorkers = 16

// Config configures an Engine. The zero value of every field but Store means
// its default.
type Config struct {
	// Store holds the tag rows. Required. The Engine does not close it.
	Store Store
	// LoadFactor is the share of a segment that is used when the next one
	// starts loading, in (0,1). Default 0.1 (Leaf's 10%).
	LoadFactor float64
	// MaxStep caps the dynamic step, 1..segment.MaxStep. Default
	// 1,000,000 (Leaf's MAX_STEP). A node's two segments of a tag are what
	// bridges a store outage: at a tag's 17k ids/s per node a million lasts
	// about a minute, so raise it for tags that busy.
	MaxStep int
	// StepWindow is Leaf's SEGMENT_DURATION: loads closer than this double
	// the step, loads further apart than twice this halve it. Default 15m.
	StepWindow time.Duration
	// RefreshInterval is how often the tag list is re-read from the store.
	// Default 60s; negative disables the background refresher (Refresh can
	// still be called).
	RefreshInterval time.Duration
	// NegativeTTL is how long an unknown tag name is answered with
	// ErrUnknownTag without asking the store again. Default 5s.
	NegativeTTL time.Duration
	// ReadyWait bounds how long a call waits when the tag has no id left
	// (both segments empty) or must first be looked up. Default 50ms.
	// Measured on Config.Clock's timers.
	ReadyWait time.Duration
	// RetryBackoff is the first pause after a failed load; it doubles after
	// each further failure up to MaxRetryBackoff. Defaults 100ms and 1s:
	// a tag whose buffers ran dry during an outage serves again within a
	// second of the store's return.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// AutoCreate creates a tag that the store does not know, with
	// DefaultStep, on its first request (instead of ErrUnknownTag). Any
	// valid name a client sends becomes a row: enable only where clients are
	// trusted.
	AutoCreate bool
	// DefaultStep is the step of auto-created tags. Default segment.DefaultStep.
	DefaultStep int
	// MaxTags bounds the tags the engine caches (each with its buffers and,
	// in a node, a ring), so that no client can make it allocate without
	// bound by asking for ever new tags. A tag beyond it fails with
	// ErrTagLimit; a store with more rows has only the first MaxTags (by
	// name) preloaded. Default DefaultMaxTags.
	MaxTags int
	// PreloadWindow: Start (and a refresh that finds new tags) preloads only
	// the tags this node loaded within it by traffic, as Config.Steps
	// remembers them; the rest load on their first request (ColdWait). A
	// rolling restart of N nodes over T tags then reserves ranges for the
	// tags in use, not N·T. Default StepFileMaxAge (a day, Leaf's one-day
	// key list); negative, or no Steps: preload every tag.
	PreloadWindow time.Duration
	// Steps, if set, remembers each tag's dynamic step across restarts: a
	// tag's first load asks for the remembered step (if it is from within
	// 2*StepWindow) instead of the row's, and every load is recorded. See
	// StepFile. Default nil: first loads use the row's step, as in Leaf.
	Steps Steps
	// Floors, if set, keeps each tag's floor (the highest range end this
	// node received) and the store's incarnation across restarts: see
	// FloorFile. Default: kept in memory, so they guard this process only.
	// A range that starts below its tag's floor is refused (ErrBelowFloor:
	// logged, reported in a LoadEvent, no id served from it), and once the
	// store's incarnation differs from the recorded one AutoCreate is
	// refused (ErrStoreChanged).
	Floors Floors
	// Clock is the clock of the dynamic step and the negative cache, and
	// times the waits for a segment (ReadyWait, ColdWait), the refresher,
	// Retire's wait and the default Sleep. Default clock.Real.
	Clock clock.Clock
	// Sleep waits out a retry backoff; it returns early with ctx.Err() when
	// ctx ends. Default: a timer of Clock.
	Sleep func(ctx context.Context, d time.Duration) error
	// Logger receives load failures, recoveries and tag changes. Default
	// slog.Default(); pass slog.New(slog.DiscardHandler) for silence.
	Logger *slog.Logger
	// PeerFloor, if set, is the highest floor of tag that other nodes on
	// the same store have announced (the node wires it to NATS). No range
	// below it is served: a row lowered by hand and rewritten until the
	// store's history forgot the higher max_id must not let this node
	// serve ids another node served. Unlike this node's own floor, a
	// store whose max_id lies between the two is raised to the peer's
	// floor (Store.SetMaxID) and the range taken above it: a peer's
	// hand-back this node did not hear leaves max_id there for good
	// (see Reserver). An error (the peers' floors not known now) refuses
	// the load. Called from load goroutines; must not block.
	PeerFloor func(tag string) (int64, error)
	// CreateCheck, if set, is asked before AutoCreate creates a tag the
	// store does not know; an error refuses the create. The node asks the
	// live nodes: one that has received ids of the tag means the store
	// lost it (a replaced bucket, a deleted row) and an operator must act,
	// even when this node is new and has no floor of its own.
	CreateCheck func(ctx context.Context, tag wire.Tag) error
	// ColdWait bounds how long a call for a tag that is not in the cache
	// waits for the store lookup (and AutoCreate) and the first segment;
	// a tag that is cold here is cold on every node, so failing at
	// ReadyWait would only make the caller ask again. Default 750ms, at
	// least ReadyWait: the refusal reaches a client with a 1 s deadline
	// (the availability goal) as a retryable 503, not as silence.
	ColdWait time.Duration
	// Opaque, if set, gives the permutation of an opaque tag (its mode as
	// the store records it: width and key id) over this region's local
	// numbers, [1, Regions.Last(2^Width-1)] (opaque.Key.RegionPerm; with
	// one region the whole domain, opaque.Key.Perm); an error (no key,
	// another key), or a permutation of another range, refuses the tag.
	// Without it opaque tags are refused: their ids must never be served
	// unpermuted.
	Opaque func(tag string, m Mode) (Permuter, error)
	// PeerMode, if set, is the mode (Mode.String()) in which other nodes
	// on the same store announced they serve tag, "" if none did. A node
	// refuses a tag whose store mode is another (a mode removed or edited
	// by hand), as it refuses one whose mode it recorded itself in Floors
	// (ModeKeeper). Called from load goroutines; must not block.
	PeerMode func(tag string) string
	// Announce, if set, hears the end of every range this engine
	// reserved (Reserver.Announce), once its floor is recorded and before
	// any id of it is handed out: the node tells its peers, whose
	// PeerFloor it becomes. Called from load goroutines; must not block.
	Announce Announcer
	// Regions places this region's ids in a deployment of many regions,
	// each with its own store (docs/regions.md): the ids handed out (Next,
	// Fill, TryFill, Reserve, TryReserve) are Regions.ID of the local
	// sequence numbers the store's rows count; an opaque tag's, Regions.ID
	// of their permutation within the region's share. So every id this
	// region serves, of every mode, is R mod N: no tag's mode, key or
	// width in another region's store can make an id repeat.
	// Everything kept or reported of a range stays local: max_id, the
	// floors and peer floors, LoadEvent, TagState, Unserved and the
	// hand-back, Floor. A local number whose id would pass the tag's
	// limit (2^63-1; an opaque tag's domain) is never served: the tag
	// answers ErrDomainExhausted, as an opaque tag at its domain's end.
	// The zero value is one region: ids are the local numbers.
	Regions Regions
	// OnLoad, if set, is called after every load attempt, successful (Err
	// nil) or not, from the loader goroutine, in order for each tag. A
	// successful segment is handed out only after OnLoad returns, so it
	// must not block.
	OnLoad func(LoadEvent)
}

// Permuter maps an opaque tag's local sequence numbers [1, Max()] one to
// one onto the same range (package opaque); the engine maps the value onto
// an id as it maps a plain tag's local number (Regions.ID). With one region
// Max is the domain's 2^W-1 and the value is the id itself.
type Permuter interface {
	Permute(seq int64) int64
	Max() int64
}

// LoadEvent describes one attempt to load a segment.
type LoadEvent struct {
	Tag        string
	Start, End int64 // ids [Start, End) granted by the store; zero on failure
	// Step is the size of the segment granted; on failure, the step asked
	// for (0 for a first load that uses the row's step).
	Step     int
	PrevStep int // step of the previous load; 0 for a tag's first load
	Took     time.Duration
	Err      error  // nil on success
	Mode     string // the tag's mode (Mode.String()) on success
}

// SegmentState is one half of a tag's double buffer.
type SegmentState struct {
	Value int64 // next id to hand out (Max when exhausted)
	Max   int64 // one past the last id
	Step  int   // size of the segment as loaded
	Ready bool  // the segment has ids left
}

// TagState is a snapshot of a tag's buffer for status pages (Leaf's
// /cache page).
type TagState struct {
	Tag      string
	Segments [2]SegmentState // Segments[Current] is the current segment
	Current  int
	Step     int // step of the last load
	MinStep  int // step column of the row, as of the last load
	Loading  bool
	LastLoad time.Time // Config.Clock of the last successful load; zero before
	Loads    int       // successful loads
	// LastError is the error of the last load attempt, "" after a success.
	LastError string
	// Headroom is how many of the tag's local numbers are left above
	// the ranges this node reserved, before the tag's domain ends
	// (2^63-1, or an opaque tag's 2^W-1, over Config.Regions): a tag's
	// capacity runway. -1 before the first load.
	Headroom int64
}

// Engine hands out ids of Leaf-segment tags. It is safe for concurrent use.
type Engine struct {
	cfg   Config
	store Store
	res   *Reserver // every load reserves through it
	clock clock.Clock
	sleep func(context.Context, time.Duration) error
	log   *slog.Logger

	ctx    context.Context // canceled by Close; parent of every goroutine's context
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the engine started

	startMu sync.Mutex   // serializes Start
	lifeMu  sync.RWMutex // guards closed and started, and wg.Add against Close's wg.Wait
	closed  bool
	started bool
	done    atomic.Bool // closed, read on the hot path

	// tags is the tag cache: an immutable map replaced (copy on write) under
	// mu and read lock-free by every call.
	tags atomic.Pointer[map[string]*tagBuf]
	mu   sync.Mutex // serializes writers of tags; guards gen
	gen  uint64     // bumped for every tag added to the cache

	missMu   sync.Mutex
	negative map[string]negEntry // unknown tag name -> expiry (Now) and answer
	negCap   int
	inflight map[string]*lookup // store lookups under way, by tag name

	// replaced, once set, is why AutoCreate is refused: the store's
	// incarnation is not the one recorded in Config.Floors.
	replaced atomic.Pointer[error]
}

// lookup is one store lookup of a tag missing from the cache, shared by all
// callers asking for the name meanwhile.
type lookup struct {
	done chan struct{} // closed when t and err are set
	t    *tagBuf
	err  error
	// stale: the tag was created while the lookup was under way (Forget),
	// so its store read may predate the create: its miss is not cached,
	// and no later request waits on it. Guarded by Engine.missMu.
	stale bool
}

// New checks cfg, fills its defaults and returns an Engine. Call Start to
// load the tags; Close to stop it.
func New(cfg Config) (*Engine, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		store:    cfg.Store,
		clock:    cfg.Clock,
		sleep:    cfg.Sleep,
		log:      cfg.Logger,
		negative: make(map[string]negEntry),
		negCap:   negativeCap,
		inflight: make(map[string]*lookup),
	}
	e.res = &Reserver{Store: cfg.Store, Floors: cfg.Floors, PeerFloor: cfg.PeerFloor, Announce: cfg.Announce, Logger: cfg.Logger,
		Replaced: func(old, cur string) { _ = e.markReplaced(old, cur) }}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.tags.Store(&map[string]*tagBuf{})
	return e, nil
}

func (c *Config) fill() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: segment config: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if c.Store == nil {
		return bad("Store is required")
	}
	if c.LoadFactor == 0 {
		c.LoadFactor = DefaultLoadFactor
	}
	if math.IsNaN(c.LoadFactor) || c.LoadFactor <= 0 || c.LoadFactor >= 1 {
		return bad("LoadFactor %v must be in (0,1)", c.LoadFactor)
	}
	if c.MaxStep == 0 {
		c.MaxStep = DefaultMaxStep
	}
	if c.MaxStep < 1 || c.MaxStep > MaxStep {
		return bad("MaxStep %d must be 1-%d", c.MaxStep, MaxStep)
	}
	durations := []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"StepWindow", &c.StepWindow, DefaultStepWindow},
		{"NegativeTTL", &c.NegativeTTL, DefaultNegativeTTL},
		{"ReadyWait", &c.ReadyWait, DefaultReadyWait},
		{"ColdWait", &c.ColdWait, DefaultColdWait},
		{"RetryBackoff", &c.RetryBackoff, DefaultRetryBackoff},
		{"MaxRetryBackoff", &c.MaxRetryBackoff, DefaultMaxRetryBackoff},
	}
	for _, f := range durations {
		if *f.d == 0 {
			*f.d = f.def
		}
		if *f.d < 0 {
			return bad("%s %v must not be negative", f.name, *f.d)
		}
	}
	c.ColdWait = max(c.ColdWait, c.ReadyWait)
	if c.PreloadWindow == 0 {
		c.PreloadWindow = StepFileMaxAge
	}
	if c.MaxRetryBackoff < c.RetryBackoff {
		return bad("MaxRetryBackoff %v is below RetryBackoff %v", c.MaxRetryBackoff, c.RetryBackoff)
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.DefaultStep == 0 {
		c.DefaultStep = DefaultStep
	}
	if c.MaxTags == 0 {
		c.MaxTags = DefaultMaxTags
	}
	if c.MaxTags < 1 {
		return bad("MaxTags %d must be positive", c.MaxTags)
	}
	if err := CheckStep(c.DefaultStep); err != nil {
		return fmt.Errorf("segment config: DefaultStep: %w", err)
	}
	c.Clock = clock.Or(c.Clock)
	if c.Sleep == nil {
		c.Sleep = sleeper(c.Clock)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Floors == nil {
		c.Floors = newMemFloors()
	}
	if err := c.Regions.Check(); err != nil {
		return fmt.Errorf("segment config: %w", err)
	}
	return nil
}

// sleeper is the default Sleep: a timer of c.
func sleeper(c clock.Clock) func(context.Context, time.Duration) error {
	return func(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, c, d) }
}

// Start lists the tags of the store, preloads the first segment of each
// (several at a time; a tag whose load fails keeps retrying in the
// background and does not fail Start) and starts the refresher. It fails
// when the store cannot be listed; it may then be called again. Calls
// before Start work too, finding tags one by one as on a cache miss.
func (e *Engine) Start(ctx context.Context) error {
	e.startMu.Lock()
	defer e.startMu.Unlock()
	e.lifeMu.RLock()
	closed, started := e.closed, e.started
	e.lifeMu.RUnlock()
	if closed {
		return ErrClosed
	}
	if started {
		return fmt.Errorf("%w: segment engine already started", ErrInvalid)
	}
	if err := e.checkIncarnation(ctx); err != nil && !errors.Is(err, ErrStoreChanged) {
		return err
	}
	added, err := e.refresh(ctx, false)
	if err != nil {
		return err
	}
	e.lifeMu.Lock()
	if e.closed {
		e.lifeMu.Unlock()
		return ErrClosed
	}
	e.started = true
	e.lifeMu.Unlock()
	if e.cfg.RefreshInterval > 0 {
		e.spawn(e.refresher)
	}

	// Preload with a few workers; each waits for its tag's first attempt.
	cached := len(added)
	added = slices.DeleteFunc(added, func(t *tagBuf) bool { return !e.recent(t.name) })
	work := make(chan *tagBuf)
	var wg sync.WaitGroup
	for range min(preloadWorkers, len(added)) {
		wg.Go(func() {
			for t := range work {
				t.triggerLoad()
				select {
				case <-t.firstDone:
				case <-ctx.Done():
				case <-e.ctx.Done():
				}
			}
		})
	}
feed:
	for _, t := range added {
		select {
		case work <- t:
		case <-ctx.Done():
			break feed
		case <-e.ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	failed := 0
	for _, t := range added {
		if t.cur.Load() == nil {
			failed++
		}
	}
	if e.done.Load() {
		return ErrClosed
	}
	e.log.Info("segment: engine started", "tags", cached, "preloaded", len(added), "failed_preloads", failed)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("segment: preloading tags: %w", err)
	}
	return nil
}

// Close stops the refresher and the loaders and waits for them, and
// flushes Config.Floors if it has a Flush method (FloorFile). The store is
// left open. The first call returns nil, later ones ErrClosed; calls that are
// waiting return ErrClosed.
func (e *Engine) Close() error {
	e.lifeMu.Lock()
	if e.closed {
		e.lifeMu.Unlock()
		return ErrClosed
	}
	e.closed = true
	e.done.Store(true)
	e.lifeMu.Unlock()
	e.cancel()
	e.wg.Wait()
	if f, ok := e.cfg.Floors.(interface{ Flush() error }); ok {
		if err := f.Flush(); err != nil {
			e.log.Error("segment: writing the tag floors", "err", err)
		}
	}
	return nil
}

// spawn runs f in a goroutine owned by the engine, unless it is closed.
func (e *Engine) spawn(f func()) bool {
	e.lifeMu.RLock()
	defer e.lifeMu.RUnlock()
	if e.closed {
		return false
	}
	e.wg.Go(f)
	return true
}

func (e *Engine) emit(ev LoadEvent) {
	if e.cfg.OnLoad != nil {
		e.cfg.OnLoad(ev)
	}
}

// Next returns one id of tag.
func (e *Engine) Next(ctx context.Context, tag wire.Tag) (int64, error) {
	var id [1]int64
	_, err := e.Fill(ctx, tag, id[:])
	return id[0], err
}

// Fill writes up to len(dst) (>= 1) ids of tag into dst and returns how
// many: ids of one segment, as Reserve takes them, permuted for an opaque
// tag. It waits and fails as Reserve does; a monotonic tag fails with
// ErrMode, naming its subject.
func (e *Engine) Fill(ctx context.Context, tag wire.Tag, dst []int64) (int, error) {
	first, n, t, err := e.reserve(ctx, tag, len(dst))
	if err != nil {
		return 0, err
	}
	write(t, first, n, dst)
	return n, nil
}

// TryFill is Fill's fast path alone, as TryReserve is Reserve's.
func (e *Engine) TryFill(tag wire.Tag, dst []int64) (int, bool) {
	if len(dst) < 1 || e.done.Load() {
		return 0, false
	}
	t := (*e.tags.Load())[tag.String()]
	if t == nil {
		return 0, false
	}
	first, n, ok := t.take(len(dst))
	if !ok {
		return 0, false
	}
	write(t, first, n, dst)
	return n, true
}

// write puts the ids of local sequence numbers [first, first+n) of t into
// dst: the one place where a local number becomes an id (Config.Regions).
// An opaque tag's local number is permuted within the region's share
// first, then mapped as any other: every id is R mod N, whatever mode,
// key or width the tag has in another region's store, and at most 2^W-1
// (the permutation stays within [1, Regions.Last(2^W-1)], checked when
// the mode is set).
func write(t *tagBuf, first int64, n int, dst []int64) {
	rg := t.e.cfg.Regions
	// The mode is set before the tag's first segment is installed, and
	// never changes after.
	if m := t.mode.Load(); m != nil && m.perm != nil {
		for i := range n {
			dst[i] = rg.ID(m.perm.Permute(first + int64(i)))
		}
		return
	}
	if !rg.Many() {
		for i := range n {
			dst[i] = first + int64(i)
		}
		return
	}
	for i := range n {
		dst[i] = rg.ID(first + int64(i))
	}
}

// Reserve hands out up to max (>= 1) consecutive ids of tag: [first,
// first+n) with 1 <= n <= max. It takes them from the current segment only,
// so n is below max near the end of a segment; call again for more.
//
// The common case is one atomic add, without a lock. When both segments are
// empty Reserve waits at most Config.ReadyWait, then fails with an error
// wrapping ErrNotReady and the last load error (if any). Other errors wrap
// ErrInvalid (the zero Tag, or a bad max), ErrUnknownTag, ErrClosed or ctx.Err().
//
// An opaque tag's ids are not consecutive: Reserve refuses it with
// ErrMode (use Fill), as it refuses a monotonic tag. With many regions
// (Config.Regions) no two ids of a region are consecutive: n is 1.
func (e *Engine) Reserve(ctx context.Context, tag wire.Tag, max int) (first int64, n int, err error) {
	if e.cfg.Regions.Many() {
		max = min(max, 1)
	}
	first, n, t, err := e.reserve(ctx, tag, max)
	if err != nil {
		return 0, 0, err
	}
	if m := t.mode.Load(); m != nil && m.perm != nil {
		return 0, 0, fmt.Errorf("%w: tag %q is opaque: its ids are permuted, not consecutive (use Fill)", ErrMode, tag)
	}
	return e.cfg.Regions.ID(first), n, nil
}

func (e *Engine) reserve(ctx context.Context, tag wire.Tag, max int) (int64, int, *tagBuf, error) {
	if max < 1 {
		return 0, 0, nil, fmt.Errorf("%w: reserve %d ids: must be at least 1", ErrInvalid, max)
	}
	if e.done.Load() {
		return 0, 0, nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, nil, err
	}
	t := (*e.tags.Load())[tag.String()]
	if t != nil {
		if first, n, ok := t.take(max); ok {
			return first, n, t, nil
		}
	}
	return e.reserveSlow(ctx, t, tag, max)
}

// TryReserve is Reserve's fast path alone: up to max consecutive ids of
// tag from its current segment, or ok false, without ever waiting, looking a
// tag up or starting anything but the next segment's load. Callers fall back
// to Reserve when it fails. An opaque tag is never ok. With many regions
// n is 1, as in Reserve.
func (e *Engine) TryReserve(tag wire.Tag, max int) (first int64, n int, ok bool) {
	if max < 1 || e.done.Load() {
		return 0, 0, false
	}
	if e.cfg.Regions.Many() {
		max = 1
	}
	if t := (*e.tags.Load())[tag.String()]; t != nil {
		if m := t.mode.Load(); m != nil && m.perm != nil {
			return 0, 0, false
		}
		if first, n, ok = t.take(max); ok {
			return e.cfg.Regions.ID(first), n, true
		}
	}
	return 0, 0, false
}

// budget is the ReadyWait of one call, its timer started on first use.
type budget struct {
	d time.Duration
	c clock.Clock
	t clock.Timer
}

func (b *budget) C() <-chan time.Time {
	if b.t == nil {
		b.t = b.c.NewTimer(b.d)
	}
	return b.t.C()
}

func (b *budget) stop() {
	if b.t != nil {
		b.t.Stop()
	}
}

func (e *Engine) reserveSlow(ctx context.Context, t *tagBuf, tag wire.Tag, max int) (int64, int, *tagBuf, error) {
	first, n, err := e.reserveWait(ctx, &t, tag, max)
	return first, n, t, err
}

func (e *Engine) reserveWait(ctx context.Context, tp **tagBuf, tag wire.Tag, max int) (int64, int, error) {
	b := &budget{d: e.cfg.ReadyWait, c: e.clock}
	defer b.stop()
	t := *tp
	if t == nil {
		b.d = e.cfg.ColdWait // at least ReadyWait (Config)
		var err error
		if t, err = e.miss(ctx, tag, b); err != nil {
			return 0, 0, err
		}
		*tp = t
	}
	for {
		if first, n, ok := t.take(max); ok {
			return first, n, nil
		}
		if e.done.Load() {
			return 0, 0, ErrClosed
		}
		if m := t.mode.Load(); m != nil && m.refuse != nil {
			return 0, 0, m.refuse
		}
		t.mu.Lock()
		if t.switchLocked() {
			t.mu.Unlock()
			continue
		}
		if t.removed {
			err := t.lastErr
			t.mu.Unlock()
			if errors.Is(err, ErrUnknownTag) {
				return 0, 0, err
			}
			return 0, 0, fmt.Errorf("%w: %q (dropped from the cache)", ErrUnknownTag, tag)
		}
		if err := t.exhausted; err != nil {
			t.mu.Unlock()
			return 0, 0, err
		}
		t.startLoadLocked()
		if t.sleeping {
			// The last load failed and the loader is backing off: no
			// point in waiting.
			err := t.notReadyLocked("segments empty, store failing")
			t.mu.Unlock()
			return 0, 0, err
		}
		changed := t.changed
		t.mu.Unlock()
		select {
		case <-changed:
		case <-b.C():
			if first, n, ok := t.take(max); ok {
				return first, n, nil
			}
			t.mu.Lock()
			err := t.notReadyLocked(fmt.Sprintf("no segment within %v", b.d))
			t.mu.Unlock()
			return 0, 0, err
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("segment: tag %q: waiting for a segment: %w", tag, ctx.Err())
		case <-e.ctx.Done():
			return 0, 0, ErrClosed
		}
	}
}

func (t *tagBuf) notReadyLocked(why string) error {
	if t.lastErr != nil {
		return fmt.Errorf("%w: tag %q: %s: %w", ErrNotReady, t.name, why, t.lastErr)
	}
	return fmt.Errorf("%w: tag %q: %s", ErrNotReady, t.name, why)
}

// miss finds a tag that is not in the cache: from the negative cache, or by
// asking the store (one lookup per name at a time, awaited at most until b).
func (e *Engine) miss(ctx context.Context, tag wire.Tag, b *budget) (*tagBuf, error) {
	if err := needTag(tag); err != nil {
		return nil, err
	}
	e.missMu.Lock()
	if t := (*e.tags.Load())[tag.String()]; t != nil {
		e.missMu.Unlock()
		return t, nil
	}
	if neg, ok := e.negative[tag.String()]; ok {
		if e.clock.Now().Before(neg.exp) {
			e.missMu.Unlock()
			return nil, neg.err
		}
		delete(e.negative, tag.String())
	}
	l := e.inflight[tag.String()]
	if l == nil {
		l = &lookup{done: make(chan struct{})}
		// The goroutine needs missMu to finish, so it cannot finish
		// before l is in inflight.
		if !e.spawn(func() { e.lookup(tag, l) }) {
			e.missMu.Unlock()
			return nil, ErrClosed
		}
		e.inflight[tag.String()] = l
	}
	e.missMu.Unlock()
	select {
	case <-l.done:
		if l.err != nil && e.done.Load() {
			return nil, ErrClosed // the lookup failed because Close canceled it
		}
		return l.t, l.err
	case <-b.C():
		return nil, fmt.Errorf("%w: tag %q: store lookup took longer than %v", ErrNotReady, tag, b.d)
	case <-ctx.Done():
		return nil, fmt.Errorf("segment: tag %q: looking it up: %w", tag, ctx.Err())
	case <-e.ctx.Done():
		return nil, ErrClosed
	}
}

// lookup asks the store for a tag missing from the cache and, when it
// exists (or AutoCreate made it), adds it and starts its first load.
func (e *Engine) lookup(tag wire.Tag, l *lookup) {
	if n := len(*e.tags.Load()); n >= e.cfg.MaxTags {
		e.missMu.Lock()
		if e.inflight[tag.String()] == l {
			delete(e.inflight, tag.String())
		}
		l.err = fmt.Errorf("%w: this node holds its maximum of %d tags; %q is not one of them", ErrTagLimit, e.cfg.MaxTags, tag)
		close(l.done)
		e.missMu.Unlock()
		return
	}
	row, err := e.store.Get(e.ctx, tag)
	if errors.Is(err, ErrUnknownTag) && e.cfg.AutoCreate {
		row, err = e.autoCreate(tag)
	}
	var t *tagBuf
	unknown := false
	switch {
	case err == nil:
		t = e.addTag(tag)
		if row.Mode.Kind == KindMono {
			_ = t.setMode(row.Mode) // refused before a range is taken for it
		}
		t.triggerLoad()
	case errors.Is(err, ErrTagDeleted), errors.Is(err, ErrStoreChanged):
		unknown = true // an operator must act: do not ask again at once
		e.log.Error("segment: refusing to auto-create a tag", "tag", tag, "err", err)
	case errors.Is(err, ErrUnknownTag):
		unknown = true
		err = fmt.Errorf("%w: %q", ErrUnknownTag, tag)
	default:
		err = fmt.Errorf("%w: tag %q: looking it up: %w", ErrNotReady, tag, err)
	}
	e.missMu.Lock()
	if unknown && !l.stale {
		e.addNegativeLocked(tag.String(), err)
	}
	if e.inflight[tag.String()] == l {
		delete(e.inflight, tag.String())
	}
	l.t, l.err = t, err
	close(l.done)
	e.missMu.Unlock()
}

// autoCreate creates tag for AutoCreate, unless the store was replaced
// since this node served from it, or the store remembers the tag (a
// deleted tag is never brought back at 1: ErrTagDeleted).
//
// It returns the tag's row when another node created the tag first (its
// mode, say), else the zero Tag.
func (e *Engine) autoCreate(tag wire.Tag) (Tag, error) {
	if err := e.checkIncarnation(e.ctx); err != nil {
		return Tag{}, fmt.Errorf("segment: tag %q: %w", tag, err)
	}
	if e.cfg.CreateCheck != nil {
		if err := e.cfg.CreateCheck(e.ctx, tag); err != nil {
			// A live node's floor may be of the tag as another node
			// created it while the check waited for a slow member: then
			// the store has it now, at or above that floor. Refused
			// without a second look, a new tag would answer 404 "deleted"
			// for NegativeTTL.
			var pf *PeerFloorError
			if errors.As(err, &pf) {
				if row, gerr := e.store.Get(e.ctx, tag); gerr == nil && row.MaxID >= pf.Floor {
					return row, nil
				}
			}
			return Tag{}, err
		}
	}
	err := e.store.Create(e.ctx, Tag{Name: tag, Step: e.cfg.DefaultStep, Description: "created by leafmq (AutoCreate)"})
	switch {
	case err == nil:
		e.log.Info("segment: created tag", "tag", tag, "step", e.cfg.DefaultStep)
	case errors.Is(err, ErrTagExists):
		// Another node was quicker.
		if row, gerr := e.store.Get(e.ctx, tag); gerr == nil {
			return row, nil
		}
		err = nil
	}
	return Tag{}, err
}

// checkIncarnation compares the store's incarnation with the one recorded
// in Config.Floors: it records it when there is none, and returns (and
// keeps returning) an error wrapping ErrStoreChanged once they differ.
// Stores that do not implement Incarnation pass.
func (e *Engine) checkIncarnation(ctx context.Context) error {
	if p := e.replaced.Load(); p != nil {
		return *p
	}
	is, ok := e.store.(Incarnation)
	if !ok {
		return nil
	}
	cur, err := is.Incarnation(ctx)
	if err != nil {
		return fmt.Errorf("segment: reading the store's incarnation: %w", err)
	}
	old := e.cfg.Floors.Incarnation()
	switch {
	case old == "":
		if err := e.cfg.Floors.SetIncarnation(cur); err != nil {
			e.log.Error("segment: recording the store's incarnation", "err", err)
		}
		return nil
	case old == cur:
		return nil
	}
	return e.markReplaced(old, cur)
}

// markReplaced turns auto-create off for good (until an operator acts): the
// store is now cur, not old, the one this node served from. It is called
// by checkIncarnation and by the Reserver, which finds a replacement under
// a range in flight. It returns the error auto-create answers from then on.
func (e *Engine) markReplaced(old, cur string) error {
	rerr := fmt.Errorf("%w: this node served from %q, the store is now %q; auto-create is off until an operator "+
		"restarts the tags (leafctl tag restart TAG --floor N) and, with each node stopped, removes the \"store\" "+
		"entry from its segment-floors.json (the floors stay)", ErrStoreChanged, old, cur)
	if e.replaced.CompareAndSwap(nil, &rerr) {
		e.log.Error("segment: the store was replaced", "recorded", old, "now", cur, "err", rerr)
	}
	return *e.replaced.Load()
}

// negEntry is a negative cache entry: the answer to repeat until exp.
type negEntry struct {
	exp time.Time
	err error
}

func (e *Engine) addNegativeLocked(tag string, err error) {
	now := e.clock.Now()
	if len(e.negative) >= e.negCap {
		for name, neg := range e.negative {
			if !now.Before(neg.exp) {
				delete(e.negative, name)
			}
		}
		for name := range e.negative {
			if len(e.negative) < e.negCap {
				break
			}
			delete(e.negative, name) // arbitrary victim
		}
	}
	e.negative[tag] = negEntry{exp: now.Add(e.cfg.NegativeTTL), err: err}
}

// addTag puts tag in the cache (or returns the entry already there).
func (e *Engine) addTag(tag wire.Tag) *tagBuf {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := *e.tags.Load()
	if t := old[tag.String()]; t != nil {
		return t
	}
	m := make(map[string]*tagBuf, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	e.gen++
	t := newTagBuf(e, tag, e.gen)
	m[tag.String()] = t
	e.tags.Store(&m)
	return t
}

// forget drops t from the cache, if it is still there.
func (e *Engine) forget(t *tagBuf) {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := *e.tags.Load()
	if old[t.name] != t {
		return
	}
	m := make(map[string]*tagBuf, len(old))
	for k, v := range old {
		if k != t.name {
			m[k] = v
		}
	}
	e.tags.Store(&m)
}

// Refresh re-reads the tag list from the store now: new tags are added and
// their first segment loaded in the background; deleted tags are dropped.
// The refresher calls it every RefreshInterval.
func (e *Engine) Refresh(ctx context.Context) error {
	if e.done.Load() {
		return ErrClosed
	}
	_, err := e.refresh(ctx, true)
	return err
}

func (e *Engine) refresh(ctx context.Context, preload bool) ([]*tagBuf, error) {
	e.mu.Lock()
	gen := e.gen
	e.mu.Unlock()
	names, err := e.store.Tags(ctx)
	if err != nil {
		return nil, fmt.Errorf("segment: listing tags: %w", err)
	}
	want := make(map[string]wire.Tag, len(names))
	sort.Strings(names)
	skipped := 0
	for _, name := range names {
		tag, err := wire.ParseTag(name) // a name read from the store
		if err != nil {
			e.log.Warn("segment: ignoring a tag with an invalid name", "tag", name)
			continue
		}
		if len(want) >= e.cfg.MaxTags {
			skipped++
			continue
		}
		want[name] = tag
	}
	if skipped > 0 {
		e.log.Warn("segment: the store has more tags than MaxTags; the rest are not cached", "max_tags", e.cfg.MaxTags, "skipped", skipped)
	}

	e.mu.Lock()
	old := *e.tags.Load()
	m := make(map[string]*tagBuf, len(want))
	var added, removed []*tagBuf
	for name, tag := range want {
		if t := old[name]; t != nil {
			m[name] = t
			continue
		}
		e.gen++
		t := newTagBuf(e, tag, e.gen)
		m[name] = t
		added = append(added, t)
	}
	for name, t := range old {
		switch {
		case !want[name].IsZero():
		case t.gen > gen:
			m[name] = t // added after the listing began: keep it
		default:
			removed = append(removed, t)
		}
	}
	if len(added) > 0 || len(removed) > 0 {
		e.tags.Store(&m)
	}
	e.mu.Unlock()

	sort.Slice(added, func(i, j int) bool { return added[i].name < added[j].name })
	for _, t := range removed {
		t.remove()
		e.log.Info("segment: tag dropped", "tag", t.name)
	}
	if len(added) > 0 {
		e.missMu.Lock()
		for _, t := range added {
			delete(e.negative, t.name)
		}
		e.missMu.Unlock()
	}
	for _, t := range added {
		if preload {
			e.log.Info("segment: tag added", "tag", t.name)
			if e.recent(t.name) {
				t.triggerLoad()
			}
		}
	}
	return added, nil
}

// recent reports whether tag is to be preloaded (Config.PreloadWindow).
func (e *Engine) recent(tag string) bool {
	if e.cfg.Steps == nil || e.cfg.PreloadWindow < 0 {
		return true
	}
	_, at, ok := e.cfg.Steps.Recall(tag)
	return ok && e.clock.Now().Sub(at) < e.cfg.PreloadWindow
}

func (e *Engine) refresher() {
	tick := e.clock.NewTicker(e.cfg.RefreshInterval)
	defer tick.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C():
			if err := e.Refresh(e.ctx); err != nil && e.ctx.Err() == nil {
				e.log.Warn("segment: refreshing tags failed", "err", err)
			}
		}
	}
}

// Tags returns the cached tags, sorted by name.
func (e *Engine) Tags() []wire.Tag {
	m := *e.tags.Load()
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	tags := make([]wire.Tag, len(names))
	for i, name := range names {
		tags[i] = m[name].tag
	}
	return tags
}

// Warm reports whether tag has a segment loaded or loading: the tags
// Start preloaded (Config.PreloadWindow) and those asked for since.
func (e *Engine) Warm(tag wire.Tag) bool {
	t := (*e.tags.Load())[tag.String()]
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.loads > 0 || t.loading
}

// retireWait bounds how long Retire waits for the loads in flight.
const retireWait = 2 * time.Second

// Unserved is the top of the last range a node reserved for a tag that no
// caller took: ids [To, From), From being the range's end (the store's
// max_id unless another node reserved since).
type Unserved struct {
	Tag      wire.Tag
	From, To int64
	Opaque   bool // the ids handed out were permuted: a ring holds no sequence numbers
}

// Retire stops the engine from handing out any more ids or loading any
// more segments, and reports for each tag the ids at the top of its last
// range that no caller took, for a hand-back (HandBacker). A load under
// way is waited for (retireWait in all); a tag whose load has not ended by
// then, or is retrying a failure, is left out: the range it will get is
// unknown. Call it once nothing asks the engine any more; Close afterwards.
func (e *Engine) Retire() []Unserved {
	var out []Unserved
	deadline := e.clock.Now().Add(retireWait)
	for _, t := range *e.tags.Load() {
		if u, ok := t.retire(deadline); ok {
			out = append(out, u)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag.String() < out[j].Tag.String() })
	return out
}

// Forget drops what the engine remembers of tag's absence (the negative
// cache, and a store lookup under way, whose read may predate the create),
// so that every request for it from the return on asks the store afresh:
// the tag was just created (wire.TagChangedPrefix). The creating node
// replies to the create only once each live node returned from Forget
// (responder Config.TellTag): none answers 404 for the tag after that.
func (e *Engine) Forget(tag string) {
	e.missMu.Lock()
	delete(e.negative, tag)
	if l := e.inflight[tag]; l != nil {
		l.stale = true
		delete(e.inflight, tag)
	}
	e.missMu.Unlock()
}

// Known reports whether tag is in the cache (it does not ask the store).
func (e *Engine) Known(tag wire.Tag) bool {
	return (*e.tags.Load())[tag.String()] != nil
}

// State returns a snapshot of tag's buffer; false if tag is not cached.
func (e *Engine) State(tag string) (TagState, bool) {
	t := (*e.tags.Load())[tag]
	if t == nil {
		return TagState{}, false
	}
	return t.state(), true
}

// Floor is the highest range end this node has received for tag (from
// Config.Floors, raised before any id of a range is handed out), 0 if none.
func (e *Engine) Floor(tag string) int64 { return e.cfg.Floors.Floor(tag) }
