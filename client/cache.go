package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// exhausted is stored in batch.next to drop what is left of a batch. Adding
// to it cannot overflow: each taker adds at most a max batch.
const exhausted = 1 << 62

// errDead: the cache was evicted or closed while a caller waited on it.
var errDead = errors.New("cache dropped")

// batch is the reply of one refill. Its ids are never written after it is
// published; takers reserve indices with one atomic add on next, so each
// index goes to exactly one taker.
type batch struct {
	next    atomic.Int64 // index of the next id to hand out; >= len(ids) when used up
	ids     []int64
	mark    int64         // the taker of this index asks for a refill check
	expires time.Duration // since Client.start; 0 = never (segment ids)
}

// cache holds the prefetched ids of one tag, or of snowflake.
//
// The hot path (take1, takeN) touches only cur, the batch it points to and
// touched, without a lock. Everything else is guarded by mu, which takers
// take only at a batch's mark, when cur is used up, and to wait.
//
// Memory order: a batch is fully built (ids, mark, expires) before it is
// stored in cur or queue under mu; cur.Load is an acquire of that store, so
// a taker sees the batch complete. next is the only field written after
// publication, and only by atomic add (takers) or store (dropping it).
type cache struct {
	c       *Client
	key     string // the tag; "" for snowflake
	subject string
	snow    bool
	cur     atomic.Pointer[batch] // the batch ids are taken from; nil when none
	touched atomic.Bool           // used since the last sweep
	ctx     context.Context       // ends this cache's refills (eviction or Close)
	cancel  context.CancelFunc

	_ [64]byte // keep mu and its fields off the line takers read

	mu        sync.Mutex
	dead      bool     // evicted or closed: no more refills, nothing to take
	queue     []*batch // arrived batches behind cur, in order
	queued    int      // ids in queue
	inflight  int      // refills running
	pending   int      // ids asked for by refills running
	installed int64    // ids ever added
	dropped   int64    // ids dropped unused (expired, idle)
	rate      float64  // estimated ids/s taken
	sampleAt  time.Time
	sampleN   int64         // ids taken by sampleAt
	waiters   int           // callers waiting in wait
	ready     chan struct{} // closed (and set to nil) when waiters should look again
	err       error         // the last refill that failed for good, for waiters
	errGen    uint64        // counts such failures
	lastErr   error         // the last failed attempt
	lastUse   time.Time     // guarded by Client.mu, not mu: set by sweeps
}

func (c *Client) newCache(key, subject string, snow bool) *cache {
	t := &cache{c: c, key: key, subject: subject, snow: snow, lastUse: c.o.clock.Now()}
	t.ctx, t.cancel = context.WithCancel(c.ctx)
	return t
}

// take1 pops one id from cur; ok is false when cur has none (or expired).
func (t *cache) take1() (id int64, ok bool) {
	b := t.cur.Load()
	if b == nil || (b.expires != 0 && t.c.since() >= b.expires) {
		return 0, false
	}
	i := b.next.Add(1) - 1
	if i >= int64(len(b.ids)) {
		return 0, false
	}
	if i == b.mark {
		t.kick()
	}
	if !t.touched.Load() {
		t.touched.Store(true)
	}
	return b.ids[i], true
}

// takeN copies up to len(dst) ids from cur into dst and returns how many;
// touch marks the cache used.
func (t *cache) takeN(dst []int64, touch bool) int {
	b := t.cur.Load()
	if b == nil || len(dst) == 0 || (b.expires != 0 && t.c.since() >= b.expires) {
		return 0
	}
	n := int64(len(dst))
	end := b.next.Add(n)
	start, size := end-n, int64(len(b.ids))
	if start >= size {
		return 0
	}
	end = min(end, size)
	copy(dst, b.ids[start:end])
	if start <= b.mark && b.mark < end {
		t.kick()
	}
	if touch && !t.touched.Load() {
		t.touched.Store(true)
	}
	return int(end - start)
}

// kick checks, on a taker's goroutine, whether a refill should start. It
// never waits for one.
func (t *cache) kick() {
	t.mu.Lock()
	if !t.dead && !t.snow && t.c.hot.Load() != t {
		t.c.hot.Store(t) // kill clears it after it sets dead
	}
	t.refillLocked()
	t.mu.Unlock()
}

func (c *Client) since() time.Duration { return c.o.clock.Now().Sub(c.start) }

func (t *cache) expiredLocked(b *batch) bool {
	return b.expires != 0 && t.c.since() >= b.expires
}

func remaining(b *batch) int {
	return len(b.ids) - int(min(b.next.Load(), int64(len(b.ids))))
}

// availLocked is the number of ids cached: left in cur and queued.
func (t *cache) availLocked() int {
	n := t.queued
	if b := t.cur.Load(); b != nil && !t.expiredLocked(b) {
		n += remaining(b)
	}
	return n
}

// installLocked makes sure cur has ids if any are cached, moving the next
// queued batch up when cur is used up, and drops expired batches. It reports
// whether cur has ids.
func (t *cache) installLocked() bool {
	cur := t.cur.Load()
	if cur != nil {
		if !t.expiredLocked(cur) && remaining(cur) > 0 {
			return true
		}
		t.dropLocked(cur)
		t.cur.Store(nil)
	}
	for len(t.queue) > 0 {
		b := t.queue[0]
		t.queue[0] = nil
		t.queue = t.queue[1:]
		t.queued -= len(b.ids)
		if t.expiredLocked(b) {
			t.dropLocked(b)
			continue
		}
		t.cur.Store(b)
		t.refillLocked()
		return true
	}
	return false
}

// dropLocked drops what is left of b, which is no longer cur or queued.
func (t *cache) dropLocked(b *batch) {
	t.dropped += int64(remaining(b))
	b.next.Store(exhausted)
}

// drop drops every cached id (an idle cache's); refills keep their course.
func (t *cache) drop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clearLocked()
}

func (t *cache) clearLocked() {
	if cur := t.cur.Load(); cur != nil {
		t.dropLocked(cur)
		t.cur.Store(nil)
	}
	for _, b := range t.queue {
		t.dropLocked(b)
	}
	t.queue, t.queued = nil, 0
}

// kill drops every cached id, ends the refills and wakes the waiters, for
// good. Dead, nothing is added to it again (deliver checks).
func (t *cache) kill() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clearLocked()
	t.dead = true
	t.cancel()
	t.wakeLocked()
	t.c.hot.CompareAndSwap(t, nil)
}

func (t *cache) wakeLocked() {
	if t.ready != nil {
		close(t.ready)
		t.ready = nil
	}
}

// wait returns once cur may have ids (nil), the cache died (errDead), a
// refill failed for good after wait was called, or ctx ended (an error
// wrapping ErrUnavailable and ctx.Err()).
func (t *cache) wait(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	gen := t.errGen
	for {
		switch {
		case t.dead:
			return errDead
		case t.installLocked():
			return nil
		case t.errGen != gen:
			return t.err
		case ctx.Err() != nil:
			return unavailable(ctx.Err(), t.lastErr)
		}
		t.refillLocked() // nothing is cached: this starts one unless the pipeline is full
		if t.ready == nil {
			t.ready = make(chan struct{})
		}
		ready := t.ready
		t.waiters++
		t.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
		}
		t.mu.Lock()
		t.waiters--
	}
}

// observeLocked updates the rate estimate from the ids taken since the last
// sample. A rise is taken at once; a fall is blended in, more so the longer
// the interval (an hour's silence forgets a burst).
func (t *cache) observeLocked(now time.Time, avail int) {
	taken := t.installed - t.dropped - int64(avail)
	if t.sampleAt.IsZero() {
		t.sampleAt, t.sampleN = now, taken
		return
	}
	dt := now.Sub(t.sampleAt)
	if dt < minRateSample {
		return
	}
	r := float64(taken-t.sampleN) / dt.Seconds()
	if r >= t.rate {
		t.rate = r
	} else {
		w := min(1, max(0.25, float64(dt)/float64(10*t.c.o.hold)))
		t.rate += (r - t.rate) * w
	}
	t.sampleAt, t.sampleN = now, taken
}

// sizeLocked is the size of the next refill, rate × hold within the batch
// limits, and the number of ids to keep cached and asked for: at least two
// batches, and up to rate × hold when one batch is capped, within what the
// pipeline can have in flight.
func (t *cache) sizeLocked() (size, target int) {
	o := &t.c.o
	hold := o.hold
	if t.snow {
		hold = min(hold, o.maxAge/4) // don't fetch more than lives
	}
	want := t.rate * hold.Seconds()
	size = int(math.Min(math.Max(want, float64(o.minBatch)), float64(o.maxBatch)))
	target = int(math.Min(math.Max(want, float64(2*size)), float64(2*o.pipeline*size)))
	return size, target
}

// refillLocked starts refills until the cached and asked-for ids reach the
// target or the pipeline is full. It never waits.
func (t *cache) refillLocked() {
	if t.dead {
		return
	}
	avail := t.availLocked()
	t.observeLocked(t.c.o.clock.Now(), avail)
	size, target := t.sizeLocked()
	pipeline := t.c.o.pipeline
	if t.installed == 0 {
		pipeline = 1 // cold start: one request, which may well fail (unknown tag)
	}
	for t.inflight < pipeline && avail+t.pending < target {
		t.inflight++
		t.pending += size
		t.c.wg.Add(1) // not racing Close's Wait: Close marks every cache dead under mu first
		go t.fetch(size)
	}
}

// fetch is one refill of n ids: it asks until it has them, retrying with
// backoff while someone waits (or a few times for a prefetch), and hands
// them to the cache.
func (t *cache) fetch(n int) {
	defer t.c.wg.Done()
	c := t.c
	backoff := c.o.backoffMin
	for attempt := 1; ; attempt++ {
		born := c.since()                // before the request: the ids are younger
		if c.js != nil && attempt == 1 { // the pool first, without waiting
			if ids, err := c.fromPool(t.ctx, t.subject, 0); err == nil {
				t.deliver(n, ids, born)
				return
			}
		}
		ids, err := c.request(t.ctx, t.subject, n)
		if err == nil {
			t.deliver(n, ids, born)
			return
		}
		if c.js != nil && retryable(err) { // leafd unreachable: the pool, waiting a little
			if ids, perr := c.fromPool(t.ctx, t.subject, c.o.poolWait); perr == nil {
				t.deliver(n, ids, born)
				return
			}
		}
		if !t.retry(n, err, attempt) {
			return
		}
		select {
		case <-c.o.clock.After(jitter(backoff)):
		case <-t.ctx.Done():
			t.retry(n, t.ctx.Err(), attempt)
			return
		}
		backoff = min(2*backoff, c.o.backoffMax)
	}
}

// retry records a failed attempt and reports whether to make another; if
// not, the refill is over.
func (t *cache) retry(n int, err error, attempt int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastErr = err
	again := retryable(err) && !t.dead && t.ctx.Err() == nil &&
		(t.waiters > 0 || attempt < defaultPrefetchTry)
	if again {
		return true
	}
	t.inflight--
	t.pending -= n
	if !retryable(err) && !t.dead && t.ctx.Err() == nil {
		what := t.subject
		t.err = final(what, err)
		t.errGen++
		t.wakeLocked()
	}
	return false
}

// deliver adds a refill's ids to the cache.
func (t *cache) deliver(n int, ids []int64, born time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inflight--
	t.pending -= n
	if t.dead {
		return
	}
	b := &batch{ids: ids, mark: int64(len(ids) / 2)}
	if t.snow {
		b.expires = born + t.c.o.maxAge
	}
	t.installed += int64(len(ids))
	t.queue = append(t.queue, b)
	t.queued += len(ids)
	t.installLocked()
	t.wakeLocked()
	t.refillLocked()
}

// String describes the cache's state, for debugging.
func (t *cache) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	size, target := t.sizeLocked()
	return fmt.Sprintf("%s: cached %d, in flight %d (%d ids), rate %.0f/s, batch %d, target %d",
		t.subject, t.availLocked(), t.inflight, t.pending, t.rate, size, target)
}
