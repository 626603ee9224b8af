package responder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// MonoSource hands out a monotonic tag's ids in strictly increasing
// order; mono.Leader implements it.
type MonoSource interface {
	// Next takes up to n (>= 1) ids and returns the first and the count of
	// a run of consecutive ids. An error that is not the caller's (this
	// node no longer leads the tag) should carry a 503 (wire.CodeOf).
	Next(ctx context.Context, n int) (first int64, k int, err error)
}

// ServeMono answers leaf.mono.<tag> from src until the returned stop is
// called (or the Responder stops). The node calls it while it leads the
// tag, so a request finds the one node that may answer, or no responder at
// all during a switch-over (the client asks again).
//
// It is a plain subscription, not the queue group: a frozen old leader's
// subscription stays on the server until it misses its pings (minutes),
// and in a queue group it would take its share of the requests, each of
// them then timing out. Outside one, every subscriber gets every request
// and the live leader's answer comes first; the old one, if it wakes,
// answers only 503 (its fence has passed), after the fact.
//
// Requests of one subscription are served one at a time, in the order the
// node received them, by one goroutine (runMono): src.Next is called
// serially, so the ids are strictly increasing in the order they are
// handed out. The subscription's own goroutine only stamps each request
// and queues it, and answers probes; a request that finds monoQueue
// requests queued, or that waited more than monoWait, is refused with
// ErrBusy (503) instead of being served late.
func (r *Responder) ServeMono(tag wire.Tag, src MonoSource) (stop func(), err error) {
	if tag.IsZero() || src == nil {
		return nil, fmt.Errorf("%w: responder: ServeMono needs a tag and a source", segment.ErrInvalid)
	}
	r.monoMu.Lock()
	defer r.monoMu.Unlock()
	if r.monoSubs == nil {
		return nil, errors.New("responder: stopped")
	}
	name := tag.String()
	ms := &monoSub{queue: make(chan monoReq, monoQueue), later: make(chan monoLater, monoQueue), done: make(chan struct{}),
		served: make(chan struct{})}
	ms.sub, err = r.cfg.Conn.Subscribe(wire.MonoPrefix+name, func(msg *nats.Msg) { r.receiveMono(ms, name, msg) })
	if err != nil {
		return nil, fmt.Errorf("responder: subscribing to %s%s: %w", wire.MonoPrefix, name, err)
	}
	r.monoSubs[ms] = struct{}{}
	r.wg.Add(2) // before Stop's wg.Wait: stopMono, which comes first, takes monoMu
	go r.runMono(ms, src, name)
	go r.runLater(ms, name)
	return func() {
		r.monoMu.Lock()
		defer r.monoMu.Unlock()
		if _, ok := r.monoSubs[ms]; ok {
			delete(r.monoSubs, ms)
			ms.stop()
		}
	}, nil
}

// monoQueue bounds the requests of one ServeMono subscription waiting to
// be served; monoWait bounds how long one waits. Past either the request
// is refused with ErrBusy: a client's deadline (1 s) allows monoWait, one
// request served before it (the largest batch takes tens of milliseconds)
// and its own; unbounded, a queue would hold a 1-id request behind every
// large batch queued before it (TestServeMonoShedsFlood).
const (
	monoQueue = 256
	monoWait  = 250 * time.Millisecond
)

// monoRefuseDelay is how long a refusal of a source that cannot serve
// (a 503: most often this node no longer leads the tag) is held back.
// Every subscriber gets every request of leaf.mono.<tag> and the client
// keeps the first reply: while an old leader's subscription outlives its
// lead (a frozen leader that woke), its prompt 503s would win the race
// against the new leader's ids for about half the requests. Held back,
// they reach the client only when no leader answered first.
const monoRefuseDelay = 100 * time.Millisecond

// monoSub is one subscription of ServeMono and the queue between its
// NATS goroutine (receiveMono) and the goroutine that serves it (runMono).
type monoSub struct {
	sub   *nats.Subscription
	queue chan monoReq
	later chan monoLater // refusals held back monoRefuseDelay (runLater)
	done  chan struct{}  // closed by stop: runMono refuses what is queued and ends
	// served is closed when runMono has ended: runLater sends its last
	// refusals only then, as the request runMono was serving when ms
	// stopped (a leader that just lost its lease) may still be refused
	// through later.
	served chan struct{}

	mu      sync.Mutex // guards stopped and the sends on queue
	stopped bool
}

// monoLater is a refusal runLater sends at due.
type monoLater struct {
	msg     *nats.Msg
	err     error
	at, due time.Time
}

// monoReq is a request of leaf.mono.<tag> and when it was received.
type monoReq struct {
	msg *nats.Msg
	at  time.Time
}

// stop ends runMono and drains the subscription: every request NATS
// delivered to it, up to the server's handling of the unsubscribe, still
// reaches the handler, which refuses it at once (503: the client asks
// again and finds the next leader) — an Unsubscribe would drop those the
// client holds unread, unanswered. Once stopped is set under mu the
// handler queues nothing, so every request queued is in the queue when
// runMono drains it.
func (ms *monoSub) stop() {
	ms.mu.Lock()
	if !ms.stopped {
		ms.stopped = true
		close(ms.done)
	}
	ms.mu.Unlock()
	if err := ms.sub.Drain(); err != nil {
		_ = ms.sub.Unsubscribe() // the connection is closed or closing: nothing more arrives
	}
}

// stopMono ends every subscription of ServeMono; later calls are refused.
func (r *Responder) stopMono() {
	r.monoMu.Lock()
	defer r.monoMu.Unlock()
	for ms := range r.monoSubs {
		ms.stop()
	}
	r.monoSubs = nil
}

// receiveMono runs on the subscription's goroutine and never waits: it
// answers a probe, and queues a request for runMono or refuses it at once
// when the queue is full.
func (r *Responder) receiveMono(ms *monoSub, tag string, msg *nats.Msg) {
	if msg.Header.Get(wire.ProbeHeader) != "" {
		r.probes.mono.Add(1)
		body, _ := json.Marshal(wire.ProbeReply{Node: r.cfg.Node, Instance: r.cfg.Instance, Subject: wire.SubjectMono})
		if err := msg.Respond(body); err != nil {
			r.cfg.Logger.Debug("mono: answering a probe failed", "tag", tag, "err", err)
		}
		return
	}
	at := r.cfg.Clock.Now()
	ms.mu.Lock()
	var err error
	switch {
	case ms.stopped:
		err = fmt.Errorf("%w: no longer serving leaf.mono.%s", segment.ErrClosed, tag)
	default:
		select {
		case ms.queue <- monoReq{msg: msg, at: at}:
		default:
			err = fmt.Errorf("%w: %d requests of leaf.mono.%s wait", ErrBusy, monoQueue, tag)
		}
	}
	ms.mu.Unlock()
	if err != nil {
		r.failMono(tag, msg, err, at)
	}
}

// runMono serves the requests ms queued, one at a time in their order,
// until ms stops; then it refuses what is left (a 503: the client asks
// again and finds the tag's next leader).
func (r *Responder) runMono(ms *monoSub, src MonoSource, tag string) {
	defer r.wg.Done()
	defer close(ms.served)
	for {
		select {
		case q := <-ms.queue:
			if waited := r.cfg.Clock.Since(q.at); waited > monoWait {
				r.failMono(tag, q.msg, fmt.Errorf("%w: waited %v for the requests of leaf.mono.%s before it",
					ErrBusy, waited.Round(time.Millisecond), tag), q.at)
				continue
			}
			if err := r.serveMono(src, tag, q.msg, q.at); err != nil {
				r.refuseLater(ms, tag, q.msg, err, q.at)
			}
		case <-ms.done:
			for {
				select {
				case q := <-ms.queue:
					r.failMono(tag, q.msg, fmt.Errorf("%w: no longer serving leaf.mono.%s", segment.ErrClosed, tag), q.at)
				default:
					return
				}
			}
		}
	}
}

// refuseLater refuses msg with err after monoRefuseDelay (runLater) when
// err is a 503 of the source, at once otherwise.
func (r *Responder) refuseLater(ms *monoSub, tag string, msg *nats.Msg, err error, at time.Time) {
	if wire.CodeOf(err) == wire.CodeUnavailable {
		select {
		case ms.later <- monoLater{msg: msg, err: err, at: at, due: r.cfg.Clock.Now().Add(monoRefuseDelay)}:
			return
		default:
		}
	}
	r.failMono(tag, msg, err, at)
}

// runLater sends the refusals refuseLater held back, each at its time, in
// order; once ms stops and runMono has ended (or the Responder stops) it
// sends what is left at once and ends.
func (r *Responder) runLater(ms *monoSub, tag string) {
	defer r.wg.Done()
	flush := func() {
		for {
			select {
			case l := <-ms.later:
				r.failMono(tag, l.msg, l.err, l.at)
			default:
				return
			}
		}
	}
	for {
		select {
		case l := <-ms.later:
			if d := r.cfg.Clock.Until(l.due); d > 0 {
				t := r.cfg.Clock.NewTimer(d)
				select {
				case <-t.C():
				case <-ms.done:
				case <-r.ctx.Done():
				}
				t.Stop()
			}
			r.failMono(tag, l.msg, l.err, l.at)
		case <-ms.served:
			flush()
			return
		case <-r.ctx.Done():
			flush()
			return
		}
	}
}

// monoRangeWait bounds how long a request of leaf.mono.<tag> waits for
// its leader's next range: a reservation takes one store round trip, and
// a store that does not answer within it gets the client a 503 (held back
// monoRefuseDelay) within its 1 s deadline, an answer it can act on,
// rather than silence: monoWait in the queue, monoRangeWait and
// monoRefuseDelay add up to 750 ms.
const monoRangeWait = 400 * time.Millisecond

// serveMono answers one request of leaf.mono.<tag>, received at start: the
// body is a count, as on leaf.segment.<tag>, and the ids come in strictly
// increasing order. An error of the source is returned, not answered
// (runMono holds a 503 back, refuseLater).
func (r *Responder) serveMono(src MonoSource, tag string, msg *nats.Msg, start time.Time) error {
	count, err := wire.ParseCount(msg.Data, r.cfg.MaxBatch)
	if err != nil {
		r.failMono(tag, msg, fmt.Errorf("%w: %v", segment.ErrInvalid, err), start)
		return nil
	}
	ctx, cancel := context.WithTimeout(r.ctx, min(r.cfg.Timeout, monoRangeWait))
	defer cancel()
	ids := make([]int64, 0, count)
	for len(ids) < count {
		first, k, err := src.Next(ctx, count-len(ids))
		if err != nil {
			return err
		}
		for i := range k {
			ids = append(ids, first+int64(i))
		}
	}
	var body []byte
	if wire.WantsBinary(msg.Header) {
		body = wire.AppendBinary(nil, ids)
	} else {
		body = wire.AppendDecimal(nil, ids)
	}
	if err := msg.Respond(body); err != nil {
		r.cfg.Logger.Debug("mono: respond failed", "tag", tag, "err", err)
	}
	r.observe(start, "mono", tag, "200", len(ids))
	return nil
}

// failMono answers a request of leaf.mono.<tag> with err's code; a wait for
// a range that ran out of time is a 503 whatever the last load's error was
// (a switch-over: the client asks again).
func (r *Responder) failMono(tag string, msg *nats.Msg, err error, start time.Time) {
	code := wire.CodeOf(err)
	if errors.Is(err, context.DeadlineExceeded) {
		code = wire.CodeUnavailable
	}
	reply := nats.NewMsg(msg.Reply)
	reply.Header.Set(wire.ErrorCodeHeader, code)
	reply.Header.Set(wire.ErrorHeader, err.Error())
	if err := msg.RespondMsg(reply); err != nil {
		r.cfg.Logger.Debug("mono: respond failed", "tag", tag, "err", err)
	}
	r.observe(start, "mono", tag, code, 0)
}
