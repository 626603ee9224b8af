package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// Errors of the package. The first four are wire's sentinels, so errors.Is
// works with either name; an error reply from a server unwraps to one of them.
var (
	// ErrBadRequest: a bad tag or count, rejected locally before any request
	// or by the server (400).
	ErrBadRequest = wire.ErrBadRequest
	// ErrUnknownTag: the tag does not exist and the servers do not create
	// tags on first use (404).
	ErrUnknownTag = wire.ErrUnknownTag
	// ErrUnavailable: no id could be had in time: no responders, timeouts or
	// 503 until the context (or WithMaxWait) ran out, or the connection is
	// closed. The error also wraps the context's error and the last attempt's.
	ErrUnavailable = wire.ErrUnavailable
	// ErrInternal: the server failed (500).
	ErrInternal = wire.ErrInternal
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("client closed")
	// ErrBadOption: New was given an invalid option.
	ErrBadOption = errors.New("invalid option")
)

// Client hands out ids of leafd nodes over one NATS connection. It is safe
// for concurrent use.
type Client struct {
	nc    *nats.Conn
	o     options
	start time.Time // o.clock.Now() at New; snowflake batches expire relative to it

	ctx    context.Context // ends every refill; canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // refills and the janitor

	// tags is replaced, never changed in place (copy on write under mu), so
	// the hot path reads it with one atomic load and no lock.
	tags atomic.Pointer[map[string]*cache]
	snow *cache // nil without prefetch
	// hot is a cache lookup tries before the map: the last one whose
	// refill was checked (so most likely the busiest), nil when it died.
	// Its key is set before the cache is published and never changes, so
	// the atomic load is all a reader needs. It is set under the cache's mu
	// only while the cache is alive, and kill clears it after marking the
	// cache dead under the same mu: a reader that still loads a dead cache
	// finds no batch in it and takes the slow path.
	hot    atomic.Pointer[cache]
	closed atomic.Bool

	// mu guards replacing tags, creating and evicting caches and closing.
	// Lock order: Client.mu before cache.mu.
	mu sync.Mutex

	// Counters for tests and debugging.
	requests  atomic.Int64 // NATS requests sent
	failures  atomic.Int64 // of which failed
	poolTakes atomic.Int64 // batches drawn from the JetStream pool

	js jetstream.JetStream // WithPool; nil without
}

// poolSubject is the JetStream pool of a request subject, in the pool
// region's scope (WithPoolRegion).
func (c *Client) poolSubject(subject string) string {
	if subject == wire.SnowflakeSubject || strings.HasPrefix(subject, wire.SnowflakePrefix) {
		return pool.SnowflakeSubjectIn(c.o.poolScope)
	}
	return pool.SegmentSubjectIn(c.o.poolScope, strings.TrimPrefix(subject, wire.SegmentPrefix))
}

// poolAPITimeout bounds the JetStream API calls of one pool take (beyond
// the wait for a batch). A JetStream that does not answer (a stream leader
// being elected after a server died takes seconds) must not hold a refill
// up: after this it asks leafd instead. A batch fetched but not acked in time
// is lost (a gap): the pool never delivers it again.
const poolAPITimeout = 500 * time.Millisecond

// fromPool takes one batch of subject's pool, waiting at most wait.
func (c *Client) fromPool(ctx context.Context, subject string, wait time.Duration) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+min(c.o.timeout, poolAPITimeout))
	defer cancel()
	ids, err := pool.Take(ctx, c.js, c.poolSubject(subject), wait)
	if err == nil {
		c.poolTakes.Add(1)
	}
	return ids, err
}

// New returns a Client that sends its requests over nc. The Client does not
// own nc: close the Client before nc.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", ErrBadOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.poolScope != "" && !o.pool {
		return nil, fmt.Errorf("%w: WithPoolRegion needs WithPool", ErrBadOption)
	}
	c := &Client{nc: nc, o: o, start: o.clock.Now()}
	if o.pool {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, fmt.Errorf("%w: pool: %v", ErrBadOption, err)
		}
		c.js = js
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	empty := map[string]*cache{}
	c.tags.Store(&empty)
	if o.prefetch {
		c.snow = c.newCache("", c.snowSubject(), true)
		c.wg.Add(1)
		go c.janitor()
	}
	return c, nil
}

// Next returns one id of tag (leaf.segment.<tag>).
//
// With prefetch (the default) it takes a cached id, with one atomic add and
// no request, while there is one; it waits for a refill only when the cache
// is empty. A cached id is returned even when ctx has ended.
func (c *Client) Next(ctx context.Context, tag string) (int64, error) {
	if t := c.lookup(tag); t != nil {
		if id, ok := t.take1(); ok {
			return id, nil
		}
	}
	var id [1]int64
	if err := c.nextN(ctx, tag, id[:]); err != nil {
		return 0, err
	}
	return id[0], nil
}

// NextN returns n (>= 1) ids of tag. Cached ids are used first; more than
// the max batch (WithBatch) are asked for directly. On error the ids taken
// so far are dropped (a gap).
func (c *Client) NextN(ctx context.Context, tag string, n int) ([]int64, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: count %d must be at least 1", ErrBadRequest, n)
	}
	ids := make([]int64, n)
	if err := c.nextN(ctx, tag, ids); err != nil {
		return nil, err
	}
	return ids, nil
}

// Mono returns one id of a monotonic tag (leaf.mono.<tag>): larger than
// every id of the tag whose reply reached any client before this call
// began. Monotonic ids are never cached or prefetched (a cached id could
// be older than one another client already holds). During a leader's
// switch-over there is no responder for a moment; Mono asks again within
// ctx (bounded by WithMaxWait).
func (c *Client) Mono(ctx context.Context, tag string) (int64, error) {
	var id [1]int64
	if err := c.monoN(ctx, tag, id[:]); err != nil {
		return 0, err
	}
	return id[0], nil
}

// MonoN returns n (>= 1) ids of a monotonic tag, strictly increasing, as
// Mono does for one.
func (c *Client) MonoN(ctx context.Context, tag string, n int) ([]int64, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: count %d must be at least 1", ErrBadRequest, n)
	}
	ids := make([]int64, n)
	if err := c.monoN(ctx, tag, ids); err != nil {
		return nil, err
	}
	return ids, nil
}

func (c *Client) monoN(ctx context.Context, tag string, ids []int64) error {
	if _, err := wire.ParseTag(tag); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return c.direct(ctx, wire.MonoPrefix+tag, ids)
}

// Snowflake returns one snowflake id (leaf.snowflake). Cached snowflake ids
// are dropped once older than WithSnowflakeMaxAge.
func (c *Client) Snowflake(ctx context.Context) (int64, error) {
	if t := c.snow; t != nil {
		if id, ok := t.take1(); ok {
			return id, nil
		}
	}
	var id [1]int64
	if err := c.snowflakeN(ctx, id[:]); err != nil {
		return 0, err
	}
	return id[0], nil
}

// SnowflakeN returns n (>= 1) snowflake ids, as NextN does for a tag.
func (c *Client) SnowflakeN(ctx context.Context, n int) ([]int64, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: count %d must be at least 1", ErrBadRequest, n)
	}
	ids := make([]int64, n)
	if err := c.snowflakeN(ctx, ids); err != nil {
		return nil, err
	}
	return ids, nil
}

// Decode splits a snowflake id into its fields with the client's layout
// (WithLayout), locally.
func (c *Client) Decode(id int64) snowflake.ID { return c.o.layout.Decompose(id) }

// Close stops the background refills, waits for them and drops every cached
// id: those ids are never handed out (a gap). Calls after Close return
// ErrClosed. Close is idempotent; it does not close the NATS connection.
func (c *Client) Close() {
	c.mu.Lock()
	if !c.closed.Load() {
		c.closed.Store(true)
		for _, t := range *c.tags.Load() {
			t.kill()
		}
		empty := map[string]*cache{}
		c.tags.Store(&empty)
		if c.snow != nil {
			c.snow.kill()
		}
		c.cancel() // after the kills: refills see their cache dead, not an error
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// nextN fills ids with ids of tag: the slow path of Next, and NextN.
func (c *Client) nextN(ctx context.Context, tag string, ids []int64) error {
	if _, err := wire.ParseTag(tag); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err) // also segment.ErrInvalid
	}
	if !c.o.prefetch || len(ids) > c.o.maxBatch {
		return c.direct(ctx, wire.SegmentPrefix+tag, ids)
	}
	return c.fill(ctx, func() (*cache, bool, error) { return c.cacheFor(tag) }, ids)
}

func (c *Client) snowflakeN(ctx context.Context, ids []int64) error {
	if !c.o.prefetch || len(ids) > c.o.maxBatch {
		return c.direct(ctx, c.snowSubject(), ids)
	}
	return c.fill(ctx, func() (*cache, bool, error) { return c.snow, false, nil }, ids)
}

// snowSubject is the subject snowflake ids are asked on.
func (c *Client) snowSubject() string {
	if c.o.snowKey != "" {
		return wire.SnowflakePrefix + c.o.snowKey
	}
	return wire.SnowflakeSubject
}

// fill fills ids from the cache get returns, waiting for refills as needed.
// get also says whether it created the cache: the call that creates a
// cache does not count as a use for its eviction (see lruLocked).
func (c *Client) fill(ctx context.Context, get func() (*cache, bool, error), ids []int64) error {
	got, touch := 0, true
	cancel := context.CancelFunc(nil)
	defer func() {
		if cancel != nil {
			cancel()
		}
	}()
	for {
		if c.closed.Load() {
			return ErrClosed
		}
		t, created, err := get()
		if err != nil {
			return err
		}
		touch = touch && !created
		got += t.takeN(ids[got:], touch)
		if got == len(ids) {
			return nil
		}
		if cancel == nil {
			ctx, cancel = c.bound(ctx)
		}
		switch err := t.wait(ctx); {
		case err == errDead && !c.closed.Load():
			// Evicted while we waited, for a tag cached anew: ask for
			// the rest directly, so tags evicting one another (more in
			// use than WithMaxTags) cannot starve their callers.
			return c.direct(ctx, t.subject, ids[got:])
		case err != nil && err != errDead:
			return err
		}
	}
}

// lookup returns the cache of tag, or nil. It takes no lock.
func (c *Client) lookup(tag string) *cache {
	if t := c.hot.Load(); t != nil && t.key == tag {
		return t
	}
	return (*c.tags.Load())[tag]
}

// cacheFor returns the cache of a valid tag, creating it (and evicting the
// least recently used one when there are WithMaxTags) if need be; created
// says it did.
func (c *Client) cacheFor(tag string) (t *cache, created bool, err error) {
	if t := c.lookup(tag); t != nil {
		return t, false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, false, ErrClosed
	}
	old := *c.tags.Load()
	if t := old[tag]; t != nil {
		return t, false, nil
	}
	m := make(map[string]*cache, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	for len(m) >= c.o.maxTags {
		victim := c.lruLocked(m)
		delete(m, victim.key)
		victim.kill()
	}
	t = c.newCache(tag, wire.SegmentPrefix+tag, false)
	m[tag] = t
	c.tags.Store(&m)
	return t, true, nil
}

// lruLocked picks about the least recently used cache of m, as CLOCK does:
// one not used since the last sweep (or since it was made: the call that
// made it does not count, so a tag used once goes before one used twice)
// with the oldest last use, else the oldest. The others get a second
// chance: their use flag is cleared and their last use set to now.
func (c *Client) lruLocked(m map[string]*cache) *cache {
	now := c.o.clock.Now()
	var victim *cache
	victimUsed := false
	for _, t := range m {
		used := t.touched.Swap(false)
		if used {
			t.lastUse = now
		}
		if victim == nil || (victimUsed && !used) || (victimUsed == used && t.lastUse.Before(victim.lastUse)) {
			victim, victimUsed = t, used
		}
	}
	return victim
}

// janitor drops the caches of idle tags and the cached snowflake ids when
// unused, every IdleTimeout/4.
func (c *Client) janitor() {
	defer c.wg.Done()
	every := max(c.o.idle/janitorIdleFraction, minJanitorInterval)
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.o.clock.After(every):
		}
		c.sweep()
	}
}

func (c *Client) sweep() {
	now := c.o.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return
	}
	old := *c.tags.Load()
	var idle []*cache
	for _, t := range old {
		if t.touched.Swap(false) {
			t.lastUse = now
		} else if now.Sub(t.lastUse) >= c.o.idle {
			idle = append(idle, t)
		}
	}
	if len(idle) > 0 {
		m := make(map[string]*cache, len(old))
		for k, v := range old {
			m[k] = v
		}
		for _, t := range idle {
			delete(m, t.key)
			t.kill()
		}
		c.tags.Store(&m)
	}
	if t := c.snow; t.touched.Swap(false) {
		t.lastUse = now
	} else if now.Sub(t.lastUse) >= c.o.idle {
		t.drop()
	}
}

// bound gives ctx a deadline of WithMaxWait when it has none.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.o.maxWait)
}

// direct fills ids with requests of at most the max batch each, retried
// within ctx (bounded by WithMaxWait).
func (c *Client) direct(ctx context.Context, subject string, ids []int64) error {
	if c.closed.Load() {
		return ErrClosed
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	for got := 0; got < len(ids); {
		n := min(len(ids)-got, c.o.maxBatch)
		batch, err := c.requestRetry(ctx, subject, n)
		if err != nil {
			return err
		}
		got += copy(ids[got:], batch)
	}
	return nil
}

// requestRetry asks subject for n ids until it gets them, gets an error that
// is not worth a retry, ctx ends or the client closes.
func (c *Client) requestRetry(ctx context.Context, subject string, n int) ([]int64, error) {
	backoff := c.o.backoffMin
	var last error // the last attempt that failed on its own, not for ctx
	for {
		ids, err := c.request(ctx, subject, n)
		switch {
		case err == nil:
			return ids, nil
		case ctx.Err() != nil:
			return nil, unavailable(ctx.Err(), last)
		case !retryable(err):
			return nil, final(subject, err)
		}
		last = err
		select {
		case <-c.o.clock.After(jitter(backoff)):
		case <-ctx.Done():
			return nil, unavailable(ctx.Err(), last)
		case <-c.ctx.Done():
			return nil, ErrClosed
		}
		backoff = min(2*backoff, c.o.backoffMax)
	}
}

// request makes one attempt: n ids of subject, binary, within the request
// timeout. A timeout of the attempt (not of ctx) is nats.ErrTimeout.
func (c *Client) request(ctx context.Context, subject string, n int) ([]int64, error) {
	msg := wire.NewRequest(subject, n, true)
	rctx, cancel := context.WithTimeout(ctx, c.o.timeout)
	defer cancel()
	c.requests.Add(1)
	reply, err := c.nc.RequestMsgWithContext(rctx, msg)
	if err == nil {
		err = wire.ReplyError(reply)
	}
	if err != nil {
		c.failures.Add(1)
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = nats.ErrTimeout
		}
		return nil, err
	}
	ids, err := decodeReply(reply, n)
	if err != nil {
		c.failures.Add(1)
		return nil, err
	}
	return ids, nil
}

// decodeReply reads the n binary ids of a success reply.
func decodeReply(reply *nats.Msg, n int) ([]int64, error) {
	ids, err := wire.DecodeIDs(make([]int64, 0, n), reply.Data, true)
	if err == nil && len(ids) != n {
		err = fmt.Errorf("%w: asked for %d ids, got %d", wire.ErrBadReply, n, len(ids))
	}
	return ids, err
}

// retryable reports whether another attempt may succeed: nobody answered in
// time, nobody listens (yet), or a node refused with a code that
// wire.Retryable names (503: no ids right now). NATS spreads the retry
// over the queue group, so it may reach another node.
func retryable(err error) bool {
	if we := (*wire.Error)(nil); errors.As(err, &we) {
		return wire.Retryable(we.Code)
	}
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, wire.ErrUnavailable)
}

// final is the error a caller sees for an attempt that is not retried.
func final(subject string, err error) error {
	var we *wire.Error
	if errors.As(err, &we) || errors.Is(err, wire.ErrBadReply) {
		return fmt.Errorf("%s: %w", subject, err)
	}
	return fmt.Errorf("%s: %w: %w", subject, ErrUnavailable, err) // connection closed, draining…
}

// unavailable is the error of a call whose context ended before it had its
// ids; last is the last failed attempt, if any.
func unavailable(ctxErr, last error) error {
	if last == nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, ctxErr)
	}
	return fmt.Errorf("%w: %w (last attempt: %w)", ErrUnavailable, ctxErr, last)
}

// jitter spreads d over [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d < 2 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
