package clock

import (
	"context"
	"sync"
	"time"
)

// Fake is a Clock that moves only when told to (Advance, Set). Its timers
// and tickers fire inside Advance and Set, in the order they come due, each
// sending its own time. Code woken by one reads the clock only once Advance
// has returned, at the new time: a test that needs a loop to see each step
// advances by at most the loop's period and waits for the loop to arm its
// timer again (BlockUntil) before the next step. It is safe for concurrent
// use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	seq     int64         // creation order: ties fire in the order armed
	pending []*fakeTimer  // armed timers and tickers
	changed chan struct{} // closed and replaced when pending changes
}

// NewFake returns a Fake reading start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now is the Fake's time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since is Now().Sub(t).
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// Until is t.Sub(Now()).
func (f *Fake) Until(t time.Time) time.Duration { return t.Sub(f.Now()) }

// NewTimer arms a timer that fires once the Fake reaches Now()+d; d <= 0
// fires it at once.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.arm(d)
	return t
}

// NewTicker arms a ticker that fires every d of the Fake's time. Like
// time.Ticker it keeps one tick: ticks that come while the last one is
// still unread are dropped.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), period: d}
	t.arm(d)
	return (*fakeTicker)(t)
}

// After is NewTimer(d).C().
func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

// Advance moves the clock forward by d, firing what comes due on the way.
// A negative d moves it back (a step of the wall clock) and fires nothing.
func (f *Fake) Advance(d time.Duration) {
	f.Set(f.Now().Add(d))
}

// Set moves the clock to t, forward (firing what comes due up to t) or
// back (firing nothing; the timers keep their deadlines).
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		next := f.nextDue(t)
		if next == nil {
			break
		}
		f.now = next.when
		f.fire(next)
	}
	f.now = t
}

// nextDue is the earliest pending timer due at or before t.
func (f *Fake) nextDue(t time.Time) *fakeTimer {
	var next *fakeTimer
	for _, p := range f.pending {
		if p.when.After(t) {
			continue
		}
		if next == nil || p.when.Before(next.when) || p.when.Equal(next.when) && p.seq < next.seq {
			next = p
		}
	}
	return next
}

// fire delivers p's tick and re-arms a ticker. f.mu is held.
func (f *Fake) fire(p *fakeTimer) {
	select {
	case p.c <- p.when:
	default: // a tick is still unread: dropped, as time.Ticker does
	}
	if p.period > 0 {
		p.when = p.when.Add(p.period)
		return
	}
	f.remove(p)
}

func (f *Fake) add(p *fakeTimer) {
	f.seq++
	p.seq = f.seq
	f.pending = append(f.pending, p)
	f.notify()
}

func (f *Fake) remove(p *fakeTimer) bool {
	for i, q := range f.pending {
		if q == p {
			f.pending = append(f.pending[:i], f.pending[i+1:]...)
			f.notify()
			return true
		}
	}
	return false
}

func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Timers is the number of armed timers and tickers.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// BlockUntil waits until at least n timers and tickers are armed: the
// code under test is waiting on the clock. It returns ctx.Err() if ctx
// ends first.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		armed, changed := len(f.pending), f.changed
		f.mu.Unlock()
		if armed >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	when   time.Time
	period time.Duration // a ticker's; 0 for a timer
	seq    int64
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

// Stop disarms the timer; it reports whether it was armed. No value is
// received from C after Stop returns.
func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.drain()
	return t.f.remove(t)
}

// arm arms the new timer to fire d from now: at once if d <= 0.
func (t *fakeTimer) arm(d time.Duration) {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.when = t.f.now.Add(d)
	t.f.add(t)
	if d <= 0 && t.period == 0 {
		t.f.fire(t)
	}
}

func (t *fakeTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}

type fakeTicker fakeTimer

func (t *fakeTicker) C() <-chan time.Time { return t.c }

// Stop stops the ticker; no tick is received from C after it returns.
func (t *fakeTicker) Stop() { (*fakeTimer)(t).Stop() }
