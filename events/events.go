package events

import (
	"encoding/json"
	"log/slog"
	"sort"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/leafmq/leafmq/internal/clock"
)

// Prefix is followed by the event's kind: leaf.events.<kind>. Kinds have two
// tokens (area.what), so leaf.events.segment.> is every segment event.
const Prefix = "leaf.events."

// Kinds of events.
const (
	NodeUp   = "node.up"   // the node started serving
	NodeDown = "node.down" // the node is stopping (graceful)

	SegmentLoaded  = "segment.loaded"  // a segment was reserved: fields start, end, step, prev_step, took_ms
	SegmentStep    = "segment.step"    // a tag's step changed: fields step, prev_step, reason (dynamic or admin)
	StoreError     = "store.error"     // a segment load failed: fields error, failures
	StoreRecovered = "store.recovered" // a load succeeded after failures: fields failures, down_ms
	RingEmpty      = "ring.empty"      // a request found a tag's ring empty (it was served from the engine or failed)

	SnowflakeRegistered = "snowflake.registered" // a worker id was claimed: fields worker, last_lease
	SnowflakeWaiting    = "snowflake.waiting"    // the clock is behind the worker's last lease: fields worker, until, reason
	SnowflakeServing    = "snowflake.serving"    // handing out ids
	SnowflakePaused     = "snowflake.paused"     // the clock moved backwards: fields worker, until, reason
	SnowflakeLost       = "snowflake.lost"       // the worker claim was lost: field reason
	SnowflakeClosed     = "snowflake.closed"
	QueueLeft           = "queue.left"      // the node left the snowflake or segment queue group
	QueueJoined         = "queue.joined"    // the node (re)joined the snowflake or segment queue group
	LayoutExpiring      = "layout.expiring" // the layout's time bits run out soon: fields expires, left_hours
	ClockOffset         = "clock.offset"    // the clock compared with the live peers at start: fields offset_ms, peers
	PoolLow             = "pool.low"        // a JetStream batch pool is below a quarter of its depth (tag: the pool's subject): fields level, depth
)

// Levels of events.
const (
	Info  = "info"
	Warn  = "warn"
	Error = "error"
)

// Event is one event, published as JSON on Prefix+Kind.
type Event struct {
	Kind    string         `json:"kind"`
	Node    string         `json:"node"`
	Time    time.Time      `json:"time"`
	Level   string         `json:"level"`
	Tag     string         `json:"tag,omitempty"`
	Message string         `json:"message"`
	Fields  map[string]any `json:"fields,omitempty"`
	// Suppressed counts events of the same kind and tag that the rate
	// limit dropped since the last one published.
	Suppressed uint64 `json:"suppressed,omitempty"`
}

// Subject is the subject an event of kind is published on.
func Subject(kind string) string { return Prefix + kind }

// Publish is how a Publisher sends: nats.Conn.Publish fits.
type Publish func(subject string, data []byte) error

// Config configures a Publisher. Zero values mean the defaults in comments.
type Config struct {
	Node    string
	Publish Publish // required
	// Burst and Every: each (kind, tag) may publish Burst events at once,
	// then one per Every. Defaults 5 and 1s.
	Burst int
	Every time.Duration
	// MaxKeys bounds the (kind, tag) limiters kept; beyond it the oldest are
	// forgotten. Default 10000.
	MaxKeys int
	// Clock is the events' time and the rate limits' clock. Default
	// clock.Real (clock.Or).
	Clock  clock.Clock
	Logger *slog.Logger
}

// Publisher publishes events, rate-limited per kind and tag so that a
// failing store or a hot empty ring cannot flood the bus. Safe for
// concurrent use; Emit never blocks on the network (NATS buffers).
type Publisher struct {
	cfg  Config
	mu   sync.Mutex
	keys map[key]*bucket
	sent map[string]uint64 // by kind
	drop map[string]uint64 // by kind
}

type key struct{ kind, tag string }

// bucket is the rate limit of one (kind, tag).
type bucket struct {
	lim        *rate.Limiter
	last       time.Time // last Emit, for forgetOldest
	suppressed uint64
}

// New returns a Publisher.
func New(cfg Config) *Publisher {
	if cfg.Burst <= 0 {
		cfg.Burst = 5
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = 10000
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Publisher{cfg: cfg, keys: map[key]*bucket{}, sent: map[string]uint64{}, drop: map[string]uint64{}}
}

// Emit publishes ev (filling Node and Time), unless the rate limit of its
// kind and tag is spent: then it is counted and reported with the next one.
// It reports whether it was published. A nil Publisher does nothing.
func (p *Publisher) Emit(ev Event) bool {
	if p == nil {
		return false
	}
	now := p.cfg.Clock.Now()
	k := key{ev.Kind, ev.Tag}
	p.mu.Lock()
	b := p.keys[k]
	if b == nil {
		if len(p.keys) >= p.cfg.MaxKeys {
			p.forgetOldest()
		}
		b = &bucket{lim: rate.NewLimiter(rate.Every(p.cfg.Every), p.cfg.Burst)}
		p.keys[k] = b
	}
	b.last = now
	if !b.lim.AllowN(now, 1) {
		b.suppressed++
		p.drop[ev.Kind]++
		p.mu.Unlock()
		return false
	}
	ev.Suppressed, b.suppressed = b.suppressed, 0
	p.sent[ev.Kind]++
	p.mu.Unlock()

	ev.Node = p.cfg.Node
	ev.Time = now.UTC()
	if ev.Level == "" {
		ev.Level = Info
	}
	data, err := json.Marshal(ev)
	if err != nil {
		p.cfg.Logger.Error("event encoding failed", "kind", ev.Kind, "err", err)
		return false
	}
	if err := p.cfg.Publish(Subject(ev.Kind), data); err != nil {
		p.cfg.Logger.Debug("event publish failed", "kind", ev.Kind, "err", err)
		return false
	}
	return true
}

// forgetOldest drops the limiter used least recently. Called with mu held.
func (p *Publisher) forgetOldest() {
	var oldest key
	var at time.Time
	for k, b := range p.keys {
		if at.IsZero() || b.last.Before(at) {
			oldest, at = k, b.last
		}
	}
	delete(p.keys, oldest)
}

// Count is how many events of a kind were published and suppressed.
type Count struct {
	Kind       string
	Published  uint64
	Suppressed uint64
}

// Counts returns the counters by kind, sorted by kind.
func (p *Publisher) Counts() []Count {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	kinds := map[string]bool{}
	for k := range p.sent {
		kinds[k] = true
	}
	for k := range p.drop {
		kinds[k] = true
	}
	out := make([]Count, 0, len(kinds))
	for k := range kinds {
		out = append(out, Count{Kind: k, Published: p.sent[k], Suppressed: p.drop[k]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}
