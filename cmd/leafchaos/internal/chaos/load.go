package chaos

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

	"github.com/leafmq/leafmq/client"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
)

// kind is one kind of request the clients make: a subject and a count, or
// a pool take.
type kind struct {
	name    string // e.g. "leaf.segment.a n=1", "leaf.snowflake batch", "pool leaf.pool.snowflake"
	subject string
	batch   bool // a count in [2, MaxBatch]; else one id
	pool    bool // pool.Take of subject
	client  bool // through the Go client (retries, failover), without prefetch
	engine  int
	class   int // clsSegment…: the row of the availability figures
	space   *idSpace
	weight  int
	stats   *kindStats // of this kind
	subj    *kindStats // of every kind on the same subject
}

// load is the clients: request workers paced by one schedule, and pool
// takers paced by another. Every id taken goes into its id space.
type load struct {
	cfg     *Config
	conns   []*nats.Conn
	jss     []jetstream.JetStream
	clients []*client.Client // one per connection, without prefetch
	kinds   []*kind          // request kinds, picked by weight
	pools   []*kind          // pool kinds, taken in turn
	total   int              // sum of weights
	tl      *timeline
	av      *availTL
	// strikes counts the faults struck so far: a request that sees it
	// change between its send and its answer was in flight when one struck.
	strikes atomic.Int64

	errMu   sync.Mutex
	errLog  []failure // every failure, up to maxFailures
	errLost int64     // failures beyond that

	monoMu  sync.Mutex
	monoOps []mono.Op // successful calls of the monotonic tag, since t0
	t0      time.Time

	inflight atomic.Int64 // requests and takes in flight
	dropped  atomic.Int64 // schedule slots no worker was free for
	stopAt   atomic.Int64 // unix ns the load stopped
}

// connect opens cfg.Connections client connections to the cluster.
func (l *load) connect(urls string) error {
	for i := range l.cfg.Connections {
		nc, err := nats.Connect(urls,
			nats.Name(fmt.Sprintf("leafchaos-client-%d", i)),
			nats.MaxReconnects(-1),
			nats.ReconnectWait(100*time.Millisecond),
			nats.ReconnectJitter(50*time.Millisecond, 0),
			nats.RetryOnFailedConnect(true),
			nats.ReconnectBufSize(8<<20),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				l.cfg.Logger.Debug("chaos: client connection", "err", err)
			}),
		)
		if err != nil {
			return fmt.Errorf("client connection: %w", err)
		}
		l.conns = append(l.conns, nc)
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		l.jss = append(l.jss, js)
		// Per attempt half the raw requests' timeout; the call as a whole
		// gets twice it (request).
		cl, err := client.New(nc, client.WithoutPrefetch(), client.WithTimeout(l.cfg.Timeout/2),
			client.WithBackoff(10*time.Millisecond, 200*time.Millisecond))
		if err != nil {
			return err
		}
		l.clients = append(l.clients, cl)
	}
	return nil
}

func (l *load) close() {
	for _, cl := range l.clients {
		cl.Close()
	}
	for _, nc := range l.conns {
		nc.Close()
	}
}

// run puts load on the cluster until ctx ends and waits for every request
// in flight.
func (l *load) run(ctx context.Context) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, l.cfg.Concurrency)
	for w := range l.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(l.cfg.Seed), uint64(w)))
			buf := make([]int64, 0, l.cfg.MaxBatch)
			nc, cl := l.conns[w%len(l.conns)], l.clients[w%len(l.clients)]
			for range slots {
				k := l.pick(rng)
				n := 1
				if k.batch {
					n = 2 + rng.IntN(l.cfg.MaxBatch-1)
				}
				if k.client {
					buf = l.viaClient(cl, k, n, buf[:0])
					continue
				}
				buf = l.request(nc, k, n, buf[:0])
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(slots)
		pace(ctx, l.cfg.Rate, func() {
			select {
			case slots <- struct{}{}:
			default:
				l.dropped.Add(1)
			}
		})
	}()
	if len(l.pools) > 0 && l.cfg.PoolRate > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem := make(chan struct{}, 4)
			var twg sync.WaitGroup
			i := 0
			pace(ctx, l.cfg.PoolRate, func() {
				select {
				case sem <- struct{}{}:
				default:
					l.dropped.Add(1)
					return
				}
				k, js := l.pools[i%len(l.pools)], l.jss[i%len(l.jss)]
				i++
				twg.Add(1)
				go func() {
					defer twg.Done()
					defer func() { <-sem }()
					l.take(ctx, js, k)
				}()
			})
			twg.Wait()
		}()
	}
	<-ctx.Done()
	l.stopAt.Store(time.Now().UnixNano())
	wg.Wait()
}

// pace calls f rate times a second, on one schedule from its start (slot
// k is due at start + k/rate), until ctx ends.
func pace(ctx context.Context, rate int, f func()) {
	start := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var issued int64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			due := int64(now.Sub(start).Seconds()*float64(rate)) - issued
			for ; due > 0; due-- {
				issued++
				f()
			}
		}
	}
}

func (l *load) pick(rng *rand.Rand) *kind {
	x := rng.IntN(l.total)
	for _, k := range l.kinds {
		if x < k.weight {
			return k
		}
		x -= k.weight
	}
	return l.kinds[len(l.kinds)-1]
}

// request asks k.subject for n ids (binary replies) and records the outcome.
func (l *load) request(nc *nats.Conn, k *kind, n int, buf []int64) []int64 {
	msg := wire.NewRequest(k.subject, n, true)
	k.stats.sent.Add(1)
	k.subj.sent.Add(1)
	l.inflight.Add(1)
	strikes := l.strikes.Load()
	sent := time.Now().UnixNano()
	reply, err := nc.RequestMsg(msg, l.cfg.Timeout)
	done := time.Now().UnixNano()
	l.inflight.Add(-1)
	code := ""
	switch {
	case errors.Is(err, nats.ErrTimeout):
		code = CodeTimeout
	case errors.Is(err, nats.ErrNoResponders):
		code = CodeNoResponders
	case err != nil:
		code = CodeOther
	default:
		var we *wire.Error
		if errors.As(wire.ReplyError(reply), &we) {
			code, err = we.Code, we
			break
		}
		buf, err = wire.DecodeIDs(buf, reply.Data, true)
		if err != nil || len(buf) != n || !positive(buf) {
			code = CodeBadReply
		}
	}
	l.outcome(k, sent, done, strikes, code, err, buf)
	return buf
}

// clientPrefix marks the subjects of the kinds that go through the Go
// client, so that they get rows of their own in the report.
const clientPrefix = "client "

// viaClient asks for n ids through the Go client, as an application would:
// it retries timeouts, 503s and missing responders within the call's
// deadline, so only a fault longer than that is visible to it.
func (l *load) viaClient(cl *client.Client, k *kind, n int, buf []int64) []int64 {
	k.stats.sent.Add(1)
	k.subj.sent.Add(1)
	l.inflight.Add(1)
	strikes := l.strikes.Load()
	sent := time.Now().UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), 2*l.cfg.Timeout)
	var ids []int64
	var err error
	switch k.engine {
	case engSnowflake:
		ids, err = cl.SnowflakeN(ctx, n)
	case engMono:
		ids, err = cl.MonoN(ctx, MonoTag, n)
	default:
		ids, err = cl.NextN(ctx, strings.TrimPrefix(k.subject, clientPrefix+wire.SegmentPrefix), n)
	}
	cancel()
	buf = append(buf, ids...)
	done := time.Now().UnixNano()
	if k.engine == engMono && err == nil {
		l.monoMu.Lock()
		for _, id := range ids {
			l.monoOps = append(l.monoOps, mono.Op{Send: time.Duration(sent - l.t0.UnixNano()), Recv: time.Duration(done - l.t0.UnixNano()), ID: id})
		}
		l.monoMu.Unlock()
	}
	l.inflight.Add(-1)
	code := ""
	var we *wire.Error
	switch {
	case err == nil:
		if !positive(buf) {
			code = CodeBadReply
		}
	case errors.As(err, &we):
		code = we.Code
	case errors.Is(err, client.ErrUnavailable):
		code = CodeClientUnavailable
	default:
		code = CodeOther
	}
	l.outcome(k, sent, done, strikes, code, err, buf)
	return buf
}

// take takes one batch from k's pool and records the outcome.
func (l *load) take(ctx context.Context, js jetstream.JetStream, k *kind) {
	k.stats.sent.Add(1)
	k.subj.sent.Add(1)
	l.inflight.Add(1)
	strikes := l.strikes.Load()
	sent := time.Now().UnixNano()
	// Not ctx: a take under way finishes (or its batch would be a gap
	// counted as a failure); the wait bounds it.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.Timeout)
	ids, err := pool.Take(tctx, js, k.subject, l.cfg.Timeout/2)
	cancel()
	done := time.Now().UnixNano()
	l.inflight.Add(-1)
	code := ""
	switch {
	case err == nil:
		if len(ids) == 0 || !positive(ids) {
			code = CodeBadReply
		}
	case errors.Is(err, pool.ErrEmpty):
		code = CodePoolEmpty
	case errors.Is(err, pool.ErrUsed):
		code = CodePoolUsed
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		code = CodeTimeout
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		code = CodeNoResponders
	default:
		code = CodeOther
	}
	l.outcome(k, sent, done, strikes, code, err, ids)
}

// failure is one failed request, for the per-fault breakdown.
type failure struct {
	sent, done int64
	code       string
	subject    string
}

// maxFailures bounds the failure log (a dead cluster fails every request).
const maxFailures = 500_000

// outcome records a request sent at unix ns sent and answered (or given
// up) at done; strikes is l.strikes as it was when it was sent.
func (l *load) outcome(k *kind, sent, done, strikes int64, code string, err error, ids []int64) {
	l.av.record(k.class, sent, done, code, l.strikes.Load() != strikes)
	if code != "" {
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		l.errMu.Lock()
		if len(l.errLog) < maxFailures {
			l.errLog = append(l.errLog, failure{sent, done, code, k.subject})
		} else {
			l.errLost++
		}
		l.errMu.Unlock()
		k.stats.fail(code, msg)
		k.subj.fail(code, msg)
		l.tl.record(k.engine, sent, false)
		if code == CodeBadReply {
			// A wrong count or id 0 is a failure, but the valid ids that
			// came are still checked: a broken reply may also repeat ids.
			var valid []int64
			for _, id := range ids {
				if id > 0 {
					valid = append(valid, id)
				}
			}
			k.space.add(done, valid)
		}
		return
	}
	k.space.add(done, ids)
	k.stats.success(done, len(ids))
	k.subj.success(done, len(ids))
	l.tl.record(k.engine, sent, true)
}

func positive(ids []int64) bool {
	for _, id := range ids {
		if id <= 0 {
			return false
		}
	}
	return true
}
