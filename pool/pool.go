package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/jskv"
	"github.com/leafmq/leafmq/wire"
)

// Names of the pool of a deployment without regions. A region's pool has
// its own stream and subjects (StreamIn, PrefixIn).
const (
	// Stream is the work-queue stream holding every pool's batches.
	Stream = "LEAF_POOL"
	// Prefix is followed by segment.<tag> or snowflake.
	Prefix = "leaf.pool."
	// SnowflakeSubject is the snowflake pool's subject.
	SnowflakeSubject = Prefix + "snowflake"
)

// Defaults.
const (
	DefaultDepth   = 32               // batches kept per subject
	DefaultBatch   = 1000             // ids per batch
	DefaultAckWait = 10 * time.Second // a fetched batch not acked by then is never used
)

// Errors.
var (
	// ErrEmpty: no batch could be had within the wait.
	ErrEmpty = errors.New("pool: empty")
	// ErrUsed: the batch was delivered before (or could not be confirmed as
	// ours): it is thrown away, never used.
	ErrUsed = errors.New("pool: batch not confirmed for single use")
	// ErrInvalid: a bad subject or configuration.
	ErrInvalid = errors.New("pool: invalid")
)

// SegmentSubject is the pool subject of a segment tag.
func SegmentSubject(tag string) string { return Prefix + "segment." + tag }

// A region's pool (docs/regions.md) is a stream of its own, LEAF_POOL_<region>,
// on subjects of its own, leaf.in.<region>.pool.… (wire.Scope): gateways
// join the regions into one JetStream, where one stream name is one stream
// placed in one cluster, so a shared pool would leave every other region's
// clients reading across a gateway and, cut off from it, their nodes
// topping up nothing. Each region's nodes create their region's stream, so
// it is placed in their cluster, and fill only it.

// StreamIn is the pool stream of scope s: Stream without regions,
// LEAF_POOL_<region> in a region.
func StreamIn(s wire.Scope) string { return s.Bucket(Stream) }

// PrefixIn is the pool subjects' prefix in scope s: Prefix without
// regions, leaf.in.<region>.pool. in a region.
func PrefixIn(s wire.Scope) string { return s.Subject(Prefix) }

// SegmentSubjectIn is the pool subject of a segment tag in scope s.
func SegmentSubjectIn(s wire.Scope, tag string) string { return PrefixIn(s) + "segment." + tag }

// SnowflakeSubjectIn is the snowflake pool's subject in scope s.
func SnowflakeSubjectIn(s wire.Scope) string { return PrefixIn(s) + "snowflake" }

// consumerName is the durable pull consumer of subject, shared by every
// client of that pool: leaf.pool.segment.orders -> pool_segment_orders
// (the same in a region's stream, whose consumers are its own).
func consumerName(s wire.Scope, subject string) string {
	return "pool_" + strings.ReplaceAll(strings.TrimPrefix(subject, PrefixIn(s)), ".", "_")
}

// Parse splits a pool subject, leaf.pool.snowflake or
// leaf.pool.segment.<tag>, or either in a region
// (leaf.in.<region>.pool.…), into its scope and its tag ("" for the
// snowflake pool).
func Parse(subject string) (s wire.Scope, tag string, err error) {
	rest, scoped := strings.CutPrefix(subject, wire.ScopePrefix)
	if scoped {
		region, after, ok := strings.Cut(rest, ".")
		if !ok || wire.CheckRegion(region) != nil {
			return "", "", fmt.Errorf("%w: subject %q: want %s<region>.pool.…", ErrInvalid, subject, wire.ScopePrefix)
		}
		s, rest = wire.Scope(region), "leaf."+after
	} else {
		rest = subject
	}
	if rest == SnowflakeSubject {
		return s, "", nil
	}
	tag, ok := strings.CutPrefix(rest, Prefix+"segment.")
	if !ok || tag == "" || len(tag) > 128 || strings.ContainsFunc(tag, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) {
		return "", "", fmt.Errorf("%w: subject %q: want %s or %s<tag>", ErrInvalid, subject, SnowflakeSubjectIn(s), PrefixIn(s)+"segment.")
	}
	return s, tag, nil
}

// StreamConfig is the pool stream of scope s: a work queue (a batch is
// removed when acked), at most depth batches per subject with new ones
// refused beyond (so the bound holds however many nodes top it up).
func StreamConfig(s wire.Scope, depth, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                 StreamIn(s),
		Description:          "leafmq: ready-made id batches, each used at most once",
		Subjects:             []string{PrefixIn(s) + ">"},
		Retention:            jetstream.WorkQueuePolicy,
		MaxMsgsPerSubject:    int64(depth),
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		Storage:              jetstream.FileStorage,
		Replicas:             replicas,
	}
}

// consumerConfig is the one pull consumer of a subject: explicit acks and
// never a second delivery, so a batch can reach one client only.
func consumerConfig(s wire.Scope, subject string, ackWait time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       consumerName(s, subject),
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// Take fetches one batch of subject's pool (a subject of Parse: the
// stream is the subject's region's) and returns its ids, waiting at most
// wait for one. The batch is used only if this is its first delivery
// and this client's delete of it from the stream succeeds; otherwise it is
// thrown away (ErrUsed) — so no batch is ever used twice, even when a
// client stalls past AckWait or the server forgets a delivery in a crash. ErrEmpty when none came within wait (or the
// pool of subject does not exist).
func Take(ctx context.Context, js jetstream.JetStream, subject string, wait time.Duration) ([]int64, error) {
	return take(ctx, js, subject, wait, nil)
}

// take is Take with a hook run between the fetch and the ack (tests stall
// there, as a client paused by GC or a slow machine would).
func take(ctx context.Context, js jetstream.JetStream, subject string, wait time.Duration, beforeAck func()) ([]int64, error) {
	scope, _, err := Parse(subject)
	if err != nil {
		return nil, err
	}
	stream := StreamIn(scope)
	cons, err := js.Consumer(ctx, stream, consumerName(scope, subject))
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("%w: no pool for %s", ErrEmpty, subject)
		}
		return nil, fmt.Errorf("pool: consumer of %s: %w", subject, err)
	}
	var batch jetstream.MessageBatch
	if wait <= 0 {
		batch, err = cons.FetchNoWait(1)
	} else {
		batch, err = cons.Fetch(1, jetstream.FetchMaxWait(max(wait, time.Millisecond)))
	}
	if err != nil {
		return nil, fmt.Errorf("pool: fetch %s: %w", subject, err)
	}
	// Not a range: an unanswered fetch only ends a second after its
	// expiry, and ctx bounds the whole take. A batch delivered after ctx
	// ended is never acked, so never used (MaxDeliver 1): a gap.
	var msg jetstream.Msg
	msgs := batch.Messages()
recv:
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				break recv
			}
			msg = m
		case <-ctx.Done():
			return nil, fmt.Errorf("pool: fetch %s: %w", subject, ctx.Err())
		}
	}
	if msg == nil {
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("pool: fetch %s: %w", subject, err)
		}
		return nil, fmt.Errorf("%w: %s", ErrEmpty, subject)
	}
	meta, err := msg.Metadata()
	if err != nil {
		return nil, fmt.Errorf("pool: %s: metadata: %w", subject, err)
	}
	if meta.NumDelivered != 1 {
		_ = msg.Term()
		return nil, fmt.Errorf("%w: delivered %d times", ErrUsed, meta.NumDelivered)
	}
	if beforeAck != nil {
		beforeAck()
	}
	ids, err := wire.DecodeIDs(nil, msg.Data(), true)
	if err != nil || len(ids) == 0 {
		_ = msg.Term()
		return nil, fmt.Errorf("pool: %s: bad batch at sequence %d: %v", subject, meta.Sequence.Stream, err)
	}
	// The batch is ours only if we delete it from the stream: a delete by
	// sequence succeeds once, is written to the stream's store (fsynced
	// with sync_always; a raft commit on a replicated stream) before the
	// server answers, and survives a server crash. An ack does not decide:
	// the consumer's delivery state is flushed asynchronously, so a server
	// that crashes forgets a delivery, delivers the batch again as a first
	// delivery, and then confirms the acks of both clients.
	if err := deleteMsg(ctx, js, stream, meta.Sequence.Stream); err != nil {
		_ = msg.Term()
		return nil, fmt.Errorf("%w: sequence %d: %v", ErrUsed, meta.Sequence.Stream, err)
	}
	_ = msg.Ack() // clears the consumer's pending entry; the batch is already gone
	return ids, nil
}

// msgDeleteRequest is the body of $JS.API.STREAM.MSG.DELETE.<stream>.
type msgDeleteRequest struct {
	Seq     uint64 `json:"seq"`
	NoErase bool   `json:"no_erase"`
}

type msgDeleteResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Success bool                `json:"success"`
}

// deleteMsg deletes the pool message at seq, or says why not (already
// deleted by another client: JetStream error 10057, no message found).
func deleteMsg(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) error {
	body, _ := json.Marshal(msgDeleteRequest{Seq: seq, NoErase: true})
	m, err := js.Conn().RequestWithContext(ctx, jskv.APISubject(js, "STREAM.MSG.DELETE."+stream), body)
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	var resp msgDeleteResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("delete: bad reply %q: %v", m.Data, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("delete: %w", resp.Error)
	}
	if !resp.Success {
		return fmt.Errorf("delete: not confirmed: %q", m.Data)
	}
	return nil
}

// Source fills dst with fresh ids (all of it, or an error); producer's
// Segment and Snowflake fit.
type Source func(ctx context.Context, dst []int64) error

// FillerConfig configures a Filler. Zero values mean the defaults.
type FillerConfig struct {
	JS jetstream.JetStream // required
	// Scope is the region whose pool this is (its stream, StreamIn, and
	// its subjects, PrefixIn); "" without regions. Add takes only the
	// scope's subjects.
	Scope    wire.Scope
	Depth    int           // batches kept per subject; default DefaultDepth
	Batch    int           // ids per batch; default DefaultBatch
	Replicas int           // of the stream when it is created; default 1
	AckWait  time.Duration // default DefaultAckWait
	Interval time.Duration // how often levels are checked; default 250ms
	// OnLow, if set, is called (must not block) when a subject's level is
	// below a quarter of Depth at a check.
	OnLow  func(subject string, level int)
	Logger *slog.Logger
	// Clock times the checks (Interval) and the pauses between API
	// retries. Default clock.Real.
	Clock clock.Clock
}

// Filler keeps pools topped up on a leafd: for each subject it publishes
// batches from its Source until the stream refuses more (the per-subject
// bound), and it deletes batches that a client fetched but never acked
// (named by the max-deliveries advisory), which no one else can get.
type Filler struct {
	cfg    FillerConfig
	log    *slog.Logger
	nc     *nats.Conn
	stream jetstream.Stream

	mu      sync.Mutex
	sources map[string]Source
	levels  map[string]int
	wasted  uint64 // ids taken for batches the stream refused (a gap)

	adv    *nats.Subscription
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewFiller creates (or updates) the stream and starts the filler. Add
// subjects with Add.
func NewFiller(ctx context.Context, cfg FillerConfig) (*Filler, error) {
	if cfg.JS == nil {
		return nil, fmt.Errorf("%w: FillerConfig.JS is required", ErrInvalid)
	}
	if cfg.Depth == 0 {
		cfg.Depth = DefaultDepth
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.Interval == 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Depth < 1 || cfg.Batch < 1 || cfg.Batch > 1_000_000 || cfg.AckWait < time.Second || cfg.Interval < 0 {
		return nil, fmt.Errorf("%w: depth %d, batch %d (1-1000000), ack wait %v (at least 1s)", ErrInvalid, cfg.Depth, cfg.Batch, cfg.AckWait)
	}
	var st jetstream.Stream
	err := retryAPI(ctx, cfg.Clock, apiAttempt, func(ctx context.Context) (err error) {
		st, err = cfg.JS.CreateOrUpdateStream(ctx, StreamConfig(cfg.Scope, cfg.Depth, cfg.Replicas))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pool: stream %s: %w", StreamIn(cfg.Scope), err)
	}
	f := &Filler{cfg: cfg, log: cfg.Logger, nc: cfg.JS.Conn(), stream: st,
		sources: map[string]Source{}, levels: map[string]int{}}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.adv, err = f.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+StreamIn(cfg.Scope)+".*", f.onMaxDeliveries)
	if err != nil {
		f.cancel()
		return nil, fmt.Errorf("pool: advisory subscription: %w", err)
	}
	f.wg.Add(1)
	go f.run()
	return f, nil
}

// apiAttempt bounds one JetStream API call of NewFiller and Add. A request
// can go unanswered while a cluster elects its meta leader (just after it
// formed, or after a server died); it is then asked again, until ctx ends.
const apiAttempt = 5 * time.Second

// retryAPI runs call with a timeout of attempt, again after an unanswered
// attempt or a transient error, until ctx ends.
func retryAPI(ctx context.Context, c clock.Clock, attempt time.Duration, call func(context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := call(actx)
		cancel()
		if err == nil || ctx.Err() != nil ||
			!(jskv.Transient(err) || errors.Is(err, context.DeadlineExceeded)) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-c.After(250 * time.Millisecond):
		}
	}
}

// Add starts keeping subject's pool full from src, creating its consumer.
// subject is one of the filler's scope.
func (f *Filler) Add(ctx context.Context, subject string, src Source) error {
	scope, _, err := Parse(subject)
	if err != nil {
		return err
	}
	if scope != f.cfg.Scope {
		return fmt.Errorf("%w: subject %q is not in stream %s (%s…)", ErrInvalid, subject, StreamIn(f.cfg.Scope), PrefixIn(f.cfg.Scope))
	}
	err = retryAPI(ctx, f.cfg.Clock, apiAttempt, func(ctx context.Context) error {
		_, err := f.stream.CreateOrUpdateConsumer(ctx, consumerConfig(scope, subject, f.cfg.AckWait))
		return err
	})
	if err != nil {
		return fmt.Errorf("pool: consumer of %s: %w", subject, err)
	}
	f.mu.Lock()
	f.sources[subject] = src
	f.mu.Unlock()
	return nil
}

// onMaxDeliveries deletes a batch that was delivered and never acked: with
// MaxDeliver 1 nobody else can get it, and left alone it would hold a place
// of the bound forever. Every node gets the advisory; the first delete wins.
func (f *Filler) onMaxDeliveries(m *nats.Msg) {
	var adv struct {
		StreamSeq uint64 `json:"stream_seq"`
	}
	if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	if err := f.stream.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		f.log.Debug("pool: delete of an unacked batch failed", "seq", adv.StreamSeq, "err", err)
	}
}

func (f *Filler) run() {
	defer f.wg.Done()
	t := f.cfg.Clock.NewTicker(f.cfg.Interval)
	defer t.Stop()
	for {
		f.mu.Lock()
		subjects := make(map[string]Source, len(f.sources))
		for s, src := range f.sources {
			subjects[s] = src
		}
		f.mu.Unlock()
		for subject, src := range subjects {
			if f.ctx.Err() != nil {
				return
			}
			f.topUp(subject, src)
		}
		select {
		case <-f.ctx.Done():
			return
		case <-t.C():
		}
	}
}

// topUp publishes batches of subject until the level reaches Depth or the
// stream refuses one.
func (f *Filler) topUp(subject string, src Source) {
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	level, err := f.Level(ctx, subject)
	if err != nil {
		f.log.Debug("pool: level", "subject", subject, "err", err)
		return
	}
	if level < f.cfg.Depth/4 && f.cfg.OnLow != nil {
		f.cfg.OnLow(subject, level)
	}
	ids := make([]int64, f.cfg.Batch)
	var buf []byte
	for ; level < f.cfg.Depth; level++ {
		if err := src(ctx, ids); err != nil {
			f.log.Debug("pool: no ids for a batch", "subject", subject, "err", err)
			break
		}
		buf = wire.AppendBinary(buf[:0], ids)
		// The batch's first id names it: should a publish be stored twice
		// (a retry after a lost reply), JetStream's duplicate window keeps
		// one copy.
		if _, err := f.cfg.JS.Publish(ctx, subject, buf, jetstream.WithMsgID(subject+"."+strconv.FormatInt(ids[0], 10))); err != nil {
			f.mu.Lock()
			f.wasted += uint64(len(ids))
			f.mu.Unlock()
			var apiErr *jetstream.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10077 { // 10077: the per-subject bound: another node filled it
				f.log.Debug("pool: publish", "subject", subject, "err", err)
			}
			break
		}
	}
	f.mu.Lock()
	f.levels[subject] = level
	f.mu.Unlock()
}

// Level is how many batches subject's pool holds now (including fetched,
// not yet acked ones).
func (f *Filler) Level(ctx context.Context, subject string) (int, error) {
	info, err := f.stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, err
	}
	return int(info.State.Subjects[subject]), nil
}

// Levels is the level of every subject at its last check.
func (f *Filler) Levels() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.levels))
	for s, l := range f.levels {
		out[s] = l
	}
	return out
}

// Wasted counts ids taken for batches the stream refused (a gap).
func (f *Filler) Wasted() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wasted
}

// Close stops topping up. The batches in the stream stay for clients.
func (f *Filler) Close() error {
	f.cancel()
	f.wg.Wait()
	return f.adv.Unsubscribe()
}
