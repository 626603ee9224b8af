package responder

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/wire"
)

// A node whose round trip to NATS is above --max-nats-rtt answers late:
// past a client's deadline. It leaves the segment and snowflake queue
// groups while another live node that is not slow serves the subject, so
// that NATS sends every request to the nodes that answer in time, and
// joins again once its round trip is within --max-nats-rtt, or once no
// such node serves the subject (answering late beats not answering).
// Leaving takes a measured round trip above the limit (natsconn measures
// it every few seconds) and a fast peer's status; joining again a
// measured round trip within it: a round trip near the limit moves the
// node at most once a measurement. The peers are asked only while the
// node is slow, at most once every slowAskEvery a subject
// (TestSlowYield, TestSlowNodeLeavesQueueGroups).

// slowAskEvery is how often a slow node asks the live nodes whether one
// that is not slow serves a subject.
const slowAskEvery = 5 * time.Second

// SlowYieldConfig configures a SlowYield. Zero values mean the defaults in
// comments.
type SlowYieldConfig struct {
	Conn   *nats.Conn           // asks the live nodes (ask.Status); required unless Status is set
	RTT    func() time.Duration // required: the node's last measured round trip to NATS
	MaxRTT time.Duration        // above it the node is slow (--max-nats-rtt); 0: never slow
	// Instance is this process among the live nodes: never its own fast peer.
	Instance string
	// Scope is the node's region: a fast node of another region does not
	// serve this region's callers first (their requests stay in their own
	// cluster), so only the region's nodes count.
	Scope wire.Scope
	// Status gathers the live nodes' status for window; default ask.Status
	// of Scope on Conn.
	Status func(ctx context.Context, window time.Duration) ([]wire.NodeStatus, error)
	Clock  clock.Clock       // paces the questions and the keeper; default clock.Real (clock.Or)
	Logger *slog.Logger      // default slog.Default()
	Events *events.Publisher // QueueLeft, QueueJoined; nil: none
}

// SlowYield tells a slow node when to stay out of a subject's queue
// group (Yield), and keeps it in the segment queue group or out of it
// (KeepSegment). It is safe for concurrent use.
type SlowYield struct {
	cfg SlowYieldConfig

	mu  sync.Mutex
	at  map[string]time.Time // when the peers were last asked, by subject
	out map[string]bool      // their answer: a fast node serves the subject
}

// NewSlowYield validates cfg. It starts nothing.
func NewSlowYield(cfg SlowYieldConfig) (*SlowYield, error) {
	if cfg.RTT == nil || (cfg.Conn == nil && cfg.Status == nil) {
		return nil, errors.New("responder: SlowYieldConfig.RTT and Conn or Status are required")
	}
	if cfg.Status == nil {
		nc := cfg.Conn
		cfg.Status = func(ctx context.Context, window time.Duration) ([]wire.NodeStatus, error) {
			return ask.Status(ctx, nc, cfg.Scope, window)
		}
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &SlowYield{cfg: cfg}, nil
}

// slow reports whether the node's last measured round trip to NATS is
// above MaxRTT.
func (y *SlowYield) slow() bool { return y.cfg.MaxRTT > 0 && y.cfg.RTT() > y.cfg.MaxRTT }

// YieldFunc is Yield for subject (snownode.Config.Yield), nil without
// MaxRTT or SlowYield: the node never yields.
func (y *SlowYield) YieldFunc(subject string) func(context.Context) bool {
	if y == nil || y.cfg.MaxRTT <= 0 {
		return nil
	}
	return func(ctx context.Context) bool { return y.Yield(ctx, subject) }
}

// Yielded is the problem (wire.SubjectStatus.Problems) of a subject whose
// queue group the slow node left. A nil SlowYield's is the same.
func (*SlowYield) Yielded(subject string) string {
	return subject + ": out of the queue group while a live node that is not slow serves it"
}

// Yield reports whether the node stays out of subject's queue group: it
// is slow and a live node that is not slow serves subject.
func (y *SlowYield) Yield(ctx context.Context, subject string) bool {
	if !y.slow() {
		y.mu.Lock()
		delete(y.at, subject)
		delete(y.out, subject)
		y.mu.Unlock()
		return false
	}
	y.mu.Lock()
	at, out := y.at[subject], y.out[subject]
	y.mu.Unlock()
	if !at.IsZero() && y.cfg.Clock.Since(at) < slowAskEvery {
		return out
	}
	out = y.fastPeerServes(ctx, subject)
	y.mu.Lock()
	if y.at == nil {
		y.at, y.out = map[string]time.Time{}, map[string]bool{}
	}
	y.at[subject], y.out[subject] = y.cfg.Clock.Now(), out
	y.mu.Unlock()
	return out
}

// fastPeerServes reports whether a live node other than this one serves
// subject and can answer it (wire.SubjectStatus Serving and Ready) with a
// round trip to NATS within MaxRTT. It gathers the answers for a window
// that the slow round trip fits in, not waiting for every member (a read
// of the members' list takes several slow round trips): one such node is
// enough, and a node it misses, or a question that fails, keeps this node
// in the group.
func (y *SlowYield) fastPeerServes(ctx context.Context, subject string) bool {
	window := ask.StatusWindow(y.cfg.RTT())
	ctx, cancel := context.WithTimeout(ctx, window+time.Second)
	defer cancel()
	live, err := y.cfg.Status(ctx, window)
	if err != nil {
		y.cfg.Logger.Debug("slow node: cannot ask the live nodes whether one that is not slow serves "+subject, "err", err)
		return false
	}
	for _, p := range live {
		if p.Instance == y.cfg.Instance || p.Starting || time.Duration(p.NATSRTT) > y.cfg.MaxRTT {
			continue
		}
		for _, s := range p.Subjects {
			if s.Subject == subject && s.Serving && s.Ready {
				return true
			}
		}
	}
	return false
}

// SegmentKeeper keeps a responder in the segment queue group except while
// its node yields to a faster node (SlowYield.Yield), checking once a
// second.
type SegmentKeeper struct {
	y      *SlowYield
	r      *Responder
	stop   chan struct{}
	ctx    context.Context // ends at Close: bounds the peers' questions
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// KeepSegment starts keeping r (one with Config.SegmentConn) in the
// segment queue group, or out while the node yields; Close stops it.
// Without MaxRTT, SlowYield or r it keeps nothing and returns nil.
func (y *SlowYield) KeepSegment(r *Responder) *SegmentKeeper {
	if y == nil || y.cfg.MaxRTT <= 0 || r == nil {
		return nil
	}
	k := &SegmentKeeper{y: y, r: r, stop: make(chan struct{})}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		t := y.cfg.Clock.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-t.C():
			}
			k.apply(k.ctx)
		}
	}()
	return k
}

// Close stops the keeper and waits for a check under way, the responder
// staying where it is in the group (its Stop leaves it). It must be called
// once; a nil SegmentKeeper's Close does nothing.
func (k *SegmentKeeper) Close() {
	if k == nil {
		return
	}
	close(k.stop)
	k.cancel()
	k.wg.Wait()
}

// apply joins or leaves the segment queue group once.
func (k *SegmentKeeper) apply(ctx context.Context) {
	y := k.y
	yield := y.Yield(ctx, wire.SubjectSegment)
	was := k.r.SegmentService() != nil
	rtt := y.cfg.RTT() // before a leave closes the connection that made it
	if err := k.r.SetSegment(!yield); err != nil {
		y.cfg.Logger.Warn("segment queue group change failed", "join", !yield, "err", err)
		return
	}
	switch {
	case yield && was:
		msg := "left the segment queue group: the round trip to NATS is above --max-nats-rtt and a live node that is not slow serves segment"
		y.cfg.Logger.Warn(msg, "rtt", rtt)
		y.cfg.Events.Emit(events.Event{Kind: events.QueueLeft, Level: events.Warn, Message: msg,
			Fields: map[string]any{"subject": wire.SubjectSegment}})
	case !yield && !was:
		y.cfg.Logger.Info("joined the segment queue group again", "rtt", rtt)
		y.cfg.Events.Emit(events.Event{Kind: events.QueueJoined, Message: "joined the segment queue group",
			Fields: map[string]any{"subject": wire.SubjectSegment}})
	}
}
