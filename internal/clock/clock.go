package clock

import (
	"context"
	"time"
)

// Clock reads the time and makes timers and tickers. Real is the
// machine's clock; Fake is a clock that tests move by hand.
type Clock interface {
	// Now is the current time. Real's carries the monotonic reading.
	Now() time.Time
	// Since is Now().Sub(t).
	Since(t time.Time) time.Duration
	// Until is t.Sub(Now()).
	Until(t time.Time) time.Duration
	// NewTimer is time.NewTimer on this clock.
	NewTimer(d time.Duration) Timer
	// NewTicker is time.NewTicker on this clock; d must be positive.
	NewTicker(d time.Duration) Ticker
	// After is time.After on this clock.
	After(d time.Duration) <-chan time.Time
}

// Timer is a time.Timer of a Clock.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// Ticker is a time.Ticker of a Clock.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the machine's clock: time.Now and the time package's timers.
var Real Clock = realClock{}

// Or returns c, or Real when c is nil: the default of a Clock field.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

// Sleep waits d on a timer of c, or until ctx ends (then ctx.Err()).
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) Since(t time.Time) time.Duration        { return time.Since(t) }
func (realClock) Until(t time.Time) time.Duration        { return time.Until(t) }
func (realClock) NewTimer(d time.Duration) Timer         { return realTimer{time.NewTimer(d)} }
func (realClock) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// WithNow is base with its readings (Now, Since, Until) taken from now;
// its timers and tickers stay base's. A fault drill offsets or steps a
// clock this way, and a test that only sets the time uses it.
func WithNow(base Clock, now func() time.Time) Clock {
	return withNow{Clock: Or(base), now: now}
}

type withNow struct {
	Clock
	now func() time.Time
}

func (w withNow) Now() time.Time                  { return w.now() }
func (w withNow) Since(t time.Time) time.Duration { return w.now().Sub(t) }
func (w withNow) Until(t time.Time) time.Duration { return t.Sub(w.now()) }

// RealTimers reports whether c's timers are the time package's (Real, or
// WithNow over Real): code may then wait on the machine's clock in ways a
// Clock does not offer, such as spinning for a few microseconds.
func RealTimers(c Clock) bool {
	if w, ok := c.(withNow); ok {
		c = w.Clock
	}
	return c == Real
}
