package responder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// answers only 503 (its fence has passed), after the fact. Requests of one
// subscription are served one at a time, in the order the node received
// them.
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
	sub, err := r.cfg.Conn.Subscribe(wire.MonoPrefix+name, func(msg *nats.Msg) { r.serveMono(src, name, msg) })
	if err != nil {
		return nil, fmt.Errorf("responder: subscribing to %s%s: %w", wire.MonoPrefix, name, err)
	}
	r.monoSubs[sub] = struct{}{}
	return func() {
		r.monoMu.Lock()
		defer r.monoMu.Unlock()
		if _, ok := r.monoSubs[sub]; ok {
			delete(r.monoSubs, sub)
			_ = sub.Unsubscribe()
		}
	}, nil
}

// stopMono ends every subscription of ServeMono; later calls are refused.
func (r *Responder) stopMono() {
	r.monoMu.Lock()
	defer r.monoMu.Unlock()
	for sub := range r.monoSubs {
		_ = sub.Unsubscribe()
	}
	r.monoSubs = nil
}

// serveMono answers one request of leaf.mono.<tag>: the body is a count,
// as on leaf.segment.<tag>, and the ids come in strictly increasing order.
func (r *Responder) serveMono(src MonoSource, tag string, msg *nats.Msg) {
	if msg.Header.Get(wire.ProbeHeader) != "" {
		r.probes.mono.Add(1)
		body, _ := json.Marshal(wire.ProbeReply{Node: r.cfg.Node, Instance: r.cfg.Instance, Subject: wire.SubjectMono})
		if err := msg.Respond(body); err != nil {
			r.cfg.Logger.Debug("mono: answering a probe failed", "tag", tag, "err", err)
		}
		return
	}
	start := r.cfg.Clock.Now()
	count, err := wire.ParseCount(msg.Data, r.cfg.MaxBatch)
	if err != nil {
		r.failMono(tag, msg, fmt.Errorf("%w: %v", segment.ErrInvalid, err), start)
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Timeout)
	defer cancel()
	ids := make([]int64, 0, count)
	for len(ids) < count {
		first, k, err := src.Next(ctx, count-len(ids))
		if err != nil {
			r.failMono(tag, msg, err, start)
			return
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
