package natsconn

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// rttEvery is how often a Conn measures each of its connections' round
// trip to NATS; a measurement is bounded by it too.
var rttEvery = 5 * time.Second

// The node's round trip to NATS is that of its worst connection: the main
// one (NC) and each membership connection (DialMember) not closed yet.
// NATS delivers a queue group's requests to the node on the membership's
// connection, possibly through another server of the cluster than NC's:
// a membership on a slow or frozen server loses the node's share of that
// queue group while NC is fine, so the node is as slow as that connection
// (not ready; SlowYield leaves the queue group, which closes the
// connection, and joins again on a new one, dialed to NC's server first).
//
// Each connection is measured (as nc.RTT does: a PING behind whatever the
// connection has queued, and its PONG) every rttEvery on a goroutine of
// its own, so the request path pays nothing. An answer from a node
// reaches a client no sooner than one round trip plus the client's own,
// so a node whose round trip is above its --max-nats-rtt is not ready for
// the subjects it answers through NATS (its readiness reads RTT).
//
// A measurement in flight counts for as long as it has taken so far, and
// one that is not answered within rttEvery ends there, counted as that
// long (slow, not unknown): a connection whose server turns slow, or
// silent, is seen as slow by RTT within rttEvery plus the limit (5.5 s
// at --max-nats-rtt 500ms), and by SteadyRTT within two measurements
// (2×rttEvery) plus the limit (10.5 s): about when the pings give a silent
// connection up (pingEvery×pingsOut to ×(pingsOut+1)), and for good on a
// server that answers slowly, which the pings never give up.
type rttMeter struct {
	nc    *nats.Conn
	state atomic.Pointer[rttState] // nil until the first measurement began
}

// rttState is a meter's measurements, replaced whole so that a reader
// sees the last two and the one in flight of the same moment.
type rttState struct {
	last, prev time.Duration // 0: none since (re)connecting
	since      time.Time     // when the measurement in flight began; zero when none is
}

// meters are a Conn's round-trip meters.
type meters struct {
	all atomic.Pointer[[]*rttMeter] // NC's first, then the live memberships'; read without mu

	mu      sync.Mutex
	members []*nats.Conn       // DialMember's connections, not seen closed yet
	ctx     context.Context    // while measuring (StartRTT to StopRTT), else nil
	stop    context.CancelFunc // ends every meter and a measurement in flight
	wg      sync.WaitGroup
}

// StartRTT starts measuring the round trip of NC and of every membership
// connection (DialMember), every 5 s each on a goroutine of its own until
// StopRTT; after Connect.
func (c *Conn) StartRTT() {
	c.rtt.mu.Lock()
	defer c.rtt.mu.Unlock()
	if c.rtt.ctx != nil {
		return
	}
	c.rtt.ctx, c.rtt.stop = context.WithCancel(context.Background())
	c.rtt.all.Store(&[]*rttMeter{})
	if c.nc != nil {
		c.measureLocked(c.nc)
	}
	for _, nc := range c.rtt.members {
		c.measureLocked(nc)
	}
}

// StopRTT stops measuring (and ends the measurements in flight), and
// waits for the meters' goroutines. Nothing to stop before StartRTT.
func (c *Conn) StopRTT() {
	c.rtt.mu.Lock()
	stop := c.rtt.stop
	c.rtt.ctx, c.rtt.stop = nil, nil
	c.rtt.mu.Unlock()
	if stop != nil {
		stop()
	}
	c.rtt.wg.Wait()
}

// addMember counts nc among the node's connections, measured while the
// Conn measures, until it is closed.
func (c *Conn) addMember(nc *nats.Conn) {
	c.rtt.mu.Lock()
	defer c.rtt.mu.Unlock()
	c.rtt.members = slices.DeleteFunc(c.rtt.members, (*nats.Conn).IsClosed)
	c.rtt.members = append(c.rtt.members, nc)
	if c.rtt.ctx != nil {
		c.measureLocked(nc)
	}
}

// measureLocked starts nc's meter; it ends at StopRTT, or once nc is
// closed, leaving the node's round trip.
func (c *Conn) measureLocked(nc *nats.Conn) {
	m := &rttMeter{nc: nc}
	c.rtt.all.Store(ptr(append(slices.Clone(*c.rtt.all.Load()), m)))
	ctx := c.rtt.ctx
	c.rtt.wg.Add(1)
	go func() {
		defer c.rtt.wg.Done()
		t := c.opts.Clock.NewTicker(rttEvery)
		defer t.Stop()
		for {
			if nc.IsClosed() {
				c.dropMeter(m)
				return
			}
			m.measure(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
		}
	}()
}

// dropMeter removes the meter of a closed connection.
func (c *Conn) dropMeter(m *rttMeter) {
	c.rtt.mu.Lock()
	defer c.rtt.mu.Unlock()
	if all := c.rtt.all.Load(); all != nil {
		c.rtt.all.Store(ptr(slices.DeleteFunc(slices.Clone(*all), func(o *rttMeter) bool { return o == m })))
	}
	c.rtt.members = slices.DeleteFunc(c.rtt.members, func(o *nats.Conn) bool { return o == m.nc })
}

func ptr[T any](v T) *T { return &v }

// measure takes one round trip. While the connection is down there is no
// round trip to tell (readiness says NC is not connected; a membership's
// subscriptions are on no server), and a reconnected connection is
// measured afresh.
func (m *rttMeter) measure(ctx context.Context) {
	was := m.state.Load()
	if was == nil {
		was = &rttState{}
	}
	if !m.nc.IsConnected() {
		m.state.Store(&rttState{})
		return
	}
	start := time.Now()
	m.state.Store(&rttState{last: was.last, prev: was.prev, since: start})
	mctx, cancel := context.WithTimeout(ctx, rttEvery)
	err := m.nc.FlushWithContext(mctx)
	cancel()
	d := time.Since(start)
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		// At least this long.
	default: // stopping, or the connection went down or closed
		d = 0
	}
	m.state.Store(&rttState{last: d, prev: was.last})
}

// read is the meter's last two measurements and how long the one in
// flight has taken; all 0 once its connection is closed.
func (m *rttMeter) read() (last, prev, pending time.Duration) {
	s := m.state.Load()
	if s == nil || (m.nc != nil && m.nc.IsClosed()) {
		return 0, 0, 0
	}
	if !s.since.IsZero() {
		pending = time.Since(s.since)
	}
	return s.last, s.prev, pending
}

// rtt is the last measurement, or the one in flight if it has taken
// longer.
func (m *rttMeter) rtt() time.Duration {
	last, _, pending := m.read()
	return max(last, pending)
}

// steady is the lower of the last two measurements, the one in flight
// counting as the newer of two once it has taken longer than the last.
func (m *rttMeter) steady() time.Duration {
	last, prev, pending := m.read()
	return max(min(last, prev), min(pending, last))
}

// worst is the highest of f over the node's meters.
func (c *Conn) worst(f func(*rttMeter) time.Duration) time.Duration {
	all := c.rtt.all.Load()
	if all == nil {
		return 0
	}
	var w time.Duration
	for _, m := range *all {
		w = max(w, f(m))
	}
	return w
}

// RTT is the node's round trip to NATS: that of its slowest connection
// (NC or a membership's), as last measured, or as long as the measurement
// in flight has taken if that is longer; 0 when unknown (not measuring,
// or not connected).
func (c *Conn) RTT() time.Duration { return c.worst((*rttMeter).rtt) }

// SteadyRTT is the node's round trip to NATS that stays: of its slowest
// connection, the lower of the last two measurements (one measurement
// apart, 5 s; one in flight counts once it has taken longer than the
// last), 0 when unknown: a link that stays slow, not a moment in which the
// whole machine stalled, as every node on it would see at once. What a
// node yields its queue groups and monotonic tags on, so that nodes
// stalled together do not all step aside together.
func (c *Conn) SteadyRTT() time.Duration { return c.worst((*rttMeter).steady) }
