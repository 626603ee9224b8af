package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/ringbuf"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// ErrClosed is returned after Close.
var ErrClosed = errors.New("producer: closed")

// Segments is what the producer needs of the segment engine.
type Segments interface {
	// Fill writes up to len(dst) ids of tag into dst, at least one, and
	// returns how many (permuted for an opaque tag).
	Fill(ctx context.Context, tag wire.Tag, dst []int64) (int, error)
	// TryFill is Fill without waiting: ok false when nothing is ready.
	TryFill(tag wire.Tag, dst []int64) (int, bool)
	// Known reports whether tag is in the engine's tag cache.
	Known(tag wire.Tag) bool
	// Warm reports whether tag has a segment loaded or loading.
	Warm(tag wire.Tag) bool
	// Tags lists the cached tags.
	Tags() []wire.Tag
}

// Config configures a Producer. Zero values mean the defaults in comments.
type Config struct {
	Segments       Segments      // required
	MinRing        int           // first ring size of a tag; default 256
	MaxRing        int           // largest ring size; default 65536
	GrowAfter      time.Duration // a ring refilled again sooner than this grows; default 200ms
	PaddingPercent int           // refill below this fill percentage; default 50
	DirectOver     int           // requests of more ids come straight from the segment buffers; default 64
	PruneInterval  time.Duration // how often rings of tags the engine dropped are freed; default 60s
	// OnEmpty, if set, is called (it must not block) when a small request
	// finds a tag's ring short of the ids it asks for: UidGenerator's
	// rejected-take hook, for events and alerts.
	OnEmpty func(tag string)
	Logger  *slog.Logger // default slog.Default()
	// Clock times the refills (GrowAfter) and the pruning (PruneInterval);
	// default clock.Real.
	Clock clock.Clock
}

// Producer owns the rings and their refill goroutines.
type Producer struct {
	cfg    Config
	log    *slog.Logger
	mu     sync.Mutex // guards rings map writes and closed; reads go through the sync.Map
	rings  sync.Map   // tag -> *tagRing
	closed atomic.Bool
	ctx    context.Context
	cancel context.CancelFunc
	growCh chan growReq  // to the grower goroutine
	done   chan struct{} // closed when the grower has returned
}

type growReq struct {
	tr  *tagRing
	old *ringbuf.Ring[int64]
}

type tagRing struct {
	tag      wire.Tag
	order    orderLock // held by a refill from Fill to put, and by the slow path
	ring     atomic.Pointer[ringbuf.Ring[int64]]
	lastFill atomic.Int64  // unix nanos of the start of the last refill
	cycle    atomic.Uint64 // the ring's refill count its last fill call saw
	growing  atomic.Bool
}

// New validates cfg and returns a Producer with no rings yet.
func New(cfg Config) (*Producer, error) {
	if cfg.Segments == nil {
		return nil, errors.New("producer: Config.Segments is required")
	}
	if cfg.MinRing == 0 {
		cfg.MinRing = 256
	}
	if cfg.MaxRing == 0 {
		cfg.MaxRing = 65536
	}
	if cfg.GrowAfter == 0 {
		cfg.GrowAfter = 200 * time.Millisecond
	}
	if cfg.PaddingPercent == 0 {
		cfg.PaddingPercent = 50
	}
	if cfg.DirectOver == 0 {
		cfg.DirectOver = 64
	}
	if cfg.PruneInterval == 0 {
		cfg.PruneInterval = 60 * time.Second
	}
	cfg.Clock = clock.Or(cfg.Clock)
	switch {
	case cfg.MinRing < 2 || cfg.MaxRing < cfg.MinRing:
		return nil, fmt.Errorf("producer: ring sizes must satisfy 2 <= MinRing (%d) <= MaxRing (%d)", cfg.MinRing, cfg.MaxRing)
	case cfg.GrowAfter < 0:
		return nil, fmt.Errorf("producer: GrowAfter %v is negative", cfg.GrowAfter)
	case cfg.PaddingPercent < 1 || cfg.PaddingPercent > 100:
		return nil, fmt.Errorf("producer: PaddingPercent %d is not 1-100", cfg.PaddingPercent)
	case cfg.PruneInterval < 0:
		return nil, fmt.Errorf("producer: PruneInterval %v is negative", cfg.PruneInterval)
	case cfg.DirectOver < 0:
		return nil, fmt.Errorf("producer: DirectOver %d is negative", cfg.DirectOver)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel,
		growCh: make(chan growReq, 64), done: make(chan struct{})}
	go p.grower()
	return p, nil
}

// grower replaces rings that drain too fast and prunes the rings of tags
// the engine no longer knows. One goroutine for all tags, so Close has a
// single thing to wait for.
func (p *Producer) grower() {
	defer close(p.done)
	prune := p.cfg.Clock.NewTicker(p.cfg.PruneInterval)
	defer prune.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case g := <-p.growCh:
			p.grow(g.tr, g.old)
		case <-prune.C():
			p.Prune()
		}
	}
}

// Prune frees the rings of tags that the engine has dropped (deleted from
// the store), so memory follows the live tags. Their remaining ids are
// lost: a gap. It returns how many rings it freed.
func (p *Producer) Prune() int {
	n := 0
	p.rings.Range(func(k, _ any) bool {
		if tag := k.(wire.Tag); !p.cfg.Segments.Known(tag) {
			p.Forget(tag)
			n++
		}
		return true
	})
	return n
}

// Preload creates and fills a ring for every tag the engine has warm (the
// ones it preloaded: recently served), so their first request does not
// wait for the store. Other tags get a ring on their first request: a
// ring filled for a tag nobody asks for would take ids from the store for
// nothing at every restart.
func (p *Producer) Preload() {
	for _, tag := range p.cfg.Segments.Tags() {
		if !p.cfg.Segments.Warm(tag) {
			continue
		}
		if _, err := p.tagRing(tag); err != nil {
			return
		}
	}
}

// Segment fills dst with fresh ids of tag: all of it, or an error.
func (p *Producer) Segment(ctx context.Context, tag wire.Tag, dst []int64) error {
	if len(dst) == 0 {
		return nil
	}
	tr, err := p.tagRing(tag)
	if err != nil {
		return err
	}
	// Singles and small batches come from the ring. A large batch is a few
	// consecutive runs straight from the segment buffers (one atomic add
	// each, never waiting for the store while they last): copying thousands
	// of ids through ring slots would cost more than it saves.
	n := 0
	if len(dst) <= p.cfg.DirectOver {
		n, _ = tr.ring.Load().TakeN(dst)
		if n == len(dst) {
			return nil
		}
		if p.cfg.OnEmpty != nil {
			p.cfg.OnEmpty(tag.String())
		}
		// The ring is short. Its refill may have drawn ids from the
		// engine that it has not put yet: wait for that chunk and take
		// it first, then draw from the engine with the refill held off,
		// so a node hands out a small request's ids in the engine's
		// order (a client that asks one id after another sees them
		// increase).
		if err := tr.order.lock(ctx); err != nil {
			return err
		}
		defer tr.order.unlock()
		m, _ := tr.ring.Load().TakeN(dst[n:])
		n += m
	}
	for n < len(dst) {
		got, err := p.cfg.Segments.Fill(ctx, tag, dst[n:])
		if err != nil {
			return err
		}
		n += got
	}
	return nil
}

// TrySegment fills a prefix of dst without waiting and returns its length:
// small requests from the tag's ring, large ones from the segment buffers'
// fast path (see Segment). 0 for a tag that has no ring yet or nothing ready.
func (p *Producer) TrySegment(tag wire.Tag, dst []int64) int {
	v, ok := p.rings.Load(tag)
	if !ok {
		return 0
	}
	if len(dst) <= p.cfg.DirectOver {
		n, _ := v.(*tagRing).ring.Load().TakeN(dst)
		if n < len(dst) && p.cfg.OnEmpty != nil {
			p.cfg.OnEmpty(tag.String())
		}
		return n
	}
	n := 0
	for n < len(dst) {
		got, ok := p.cfg.Segments.TryFill(tag, dst[n:])
		if !ok {
			break
		}
		n += got
	}
	return n
}

// tagRing returns the ring of tag, creating it on first use. Unknown tags get
// no ring: the engine is asked first, so a flood of bad tags allocates nothing.
func (p *Producer) tagRing(tag wire.Tag) (*tagRing, error) {
	if v, ok := p.rings.Load(tag); ok {
		return v.(*tagRing), nil
	}
	if p.closed.Load() {
		return nil, ErrClosed
	}
	// Let the engine decide (store lookup, auto-create, ErrUnknownTag, a
	// tag of a mode it does not serve) before a ring is made.
	probe := make([]int64, 1)
	if _, err := p.cfg.Segments.Fill(p.ctx, tag, probe); err != nil {
		return nil, err
	}
	// The probe goes first into the new ring, so no id is skipped.
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return nil, ErrClosed
	}
	if v, ok := p.rings.Load(tag); ok {
		return v.(*tagRing), nil
	}
	tr := &tagRing{tag: tag, order: make(orderLock, 1)}
	r, err := p.newRing(tr, p.cfg.MinRing)
	if err != nil {
		return nil, err
	}
	r.PutN(probe)
	tr.ring.Store(r)
	p.rings.Store(tag, tr)
	r.Start()
	return tr, nil
}

func (p *Producer) newRing(tr *tagRing, size int) (*ringbuf.Ring[int64], error) {
	return ringbuf.New(ringbuf.Config[int64]{
		Size:           size,
		PaddingPercent: p.cfg.PaddingPercent,
		Fill:           func(ctx context.Context, dst []int64) (int, error) { return p.fill(ctx, tr, dst) },
		FillLock:       tr.order,
		OnFillError: func(err error) {
			switch {
			case errors.Is(err, context.Canceled):
			case errors.Is(err, segment.ErrDomainExhausted):
				// For good, and said once by the engine; every request
				// after it would repeat it here.
				p.log.Debug("ring refill failed", "tag", tr.tag, "err", err)
			default:
				p.log.Warn("ring refill failed", "tag", tr.tag, "err", err)
			}
		},
	})
}

// fill is the rings' FillFunc: a chunk of ids from the engine, in its order.
// It also notices rings that drain too fast and grows them: a refill (not
// a chunk of one) that starts sooner than GrowAfter after the one before.
// The first fill of a ring is not a refill: a ring nobody takes from never
// grows, and takes no more ids than its first size.
func (p *Producer) fill(ctx context.Context, tr *tagRing, dst []int64) (int, error) {
	r := tr.ring.Load()
	if done := r.Refills(); done != tr.cycle.Load() { // the first chunk of a refill
		tr.cycle.Store(done)
		now := p.cfg.Clock.Now().UnixNano()
		prev := tr.lastFill.Swap(now)
		if prev != 0 && time.Duration(now-prev) < p.cfg.GrowAfter &&
			r.Cap() < p.cfg.MaxRing && tr.growing.CompareAndSwap(false, true) {
			select {
			case p.growCh <- growReq{tr, r}:
			default:
				tr.growing.Store(false)
			}
		}
	}
	return p.cfg.Segments.Fill(ctx, tr.tag, dst)
}

// grow replaces tr's ring old with one four times larger.
func (p *Producer) grow(tr *tagRing, old *ringbuf.Ring[int64]) {
	defer tr.growing.Store(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() || tr.ring.Load() != old {
		return
	}
	size := min(old.Cap()*4, p.cfg.MaxRing)
	r, err := p.newRing(tr, size)
	if err != nil {
		p.log.Error("ring grow failed", "tag", tr.tag, "err", err)
		return
	}
	// Close waits for old's refill to return (a chunk it drew and could
	// not put is dropped: a gap, never a repeat). Then, under the order
	// lock, no request draws from the engine until the move is done.
	_ = old.Close()
	tr.order.Lock()
	defer tr.order.Unlock()
	// Move what is left before the new ring fills itself, so its ids come
	// out before the fresh ones. One take, one CAS: a request that still
	// holds old gets either ids below all of them or none (and then waits
	// for the order lock). Moved a chunk at a time, a request could take
	// ids above a chunk in flight, and its next request get the chunk's
	// lower ones from the new ring
	// (TestConcurrentRequestsIncreaseWhileGrowing).
	buf := make([]int64, old.Cap())
	if n, err := old.TakeN(buf); err == nil {
		r.PutN(buf[:n])
	}
	tr.cycle.Store(0) // the new ring's first fill is not a refill
	tr.lastFill.Store(0)
	tr.ring.Store(r)
	r.Start()
	p.log.Debug("ring grown", "tag", tr.tag, "size", size)
}

// orderLock is a mutex that a request can stop waiting for. A tag's ring
// refill holds it (as ringbuf.Config.FillLock) from drawing ids from the
// engine to putting them in the ring.
type orderLock chan struct{}

func (l orderLock) Lock()   { l <- struct{}{} }
func (l orderLock) Unlock() { <-l }

func (l orderLock) lock(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l orderLock) unlock() { <-l }

// Retire closes every ring (no more refills, no more takes through it) and
// returns, by tag, the ids left in it, for a node that hands back what it
// did not serve. Call it once nothing asks the producer any more.
func (p *Producer) Retire() map[wire.Tag][]int64 {
	out := map[wire.Tag][]int64{}
	p.rings.Range(func(k, v any) bool {
		r := v.(*tagRing).ring.Load()
		_ = r.Close()
		var ids []int64
		buf := make([]int64, 256)
		for {
			n, err := r.TakeN(buf)
			if err != nil || n == 0 {
				break
			}
			ids = append(ids, buf[:n]...)
		}
		out[k.(wire.Tag)] = ids
		return true
	})
	return out
}

// RingState describes one tag's ring.
type RingState struct {
	Tag   string
	Len   int
	Cap   int
	Stats ringbuf.Stats
}

// Rings snapshots every ring, for metrics and the status page.
func (p *Producer) Rings() []RingState {
	var out []RingState
	p.rings.Range(func(k, v any) bool {
		r := v.(*tagRing).ring.Load()
		out = append(out, RingState{Tag: k.(wire.Tag).String(), Len: r.Len(), Cap: r.Cap(), Stats: r.Stats()})
		return true
	})
	return out
}

// Forget drops the ring of a tag that no longer exists.
func (p *Producer) Forget(tag wire.Tag) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.rings.LoadAndDelete(tag); ok {
		_ = v.(*tagRing).ring.Load().Close()
	}
}

// Close stops every refill goroutine and waits for them. Idempotent.
func (p *Producer) Close() error {
	p.mu.Lock()
	if p.closed.Swap(true) {
		p.mu.Unlock()
		return nil
	}
	p.cancel()
	p.rings.Range(func(_, v any) bool {
		_ = v.(*tagRing).ring.Load().Close()
		return true
	})
	p.mu.Unlock()
	<-p.done
	return nil
}

var _ Segments = (*segment.Engine)(nil)
