package responder

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// SetSnowflake joins (on) or leaves (off) the queue group of the snowflake
// endpoints, leaf.snowflake and leaf.snowflake.<key>. A node leaves while
// its clock is behind the last time it used, or while it holds no
// confirmed worker claim, so NATS sends its share to the other nodes; with
// no other node, requesters get "no responders". It is a separate micro
// service (same name and queue group) so it can come and go without the
// segment endpoints. Idempotent; an error if the Responder has no
// Snowflake source or is stopped.
//
// Each membership has a connection of its own (Config.SnowflakeConn),
// closed when the node leaves: the server drops a closed connection's
// subscriptions whatever state it was in, so the node holds at most one
// subscription per snowflake subject. Leaving by unsubscribing alone is
// not enough: nats.go resends a subscription that is draining while the
// connection reconnects and then forgets it, and the server goes on
// routing a share of the queue group to it, where requests go unanswered
// (TestSnowflakeRejoinAfterServerRestart).
func (r *Responder) SetSnowflake(on bool) error {
	if on && r.cfg.Snowflake == nil {
		return errors.New("responder: no snowflake source configured")
	}
	r.sf.mu.Lock()
	defer r.sf.mu.Unlock()
	return r.sf.setLocked(on, r.ctx.Err() != nil, r.cfg.SnowflakeConn, r.addSnowflakeService, r.cfg.Logger.Warn)
}

// addSnowflakeService adds the snowflake endpoints as a service of their
// own on nc.
func (r *Responder) addSnowflakeService(nc *nats.Conn) (micro.Service, error) {
	svc, err := micro.AddService(nc, micro.Config{
		Name:        wire.SnowflakeService,
		Version:     r.cfg.Version,
		Description: "leafmq snowflake ids",
		QueueGroup:  wire.QueueGroup,
		Metadata:    map[string]string{"node": r.cfg.Node, "engine": "snowflake"},
	})
	if err != nil {
		return nil, fmt.Errorf("responder: add snowflake service: %w", err)
	}
	g := svc.AddGroup("leaf")
	if err := errors.Join(
		g.AddEndpoint("snowflake", micro.HandlerFunc(r.handleSnowflake), micro.WithEndpointSubject(strings.TrimPrefix(wire.SnowflakeSubject, "leaf."))),
		g.AddEndpoint("snowflake-key", micro.HandlerFunc(r.handleSnowflake), micro.WithEndpointSubject(strings.TrimPrefix(wire.SnowflakePrefix+"*", "leaf."))),
	); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("responder: add snowflake endpoints: %w", err)
	}
	return svc, nil
}

// SnowflakeService is the snowflake micro service while it is in the queue
// group, else nil.
func (r *Responder) SnowflakeService() micro.Service { return r.sf.service() }

// handleSnowflake answers leaf.snowflake and leaf.snowflake.<key> like
// handleSegment: at once from the ring when it holds every id asked for,
// else through a worker (which may wait for the next tick).
func (r *Responder) handleSnowflake(req micro.Request) {
	r.active.Add(1)
	defer r.active.Add(-1)
	var start time.Time
	if r.cfg.Observe != nil {
		start = r.cfg.Clock.Now()
	}
	if subj := req.Subject(); subj != wire.SnowflakeSubject {
		key := subj[len(wire.SnowflakePrefix):]
		if key == "decode" {
			// NATS delivers a message to one member of a queue group across
			// every subscription of the group that matches it, so either the
			// decode endpoint or this wildcard gets it: answer it here too.
			r.handleDecode(req)
			return
		}
		if key == wire.ProbeToken {
			r.answerProbe(req, wire.SubjectSnowflake)
			return
		}
		if _, err := wire.ParseTag(key); err != nil {
			r.observe(start, "snowflake", "", r.fail(req, fmt.Errorf("%w: key: %w", segment.ErrInvalid, err)), 0)
			return
		}
	}
	n, err := wire.ParseCount(req.Data(), r.cfg.MaxBatch)
	if err != nil {
		r.observe(start, "snowflake", "", r.fail(req, fmt.Errorf("%w: %v", segment.ErrInvalid, err)), 0)
		return
	}
	bp := r.bufs.Get().(*[]int64)
	if cap(*bp) < n {
		*bp = make([]int64, n)
	}
	have := r.cfg.Snowflake.Try((*bp)[:n])
	j := job{req: req, start: start, sf: true, ids: bp, n: n, have: have}
	if have == n {
		r.finish(j)
		return
	}
	if err := r.enqueue(j); err != nil {
		r.observe(start, "snowflake", "", r.fail(req, err), 0)
		r.bufs.Put(bp)
	}
}

// handleStatus answers leaf.admin.status with this node's status. Every
// node answers (no queue group).
func (r *Responder) handleStatus(req micro.Request) {
	r.respondJSON(req, r.cfg.Status())
}

// handleDecode answers leaf.snowflake.decode: the body is a decimal id.
func (r *Responder) handleDecode(req micro.Request) {
	body := strings.TrimSpace(string(req.Data()))
	id, err := strconv.ParseInt(body, 10, 64)
	if err != nil || id < 0 {
		r.fail(req, fmt.Errorf("%w: body must be a snowflake id, a decimal integer 0-%d, not %q", segment.ErrInvalid, int64(1<<63-1), body))
		return
	}
	r.respondJSON(req, snowflake.DecodeReply(r.cfg.Layout, id))
}

// handleTime answers leaf.admin.time with this node's clock. Every node
// answers (no queue group).
func (r *Responder) handleTime(req micro.Request) {
	r.respondJSON(req, wire.NodeTime{Node: r.cfg.Node, UnixNano: r.cfg.Clock.Now().UnixNano()})
}
