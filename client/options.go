package client

import (
	"fmt"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// Defaults of the options.
const (
	DefaultTimeout      = 2 * time.Second
	DefaultMaxWait      = 10 * time.Second
	DefaultMinBatch     = 64
	DefaultMaxBatch     = wire.DefaultMaxBatch
	DefaultHold         = 100 * time.Millisecond
	DefaultPipeline     = 8
	DefaultMaxAge       = time.Second
	DefaultMaxTags      = 1024
	DefaultIdleTimeout  = 10 * time.Minute
	DefaultBackoffMin   = 10 * time.Millisecond
	DefaultBackoffMax   = time.Second
	defaultPrefetchTry  = 3                     // attempts of a refill nobody waits for
	minRateSample       = time.Millisecond      // shortest interval the rate is measured over
	minJanitorInterval  = 10 * time.Millisecond // the idle sweep runs at most this often
	janitorIdleFraction = 4                     // the sweep runs every IdleTimeout/4
)

// An Option configures a Client; New applies them in order and returns the
// first error.
type Option func(*options) error

type options struct {
	timeout    time.Duration
	maxWait    time.Duration
	prefetch   bool
	minBatch   int
	maxBatch   int
	hold       time.Duration
	pipeline   int
	maxAge     time.Duration
	layout     snowflake.Layout
	maxTags    int
	idle       time.Duration
	backoffMin time.Duration
	backoffMax time.Duration
	snowKey    string        // WithSnowflakeKey; "" for leaf.snowflake
	pool       bool          // draw refills from the JetStream batch pool first
	poolWait   time.Duration // how long a refill waits for a pool batch once NATS requests fail
	poolScope  wire.Scope    // WithPoolRegion; "" for the pool of no region

	// For tests: the clock, also of the waits between retries and sweeps.
	clock clock.Clock
}

func defaultOptions() options {
	return options{
		timeout:    DefaultTimeout,
		maxWait:    DefaultMaxWait,
		prefetch:   true,
		minBatch:   DefaultMinBatch,
		maxBatch:   DefaultMaxBatch,
		hold:       DefaultHold,
		pipeline:   DefaultPipeline,
		maxAge:     DefaultMaxAge,
		layout:     snowflake.LeafLayout(),
		maxTags:    DefaultMaxTags,
		idle:       DefaultIdleTimeout,
		backoffMin: DefaultBackoffMin,
		backoffMax: DefaultBackoffMax,
		clock:      clock.Real,
	}
}

func positive(name string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: %s %v must be positive", ErrBadOption, name, d)
	}
	return nil
}

// WithTimeout bounds each NATS request (one attempt). Default 2s.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error { o.timeout = d; return positive("timeout", d) }
}

// WithMaxWait bounds a call whose context has no deadline: it waits (and
// retries) at most d before it returns ErrUnavailable. A context with a
// deadline is used as it is. Default 10s.
func WithMaxWait(d time.Duration) Option {
	return func(o *options) error { o.maxWait = d; return positive("max wait", d) }
}

// WithSnowflakeKey asks for snowflake ids on leaf.snowflake.KEY instead
// of leaf.snowflake, as Leaf's clients name a key in /api/snowflake/get/KEY:
// leafd accepts the key and ignores it (the ids are the same). key is a
// tag-like token other than "decode", the subject of the decode endpoint.
// With WithPool, refills still draw on the snowflake pool first.
func WithSnowflakeKey(key string) Option {
	return func(o *options) error {
		if _, err := wire.ParseTag(key); err != nil || key == "decode" {
			return fmt.Errorf("%w: snowflake key %q must be a tag-like token other than decode", ErrBadOption, key)
		}
		o.snowKey = key
		return nil
	}
}

// WithoutPrefetch turns the local cache off: every call is a request (or
// several for NextN beyond the max batch), retried within its context.
func WithoutPrefetch() Option {
	return func(o *options) error { o.prefetch = false; return nil }
}

// WithBatch sets the smallest and largest number of ids a refill asks for.
// max must not exceed the servers' --max-batch, or every refill fails with
// ErrBadRequest; it also splits NextN without prefetch. Default 64 and
// 10000 (wire.DefaultMaxBatch).
func WithBatch(min, max int) Option {
	return func(o *options) error {
		if min < 1 || max < min {
			return fmt.Errorf("%w: batch %d..%d: want 1 <= min <= max", ErrBadOption, min, max)
		}
		o.minBatch, o.maxBatch = min, max
		return nil
	}
}

// WithHold sets how much consumption a refill aims to cover: a refill asks
// for rate × d ids (within the batch limits), and the cache keeps at least
// two refills' worth. Default 100ms.
func WithHold(d time.Duration) Option {
	return func(o *options) error { o.hold = d; return positive("hold", d) }
}

// WithPipeline sets how many refills of one tag may be in flight at once
// (when one max batch per round trip is not enough for the rate). Default 8.
func WithPipeline(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: pipeline %d must be at least 1", ErrBadOption, n)
		}
		o.pipeline = n
		return nil
	}
}

// WithSnowflakeMaxAge drops cached snowflake ids once this long has passed
// since they were asked for, so an id's time is never older than d when it
// is handed out. Default 1s.
func WithSnowflakeMaxAge(d time.Duration) Option {
	return func(o *options) error { o.maxAge = d; return positive("snowflake max age", d) }
}

// WithLayout sets the snowflake layout Decode uses; it must be the servers'.
// Default snowflake.LeafLayout().
func WithLayout(l snowflake.Layout) Option {
	return func(o *options) error {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrBadOption, err)
		}
		o.layout = l
		return nil
	}
}

// WithMaxTags caps the tags with a cache; the least recently used one is
// dropped (its cached ids are lost) to make room. Default 1024.
func WithMaxTags(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: max tags %d must be at least 1", ErrBadOption, n)
		}
		o.maxTags = n
		return nil
	}
}

// WithIdleTimeout drops the cache of a tag (and the cached snowflake ids)
// not used for about d. Default 10m.
func WithIdleTimeout(d time.Duration) Option {
	return func(o *options) error { o.idle = d; return positive("idle timeout", d) }
}

// WithBackoff sets the wait before the first retry of a request that timed
// out, found no responders or got 503; it doubles (with jitter) up to max.
// Default 10ms and 1s.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) error {
		if min <= 0 || max < min {
			return fmt.Errorf("%w: backoff %v..%v: want 0 < min <= max", ErrBadOption, min, max)
		}
		o.backoffMin, o.backoffMax = min, max
		return nil
	}
}

// WithPool makes refills draw ready-made batches from the JetStream batch
// pool (leafd --pool) first and ask leafd only when the pool of a tag (or
// of snowflake) is empty or missing; and when asking leafd fails (no
// responders, timeouts), a refill waits up to wait for a pool batch before
// it retries — so a client keeps getting ids while every leafd is briefly
// down, until the pool drains. Pool batches are used at most once (package
// pool). A pool batch holds leafd's --pool-batch ids, whatever the refill
// asked for; snowflake ids from the pool may be as old as the batch. Needs
// prefetch (without it, WithPool has no effect). wait 0 means 200ms.
func WithPool(wait time.Duration) Option {
	return func(o *options) error {
		if wait < 0 {
			return fmt.Errorf("%w: pool wait %v is negative", ErrBadOption, wait)
		}
		if wait == 0 {
			wait = 200 * time.Millisecond
		}
		o.pool, o.poolWait = true, wait
		return nil
	}
}

// WithPoolRegion makes WithPool draw on the pool of region name (leafd
// --region, or its NATS cluster's name): in a deployment of regions each
// region's nodes fill a pool of their own (stream LEAF_POOL_<region>,
// subjects leaf.in.<region>.pool.…, placed in the region's cluster), and
// a client reads its own region's, which stays topped up while the region
// is cut off from the others and needs no gateway. Without it the client
// reads the pool of a deployment without regions (LEAF_POOL). Needs
// WithPool.
func WithPoolRegion(name string) Option {
	return func(o *options) error {
		if err := wire.CheckRegion(name); err != nil {
			return fmt.Errorf("%w: pool region: %v", ErrBadOption, err)
		}
		o.poolScope = wire.Scope(name)
		return nil
	}
}
