package natsconn

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// rttEvery is how often a Conn measures its round trip to NATS.
var rttEvery = 5 * time.Second

// rttTimeout bounds one measurement.
const rttTimeout = 10 * time.Second

// rttMeter measures the round trip to the NATS server (as nc.RTT
// does: a PING behind whatever the connection has queued, and its PONG)
// every rttEvery on a goroutine of its own, so the request path pays
// nothing.
// An answer from a node reaches a client no sooner than one round trip
// plus the client's own, so a node whose round trip is above its
// --max-nats-rtt is not ready for the subjects it answers through NATS
// (its readiness reads RTT).
//
// A measurement in flight counts for as long as it has taken so far: a
// link that turns slow, or silent, is seen as slow within rttEvery plus
// the bound, not only when the measurement ends (which may take
// rttTimeout).
type rttMeter struct {
	nc   *nats.Conn
	last atomic.Int64 // nanoseconds of the last measurement; 0: none since (re)connecting
	prev atomic.Int64 // of the one before it
	// since is when the measurement in flight began, as nanoseconds
	// after base plus one (monotonic), 0 when none is. measure stores
	// last before it clears since, and rtt loads since before last: a
	// reader that sees since cleared sees the last that replaced it
	// (sync/atomic is sequentially consistent).
	since atomic.Int64
	base  time.Time
	every time.Duration
	ctx   context.Context // cancelled by StopRTT, which ends a measurement in flight
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// StartRTT starts measuring the round trip to NATS, every 5 s on a
// goroutine of its own until StopRTT; after Connect.
func (c *Conn) StartRTT() {
	m := &rttMeter{nc: c.nc, base: time.Now(), every: rttEvery}
	m.ctx, m.stop = context.WithCancel(context.Background())
	c.rtt.Store(m)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := c.opts.Clock.NewTicker(m.every)
		defer t.Stop()
		for {
			m.measure()
			select {
			case <-m.ctx.Done():
				return
			case <-t.C():
			}
		}
	}()
}

// StopRTT stops measuring (and ends a measurement in flight), and waits
// for the meter's goroutine. Nothing to stop before StartRTT.
func (c *Conn) StopRTT() {
	if m := c.rtt.Load(); m != nil {
		m.stop()
		m.wg.Wait()
	}
}

// measure takes one round trip. While the connection is down there is no
// round trip to tell (readiness says not connected), and a reconnected
// connection is measured afresh.
func (m *rttMeter) measure() {
	if !m.nc.IsConnected() {
		m.prev.Store(0)
		m.last.Store(0)
		return
	}
	start := time.Now()
	m.since.Store(int64(start.Sub(m.base)) + 1)
	ctx, cancel := context.WithTimeout(m.ctx, rttTimeout)
	err := m.nc.FlushWithContext(ctx)
	cancel()
	d := time.Since(start)
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) && m.ctx.Err() == nil:
		// At least this long.
	default: // stopping, or the connection went down
		d = 0
	}
	m.prev.Store(m.last.Load())
	m.last.Store(int64(d))
	m.since.Store(0)
}

// rtt is the round trip to NATS as last measured, or as long as the
// measurement in flight has taken if that is longer; 0 when unknown (not
// measuring, or not connected).
func (m *rttMeter) rtt() time.Duration {
	if m == nil {
		return 0
	}
	var pending time.Duration
	if s := m.since.Load(); s != 0 {
		pending = time.Since(m.base.Add(time.Duration(s - 1)))
	}
	return max(time.Duration(m.last.Load()), pending)
}

// RTT is the round trip to NATS as last measured, or as long as the
// measurement in flight has taken if that is longer; 0 when unknown (not
// measuring, or not connected).
func (c *Conn) RTT() time.Duration { return c.rtt.Load().rtt() }

// SteadyRTT is the lower of the last two measured round trips (one
// measurement apart, 5 s), 0 when unknown: a link that stays slow, not a
// moment in which the whole machine stalled, as every node on it would
// see at once. What a node yields its queue groups and monotonic tags on,
// so that nodes stalled together do not all step aside together.
func (c *Conn) SteadyRTT() time.Duration {
	m := c.rtt.Load()
	if m == nil {
		return 0
	}
	return min(time.Duration(m.last.Load()), time.Duration(m.prev.Load()))
}
