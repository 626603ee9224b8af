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
	"github.com/leafmq/leafmq/snowflake"
)

// SnowflakeIDs is what the snowflake ring needs of the engine;
// *snowflake.Source implements it.
type SnowflakeIDs interface {
	// Fill fills a prefix of dst without waiting; 0 when the clock must
	// move on first.
	Fill(ctx context.Context, dst []int64) (int, error)
	// Next fills all of dst, waiting for the clock if it must.
	Next(ctx context.Context, dst []int64) error
}

// SnowflakeHolder is implemented by SnowflakeIDs whose ids belong to a
// claimed worker id that can be lost (*snowflake.Source does). The ring
// then hands out only ids of the worker Holds reports now: ids of a worker
// whose claim was lost (or lapsed) are thrown away, never taken.
type SnowflakeHolder interface {
	// Holds is the worker id whose ids may be handed out; ok false when
	// there is none.
	Holds() (worker int64, ok bool)
	// Layout tells where an id's worker bits are.
	Layout() snowflake.Layout
}

// A Source is both: the ring over it drops a lost worker's ids.
var (
	_ SnowflakeIDs    = (*snowflake.Source)(nil)
	_ SnowflakeHolder = (*snowflake.Source)(nil)
)

// SnowflakeConfig configures a Snowflake ring. Zero values mean the
// defaults in comments.
type SnowflakeConfig struct {
	IDs            SnowflakeIDs  // required
	Size           int           // ring size; default 65536 (16 ticks of Leaf's layout)
	PaddingPercent int           // refill below this fill percentage; default 50
	DirectOver     int           // requests of more ids go straight to IDs; default 64
	MaxAge         time.Duration // ids idle in the ring longer are thrown away (a gap) so ids stay close to their time; default 1s
	// TimeOf, if set, is an id's time (its layout's Decompose): once the
	// ring has not been refilled for MaxAge, only ids whose time is more
	// than MaxAge ago are thrown away, so borrowed future ticks are kept.
	// Nil: the whole ring is thrown away then.
	TimeOf func(id int64) time.Time
	// Clock is the clock TimeOf's times are compared with (the ids'
	// clock, which a fault drill may offset or step); default clock.Real.
	Clock clock.Clock
	// Timer is the clock of the ring's own timing: the freshen ticker and
	// the age of the last refill (MaxAge). Unlike Clock it is never offset;
	// default clock.Real.
	Timer  clock.Clock
	Logger *slog.Logger // default slog.Default()
}

// Snowflake is UidGenerator's CachedUidGenerator over NATS: a ring
// pre-filled with snowflake ids a whole tick at a time, refilled
// asynchronously below its padding threshold. Ids idle in the ring for
// longer than MaxAge are dropped, so an id's time stays within about MaxAge
// of when it was handed out.
//
// When IDs is a SnowflakeHolder (a snowflake.Source), a lost claim empties
// the ring first: every take checks the ids it took against the worker the
// Source holds at that moment and throws away those of any other worker
// (all of them while it holds none), and the ring's own goroutine drops
// them from the buffer as soon as it sees the change. Ids of an earlier
// registration of the same worker id may stay: they are below that
// registration's confirmed lease, which every later registration of the
// id waits past (snowflake.Registry's fencing), so no one else makes them.
type Snowflake struct {
	cfg    SnowflakeConfig
	log    *slog.Logger
	ring   *ringbuf.Ring[int64]
	filled atomic.Int64 // unix nanos of the last refill that added ids
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	drops  atomic.Uint64
	lost   atomic.Uint64 // ids thrown away for their worker's lost claim
	served atomic.Uint64 // ids handed out by Try and Next

	holder     SnowflakeHolder // nil: ids are never fenced
	seqBits    uint            // an id's worker field is (id >> seqBits) & maxWorker
	maxWorker  int64
	lastWorker atomic.Int64 // the worker held at the last check of freshen
}

// NewSnowflake builds and starts the ring.
func NewSnowflake(cfg SnowflakeConfig) (*Snowflake, error) {
	if cfg.IDs == nil {
		return nil, errors.New("producer: SnowflakeConfig.IDs is required")
	}
	if cfg.Size == 0 {
		cfg.Size = 65536
	}
	if cfg.DirectOver == 0 {
		cfg.DirectOver = 64
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	cfg.Timer = clock.Or(cfg.Timer)
	if cfg.MaxAge < 0 || cfg.DirectOver < 0 {
		return nil, fmt.Errorf("producer: invalid snowflake config: max age %v, direct over %d", cfg.MaxAge, cfg.DirectOver)
	}
	s := &Snowflake{cfg: cfg, log: cfg.Logger}
	if h, ok := cfg.IDs.(SnowflakeHolder); ok {
		l := h.Layout()
		s.holder, s.seqBits, s.maxWorker = h, uint(l.SequenceBits), l.MaxWorkerField()
	}
	s.lastWorker.Store(-1)
	if s.holder != nil {
		if w, ok := s.holder.Holds(); ok {
			s.lastWorker.Store(w) // the ring holds nothing of another worker yet
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	var err error
	s.ring, err = ringbuf.New(ringbuf.Config[int64]{
		Size:           cfg.Size,
		PaddingPercent: cfg.PaddingPercent,
		FillChunk:      4096,
		Fill:           s.fill,
		OnFillError: func(err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, snowflake.ErrNotServing) {
				s.log.Warn("snowflake ring refill failed", "err", err)
			}
		},
	})
	if err != nil {
		s.cancel()
		return nil, err
	}
	s.ring.Start()
	s.wg.Add(1)
	go s.freshen()
	return s, nil
}

func (s *Snowflake) fill(ctx context.Context, dst []int64) (int, error) {
	n, err := s.cfg.IDs.Fill(ctx, dst)
	if n > 0 {
		s.filled.Store(s.cfg.Timer.Now().UnixNano())
	}
	return n, err
}

// freshen throws away ids that sat in the ring for longer than MaxAge and
// refills it; it also retries refills that stopped because the clock had to
// move on.
func (s *Snowflake) freshen() {
	defer s.wg.Done()
	t := s.cfg.Timer.NewTicker(max(min(s.cfg.MaxAge/2, 100*time.Millisecond), time.Millisecond))
	defer t.Stop()
	var scratch []int64
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C():
		}
		if scratch == nil {
			scratch = make([]int64, 64)
		}
		if s.holder != nil {
			s.dropLost(scratch)
		}
		if s.cfg.Timer.Since(time.Unix(0, s.filled.Load())) > s.cfg.MaxAge && s.ring.Len() > 0 {
			s.dropStale(scratch)
		}
		if s.ring.Len() < s.ring.Cap()/2 {
			s.ring.TriggerRefill()
		}
	}
}

// dropStale throws away the ids at the head of the ring that are older than
// MaxAge (all of them without TimeOf). The ring holds increasing ids, so it
// stops at the first fresh one, which goes back in (at the tail) with the
// few after it in its chunk.
func (s *Snowflake) dropStale(scratch []int64) {
	cut := s.cfg.Clock.Now().Add(-s.cfg.MaxAge)
	for {
		n, _ := s.ring.TakeN(scratch)
		k := n
		if s.cfg.TimeOf != nil {
			k = 0
			for k < n && s.cfg.TimeOf(scratch[k]).Before(cut) {
				k++
			}
		}
		s.drops.Add(uint64(k))
		if k < n {
			s.ring.PutN(scratch[k:n])
			return
		}
		if n < len(scratch) {
			return
		}
	}
}

// dropLost empties the ring of the ids of a worker the Source no longer
// holds: all of them while it holds none; after a change of worker, those
// at the head that are not of the new one (the ring holds the old worker's
// ids before the new one's).
func (s *Snowflake) dropLost(scratch []int64) {
	w, ok := s.holder.Holds()
	if !ok {
		w = -1
	}
	if s.lastWorker.Swap(w) == w && ok {
		return
	}
	for {
		n, _ := s.ring.TakeN(scratch)
		k := 0
		if ok {
			for k < n && s.workerOf(scratch[k]) != w {
				k++
			}
		} else {
			k = n
		}
		s.lost.Add(uint64(k))
		if k < n {
			s.ring.PutN(scratch[k:n])
			return
		}
		if n < len(scratch) {
			return
		}
	}
}

func (s *Snowflake) workerOf(id int64) int64 { return (id >> s.seqBits) & s.maxWorker }

// held keeps, in order, the ids of ids whose worker the Source holds now
// and returns how many; the rest are thrown away.
func (s *Snowflake) held(ids []int64) int {
	if s.holder == nil || len(ids) == 0 {
		return len(ids)
	}
	w, ok := s.holder.Holds()
	if !ok {
		s.lost.Add(uint64(len(ids)))
		return 0
	}
	k := 0
	for _, id := range ids {
		if s.workerOf(id) == w {
			ids[k] = id
			k++
		}
	}
	s.lost.Add(uint64(len(ids) - k))
	return k
}

// Next fills dst with fresh snowflake ids: all of it, or an error. Small
// requests come from the ring; the rest straight from the engine, which may
// wait for the clock.
func (s *Snowflake) Next(ctx context.Context, dst []int64) error {
	n := s.Try(dst)
	if n == len(dst) {
		return nil
	}
	if err := s.cfg.IDs.Next(ctx, dst[n:]); err != nil {
		return err
	}
	s.served.Add(uint64(len(dst) - n))
	return nil
}

// Try fills a prefix of dst without waiting and returns its length. Ids
// from the ring are checked against the worker the Source holds after they
// were taken (see SnowflakeHolder).
func (s *Snowflake) Try(dst []int64) int {
	n := s.try(dst)
	s.served.Add(uint64(n))
	return n
}

func (s *Snowflake) try(dst []int64) int {
	if len(dst) <= s.cfg.DirectOver {
		n, _ := s.ring.TakeN(dst)
		if k := s.held(dst[:n]); k < n {
			// Ids of a lost worker were at the head: look again, past them.
			n = k + s.tryMore(dst[k:])
			return n
		}
		return n
	}
	n, _ := s.cfg.IDs.Fill(s.ctx, dst)
	return n
}

// tryMore takes ids for dst from the ring again after a take threw away
// ids of a lost worker, while it keeps finding some.
func (s *Snowflake) tryMore(dst []int64) int {
	n := 0
	for n < len(dst) {
		k, _ := s.ring.TakeN(dst[n:])
		if k == 0 {
			return n
		}
		kept := s.held(dst[n : n+k])
		n += kept
		if kept == 0 {
			if _, ok := s.holder.Holds(); !ok {
				return n
			}
		}
	}
	return n
}

// SnowflakeStats is a snapshot of the ring.
type SnowflakeStats struct {
	Ring    ringbuf.Stats
	Len     int
	Cap     int
	Dropped uint64 // ids thrown away for being older than MaxAge
	// LostWorker counts ids thrown away because the claim of their worker
	// id was lost (never handed out).
	LostWorker uint64
	// Served counts the ids Try and Next handed out, from the ring or
	// straight from the engine. Ring.Takes is no such count: the ring's
	// own upkeep (dropping stale ids, putting the fresh ones back) takes
	// too.
	Served uint64
}

// Stats returns the ring's counters.
func (s *Snowflake) Stats() SnowflakeStats {
	return SnowflakeStats{Ring: s.ring.Stats(), Len: s.ring.Len(), Cap: s.ring.Cap(), Dropped: s.drops.Load(), LostWorker: s.lost.Load(),
		Served: s.served.Load()}
}

// Close stops the refills. The ids left in the ring are a gap. Idempotent.
func (s *Snowflake) Close() error {
	var err error
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
		err = s.ring.Close()
	})
	return err
}
