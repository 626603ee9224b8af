package responder

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leafmq/leafmq/wire"
)

// membership is a micro service in the queue group that the node joins
// and leaves on its own (the snowflake endpoints, and the segment endpoint
// with Config.SegmentConn), each time on a connection of its own, closed
// when it leaves: see SetSnowflake for why unsubscribing is not enough.
type membership struct {
	mu      sync.Mutex
	svc     micro.Service // while in the queue group, else nil
	conn    *nats.Conn    // the connection svc subscribes on
	stopped bool          // Stop began: a join refuses
	// carry keeps the endpoints' counters across a leave and a rejoin
	// (past): the segment endpoint's requests_total keeps counting while
	// the node comes and goes. Without it each rejoin starts at 0.
	carry bool
	past  map[string]micro.EndpointStats
}

// setLocked joins (on: dial a connection, add the service on it with add)
// or leaves the queue group. Idempotent.
func (m *membership) setLocked(on, stopping bool, dial func() (*nats.Conn, error),
	add func(*nats.Conn) (micro.Service, error), log func(msg string, args ...any)) error {
	if !on {
		return m.leaveLocked()
	}
	if m.stopped || stopping {
		return errors.New("responder: stopped")
	}
	if m.svc != nil {
		return nil
	}
	nc, err := dial()
	if err != nil {
		return fmt.Errorf("responder: connect: %w", err)
	}
	svc, err := add(nc)
	if err != nil {
		nc.Close()
		return err
	}
	m.svc, m.conn = svc, nc
	// The server must have the subscriptions before we say we are in.
	if err := nc.FlushTimeout(2 * time.Second); err != nil {
		log("flush after joining a queue group", "service", svc.Info().Name, "err", err)
	}
	return nil
}

// leaveDrain bounds how long a leave lets the requests already delivered
// to a membership's endpoints be answered before it closes their
// connection.
const leaveDrain = 2 * time.Second

// leaveLocked stops the service and closes its connection. Requests
// already delivered are answered first (a drain) while the connection is
// up; replies that workers send go out on Config.Conn, so closing this one
// loses none of them.
func (m *membership) leaveLocked() error {
	svc, nc := m.svc, m.conn
	m.svc, m.conn = nil, nil
	if svc == nil {
		return nil
	}
	if m.carry {
		// Read before Stop, which drops the endpoints: a request the
		// drain still answers is not counted.
		m.past = addStats(m.past, svc.Stats().Endpoints)
	}
	err := svc.Stop()
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if nc.Drain() == nil { // else not connected: nothing to drain, and the server holds none of its subscriptions
		t := time.NewTimer(leaveDrain) // the drain's own time on the wire, not the node's clock
		select {
		case <-closed:
		case <-t.C:
		}
		t.Stop()
	}
	nc.Close()
	return err
}

// service is the service while in the queue group, else nil.
func (m *membership) service() micro.Service {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.svc
}

// endpoints are the stats of the membership's endpoints: the service's
// now, plus, with carry, those of the services before it (also while out
// of the group).
func (m *membership) endpoints() []*micro.EndpointStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	var now []*micro.EndpointStats
	if m.svc != nil {
		now = m.svc.Stats().Endpoints
	}
	if len(m.past) == 0 {
		return now
	}
	sum := addStats(nil, now)
	for name, p := range m.past {
		s := sum[name]
		s.Name, s.Subject, s.QueueGroup = p.Name, p.Subject, p.QueueGroup
		s.NumRequests += p.NumRequests
		s.NumErrors += p.NumErrors
		s.ProcessingTime += p.ProcessingTime
		if s.LastError == "" {
			s.LastError = p.LastError
		}
		sum[name] = s
	}
	out := make([]*micro.EndpointStats, 0, len(sum))
	for _, s := range sum {
		s := s
		if s.NumRequests > 0 {
			s.AverageProcessingTime = s.ProcessingTime / time.Duration(s.NumRequests)
		}
		out = append(out, &s)
	}
	return out
}

// addStats adds eps to the totals in sum, by endpoint name.
func addStats(sum map[string]micro.EndpointStats, eps []*micro.EndpointStats) map[string]micro.EndpointStats {
	if sum == nil {
		sum = map[string]micro.EndpointStats{}
	}
	for _, e := range eps {
		s, ok := sum[e.Name]
		if !ok {
			s = micro.EndpointStats{Name: e.Name, Subject: e.Subject, QueueGroup: e.QueueGroup}
		}
		s.NumRequests += e.NumRequests
		s.NumErrors += e.NumErrors
		s.ProcessingTime += e.ProcessingTime
		if e.LastError != "" {
			s.LastError = e.LastError
		}
		sum[e.Name] = s
	}
	return sum
}

// SetSegment joins (on) or leaves (off) the queue group of the segment
// endpoint, leaf.segment.<tag>: a node whose round trip to NATS is too
// slow for its answers to reach clients in time leaves while a node that
// is not slow serves segment, so NATS sends every request to the nodes
// that answer in time. The segment endpoint is then a micro service of its
// own (wire.SegmentService, like the service that keeps the admin
// endpoints), each membership on a connection of Config.SegmentConn (as
// SetSnowflake). Idempotent; an error if the Responder has no SegmentConn
// (the endpoint is then part of the main service, in the group for good)
// or is stopped. Start joins.
func (r *Responder) SetSegment(on bool) error {
	if r.cfg.SegmentConn == nil {
		return errors.New("responder: no Config.SegmentConn: the segment endpoint cannot leave its queue group")
	}
	r.seg.mu.Lock()
	defer r.seg.mu.Unlock()
	return r.seg.setLocked(on, r.ctx.Err() != nil, r.cfg.SegmentConn, r.addSegmentService, r.cfg.Logger.Warn)
}

// addSegmentService adds the segment endpoint as a service of its own on nc.
func (r *Responder) addSegmentService(nc *nats.Conn) (micro.Service, error) {
	svc, err := micro.AddService(nc, micro.Config{
		Name:        wire.SegmentService,
		Version:     r.cfg.Version,
		Description: "leafmq segment ids",
		QueueGroup:  wire.QueueGroup,
		Metadata:    map[string]string{"node": r.cfg.Node, "engine": "segment"},
	})
	if err != nil {
		return nil, fmt.Errorf("responder: add segment service: %w", err)
	}
	if err := svc.AddGroup("leaf").AddEndpoint("segment", micro.HandlerFunc(r.handleSegment),
		micro.WithEndpointSubject(strings.TrimPrefix(wire.SegmentPrefix+"*", "leaf."))); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("responder: add segment endpoint: %w", err)
	}
	return svc, nil
}

// SegmentService is the micro service whose endpoint answers
// leaf.segment.<tag> while the node is in its queue group, else nil:
// without Config.SegmentConn, the main service (Service), always in.
func (r *Responder) SegmentService() micro.Service {
	if r.cfg.SegmentConn == nil {
		return r.svc
	}
	return r.seg.service()
}
