package mono

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// Defaults of Config.
const (
	DefaultStep = 1000
)

// Config configures a Leader.
type Config struct {
	Tag  wire.Tag // required
	Node string   // the holder name in the lease; required
	// Ranges is where ranges are reserved: a *segment.Reserver on the
	// segment store, which takes each above the tag's floors, records and
	// announces it. Required.
	Ranges Ranges
	Lease  Lease // required
	// Step is the ids reserved per range. Default DefaultStep.
	Step int
	// Margin: the leader stops serving this long before the lease it holds
	// could expire (against clocks that run at different rates and the
	// time a renewal takes to reach the lease store). Default TTL/5.
	Margin time.Duration
	// Renew is how often the lease is renewed. Default TTL/3; below
	// TTL-Margin.
	Renew time.Duration
	// Retry is how often a follower tries to acquire a held lease. Default
	// min(TTL/3, 500ms): a new leader within TTL+Retry of a crash.
	Retry time.Duration
	// Clock is the clock of the fence, of which only differences of
	// readings are used, and of the waits between renewals and attempts.
	// Default clock.Real (whose readings carry Go's monotonic clock). It
	// must not be stepped.
	Clock clock.Clock
	// Hold, if set, is an extra wait before each attempt to acquire the
	// lease: a node that leads many tags holds back, so that nodes leading
	// fewer win the free leases and leadership spreads.
	Hold func() time.Duration
	// Regions places this region's ids in a deployment of many regions
	// (segment.Config.Regions): the ranges, the store's max_id and the
	// floors count local sequence numbers, and Next hands out their
	// Regions.ID, still strictly increasing. The zero value: one region.
	Regions segment.Regions
	// OnLeading, if set, is called from the Leader's goroutine when it
	// starts (true) and stops (false) leading. It must not block for long.
	OnLeading func(leading bool)
	// Gone, if set, is called on a goroutine of its own when a
	// reservation finds the tag gone from the store (its row deleted by
	// hand, or by Store.Delete): the Server then stops this Leader, which hands
	// its lease back, rather than hold it, serving nothing, until its next
	// look at the store's tags.
	Gone   func()
	Logger *slog.Logger
}

// Ranges reserves ranges of a tag's ids; *segment.Reserver implements it.
type Ranges interface {
	// Reserve takes the next range of step ids of tag, above every id
	// reserved before it.
	Reserve(ctx context.Context, tag wire.Tag, step int) (segment.Alloc, error)
}

// span is a range of ids [next, end) reserved under grant generation gen.
type span struct {
	next, end int64
	gen       uint64
}

func (s span) empty() bool { return s.next >= s.end }

// Leader competes for the lease of one monotonic tag and, while it holds
// it, serves the tag's ids in strictly increasing order (Next). Safe for
// concurrent use.
type Leader struct {
	cfg   Config
	mono0 time.Time
	log   *slog.Logger

	mu      sync.Mutex
	grant   *Grant
	gen     uint64        // bumped at every acquire and every loss
	fence   time.Duration // serve while since(mono0) < fence; 0 when not leading
	from    time.Duration // and since(mono0) >= from (Grant.Wait)
	cur     span
	next    span
	loading bool
	began   time.Duration // since(mono0) when the load in flight began
	loaded  chan struct{} // closed when a load in flight ends
	loadErr error
	// exhausted, once set, is why no range is reserved any more: the
	// store's max_id passed the last local number whose id fits an int64
	// (Config.Regions). Next answers it once the ranges are used up.
	exhausted error
	// refused, while set, is why the last acquire failed for good: a lease
	// store that cannot grant (its bucket unusable), on every node alike,
	// so that the tag has no leader anywhere until an operator acts. Dry
	// says so.
	refused error

	yield chan time.Duration // Yield's requests to Run
	stop  chan struct{}
	done  chan struct{}
}

// NewLeader checks cfg and returns a Leader; Run makes it compete.
func NewLeader(cfg Config) (*Leader, error) {
	switch {
	case cfg.Ranges == nil || cfg.Lease == nil:
		return nil, fmt.Errorf("%w: mono: Ranges and Lease are required", segment.ErrInvalid)
	case cfg.Node == "":
		return nil, fmt.Errorf("%w: mono: Node is required", segment.ErrInvalid)
	}
	if cfg.Tag.IsZero() {
		return nil, fmt.Errorf("%w: mono: Tag is required", segment.ErrInvalid)
	}
	if err := cfg.Regions.Check(); err != nil {
		return nil, fmt.Errorf("mono: %w", err)
	}
	ttl := cfg.Lease.TTL()
	if cfg.Step == 0 {
		cfg.Step = DefaultStep
	}
	if err := segment.CheckStep(cfg.Step); err != nil {
		return nil, err
	}
	if cfg.Margin == 0 {
		cfg.Margin = ttl / 5
	}
	if cfg.Renew == 0 {
		cfg.Renew = ttl / 3
	}
	if cfg.Retry == 0 {
		cfg.Retry = min(ttl/3, 500*time.Millisecond)
	}
	if cfg.Margin <= 0 || cfg.Renew <= 0 || cfg.Retry <= 0 || cfg.Renew >= ttl-cfg.Margin {
		return nil, fmt.Errorf("%w: mono: need 0 < Renew (%v) < TTL (%v) - Margin (%v), Retry %v > 0",
			segment.ErrInvalid, cfg.Renew, ttl, cfg.Margin, cfg.Retry)
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Leader{cfg: cfg, mono0: cfg.Clock.Now(), log: cfg.Logger.With("tag", cfg.Tag),
		loaded: make(chan struct{}), yield: make(chan time.Duration, 1), stop: make(chan struct{}), done: make(chan struct{})}, nil
}

func (l *Leader) since() time.Duration { return l.cfg.Clock.Since(l.mono0) }

// Leading reports whether the Leader may serve now.
func (l *Leader) Leading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leadingLocked()
}

func (l *Leader) leadingLocked() bool {
	now := l.since()
	return l.fence > 0 && now < l.fence && now >= l.from
}

// dryAfter is how long a leader may wait for a range with none left
// before Dry says so: a reservation takes one store round trip. The
// responder refuses a request after as long (monoRangeWait): readiness
// says so from when requests start getting 503s.
const dryAfter = 400 * time.Millisecond

// Dry reports why a leading Leader cannot hand out ids now: it has none
// left and its last reservation failed, or one has been under way for
// dryAfter (a store that does not answer); or why one without a lease
// cannot get one (its last acquire failed with segment.ErrInvalid). ""
// when it has ids, or does not lead for any other reason (another node
// holds the lease, the store is unreachable).
func (l *Leader) Dry() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.grant == nil && l.refused != nil {
		return "no lease can be acquired: " + l.refused.Error()
	}
	if !l.leadingLocked() || !l.cur.empty() || !l.next.empty() {
		return ""
	}
	switch {
	case l.loading && l.since()-l.began >= dryAfter:
		return fmt.Sprintf("no ids left, a range asked of the store %v ago", (l.since() - l.began).Round(time.Millisecond))
	case !l.loading && l.loadErr != nil:
		return "no ids left, the last range failed: " + l.loadErr.Error()
	}
	return ""
}

// Next takes up to n (≥ 1) ids, each larger than every id any leader of
// the tag handed out before this call began. It returns the first and the
// count of a run of consecutive ids, which may be fewer than n at the end
// of a range; with many regions (Config.Regions) no two ids are
// consecutive, and the run is of one. It waits (bounded by ctx) for a range
// after a switch-over; it fails with ErrNotLeader when this node does not
// lead the tag, and with an error wrapping segment.ErrDomainExhausted once
// the tag has no id left that fits an int64.
func (l *Leader) Next(ctx context.Context, n int) (int64, int, error) {
	if n < 1 {
		return 0, 0, fmt.Errorf("%w: mono: n %d must be at least 1", segment.ErrInvalid, n)
	}
	for {
		l.mu.Lock()
		if !l.leadingLocked() {
			l.mu.Unlock()
			return 0, 0, fmt.Errorf("%w: %q", ErrNotLeader, l.cfg.Tag)
		}
		if l.cur.empty() && !l.next.empty() {
			l.cur, l.next = l.next, span{}
		}
		if !l.cur.empty() {
			first := l.cur.next
			k := int(min(int64(n), l.cur.end-first))
			if l.cfg.Regions.Many() {
				k = 1
			}
			l.cur.next += int64(k)
			if l.next.empty() && l.cur.end-l.cur.next < int64(l.cfg.Step)/2 {
				l.loadLocked()
			}
			l.mu.Unlock()
			return l.cfg.Regions.ID(first), k, nil
		}
		if err := l.exhausted; err != nil {
			l.mu.Unlock()
			return 0, 0, err
		}
		l.loadLocked()
		wait, lastErr := l.loaded, l.loadErr
		l.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			if lastErr != nil {
				return 0, 0, fmt.Errorf("mono: tag %q: waiting for a range: %w (last load: %w)", l.cfg.Tag, ctx.Err(), lastErr)
			}
			return 0, 0, fmt.Errorf("mono: tag %q: waiting for a range: %w", l.cfg.Tag, ctx.Err())
		}
	}
}

// loadLocked starts reserving a range under the current grant, unless one
// is on its way. Called with mu held, while leading.
func (l *Leader) loadLocked() {
	if l.loading || l.exhausted != nil {
		return
	}
	l.loading = true
	gen, began := l.gen, l.since()
	l.began = began
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), max(l.cfg.Lease.TTL(), 5*time.Second))
		a, err := l.cfg.Ranges.Reserve(ctx, l.cfg.Tag, l.cfg.Step)
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.loading = false
		l.loadErr = err
		close(l.loaded)
		l.loaded = make(chan struct{})
		if err != nil {
			l.log.Warn("mono: reserving a range failed", "err", err)
			if l.cfg.Gone != nil && (errors.Is(err, segment.ErrUnknownTag) || errors.Is(err, segment.ErrTagDeleted)) {
				go l.cfg.Gone()
			}
			return
		}
		// Local numbers past top have ids past 2^63-1: the range is cut
		// there, and no more is reserved (the store's max_id is past top
		// for good). With one region no range reaches past top.
		end := a.End()
		if top := l.cfg.Regions.Last(math.MaxInt64); end-1 > top {
			end = max(top+1, a.Start())
			l.exhausted = fmt.Errorf("%w: monotonic tag %q has handed out every id of region %d of %d below 2^63 (its last range was [%d,%d), cut at %d)",
				segment.ErrDomainExhausted, l.cfg.Tag, l.cfg.Regions.R, l.cfg.Regions.N, a.Start(), a.End(), top+1)
			l.log.Error("mono: the tag's ids are exhausted", "err", l.exhausted)
		}
		// A range reserved under an earlier grant is never served: a
		// leader in between may have served ids above it. Nor is one
		// whose reservation began before the grant's Wait ended: the
		// previous holder may have reserved (and served) above it since.
		if gen != l.gen || !l.leadingLocked() || began < l.from {
			return
		}
		s := span{next: a.Start(), end: end, gen: gen}
		if l.cur.empty() {
			l.cur = s
		} else {
			l.next = s
		}
	}()
}

// Run competes for the lease and keeps it renewed until ctx ends or Close;
// then it stops serving and releases the lease, so that another node takes
// over at once. It returns when done.
func (l *Leader) Run(ctx context.Context) {
	defer close(l.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var confirmed, retryAt time.Duration // since(mono0): the last acquire/renewal sent; a renewal retry
	var idleUntil time.Duration          // since(mono0): no acquire before it (Yield)
	for ctx.Err() == nil {
		l.mu.Lock()
		g := l.grant
		l.mu.Unlock()
		if g == nil {
			if wait := idleUntil - l.since(); wait > 0 {
				if d, ok := l.sleep(ctx, wait); ok {
					idleUntil = l.since() + d
				}
				continue
			}
			if l.cfg.Hold != nil {
				if l.sleep(ctx, l.cfg.Hold()); ctx.Err() != nil {
					break
				}
			}
			sent := l.since()
			ng, err := l.cfg.Lease.Acquire(ctx, l.cfg.Tag.String(), l.cfg.Node)
			l.mu.Lock()
			l.refused = nil
			if errors.Is(err, segment.ErrInvalid) {
				l.refused = err
			}
			l.mu.Unlock()
			if err == nil {
				l.lead(ng, sent)
				confirmed = sent
				continue
			}
			if !errors.Is(err, ErrHeld) && ctx.Err() == nil {
				l.log.Warn("mono: acquiring the lease failed", "err", err)
			}
			if d, ok := l.sleep(ctx, l.cfg.Retry+time.Duration(rand.Int64N(int64(l.cfg.Retry/4)+1))); ok {
				idleUntil = l.since() + d
			}
			continue
		}
		if d, ok := l.sleep(ctx, max(confirmed+l.cfg.Renew, retryAt)-l.since()); ok {
			// Yield: stop serving, hand the lease back, stay out for d.
			l.stepDown("yielding the tag to a node that leads fewer")
			l.release(*g)
			idleUntil = l.since() + d
			continue
		}
		if ctx.Err() != nil {
			break
		}
		sent := l.since()
		ng, err := l.cfg.Lease.Renew(ctx, *g)
		switch {
		case err == nil:
			retryAt = 0
			l.mu.Lock()
			if l.grant != nil {
				l.grant = &ng
				l.fence = sent + l.cfg.Lease.TTL() - l.cfg.Margin
			}
			l.mu.Unlock()
			confirmed = sent
		case errors.Is(err, ErrLost):
			l.stepDown("lease lost: " + err.Error())
		case l.since() >= confirmed+l.cfg.Lease.TTL()-l.cfg.Margin:
			l.stepDown("lease not renewed in time: " + err.Error())
		default:
			l.log.Warn("mono: renewing the lease failed; retrying", "err", err)
			retryAt = l.since() + l.cfg.Renew/4
		}
	}
	l.mu.Lock()
	g := l.grant
	l.mu.Unlock()
	l.stepDown("stopping")
	if g != nil {
		l.release(*g)
	}
}

// release hands g back so that another node takes over at once.
func (l *Leader) release(g Grant) {
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer rcancel()
	if err := l.cfg.Lease.Release(rctx, g); err != nil && !errors.Is(err, ErrLost) {
		l.log.Warn("mono: releasing the lease failed; it expires by itself", "err", err)
	}
}

// Yield makes a leading Leader stop serving and release the lease, and
// not compete for it for d: how a node that leads more than its share of
// the tags hands one to another node. A Leader that does not lead stays
// out for d; a second Yield before Run takes the first is dropped.
func (l *Leader) Yield(d time.Duration) {
	select {
	case l.yield <- d:
	default:
	}
}

// lead makes g the current grant, sent being when its acquire was sent.
func (l *Leader) lead(g Grant, sent time.Duration) {
	l.mu.Lock()
	l.grant = &g
	l.gen++
	l.fence = sent + l.cfg.Lease.TTL() - l.cfg.Margin
	l.from = sent + g.Wait
	l.cur, l.next = span{}, span{}
	if g.Wait <= 0 {
		l.loadLocked() // a fresh range, above anything an earlier leader served
	}
	l.mu.Unlock()
	l.log.Info("mono: leading", "node", l.cfg.Node)
	if l.cfg.OnLeading != nil {
		l.cfg.OnLeading(true)
	}
}

// stepDown stops serving at once and drops the ranges.
func (l *Leader) stepDown(why string) {
	l.mu.Lock()
	was := l.grant != nil
	l.grant = nil
	l.gen++
	l.fence = 0
	l.cur, l.next = span{}, span{}
	l.mu.Unlock()
	if !was {
		return
	}
	l.log.Info("mono: not leading", "node", l.cfg.Node, "why", why)
	if l.cfg.OnLeading != nil {
		l.cfg.OnLeading(false)
	}
}

// sleep waits d, or until ctx ends or a Yield comes (ok true, with its
// duration).
func (l *Leader) sleep(ctx context.Context, d time.Duration) (yield time.Duration, ok bool) {
	if d <= 0 {
		return 0, false
	}
	t := l.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-ctx.Done():
	case y := <-l.yield:
		return y, true
	}
	return 0, false
}

// Close stops Run (releasing the lease) and waits for it. Call it only
// after Run was started.
func (l *Leader) Close() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}
