package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func recv(c <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-c:
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestOr(t *testing.T) {
	if clock.Or(nil) != clock.Real {
		t.Fatal("Or(nil) is not Real")
	}
	f := clock.NewFake(t0)
	if clock.Or(f) != f {
		t.Fatal("Or(f) is not f")
	}
}

func TestRealIsMonotonic(t *testing.T) {
	a := clock.Real.Now()
	// A reading that carries the monotonic clock prints "m=".
	if s := a.String(); !containsM(s) {
		t.Fatalf("Real.Now() = %s carries no monotonic reading", s)
	}
	if d := clock.Real.Since(a); d < 0 {
		t.Fatalf("Since = %v", d)
	}
	tm := clock.Real.NewTimer(time.Millisecond)
	<-tm.C()
	tk := clock.Real.NewTicker(time.Millisecond)
	<-tk.C()
	tk.Stop()
	<-clock.Real.After(time.Millisecond)
}

func containsM(s string) bool {
	for i := 0; i+2 < len(s); i++ {
		if s[i:i+3] == "m=+" {
			return true
		}
	}
	return false
}

func TestFakeNowSinceUntil(t *testing.T) {
	f := clock.NewFake(t0)
	f.Advance(3 * time.Second)
	if got := f.Now(); !got.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("Now = %v", got)
	}
	if got := f.Since(t0); got != 3*time.Second {
		t.Fatalf("Since = %v", got)
	}
	if got := f.Until(t0.Add(5 * time.Second)); got != 2*time.Second {
		t.Fatalf("Until = %v", got)
	}
	f.Advance(-time.Second) // a step back of the wall clock
	if got := f.Since(t0); got != 2*time.Second {
		t.Fatalf("Since after a step back = %v", got)
	}
}

func TestFakeTimer(t *testing.T) {
	f := clock.NewFake(t0)
	tm := f.NewTimer(time.Second)
	f.Advance(999 * time.Millisecond)
	if _, ok := recv(tm.C()); ok {
		t.Fatal("fired early")
	}
	f.Advance(time.Millisecond)
	if v, ok := recv(tm.C()); !ok || !v.Equal(t0.Add(time.Second)) {
		t.Fatalf("fired %v %v, want at %v", v, ok, t0.Add(time.Second))
	}
	f.Advance(time.Hour)
	if _, ok := recv(tm.C()); ok {
		t.Fatal("a timer fired twice")
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reports it armed")
	}
	tm = f.NewTimer(time.Second)
	if f.Timers() != 1 {
		t.Fatalf("Timers = %d with one armed", f.Timers())
	}
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reports it not armed")
	}
	f.Advance(time.Hour)
	if _, ok := recv(tm.C()); ok {
		t.Fatal("a stopped timer fired")
	}
	if f.Timers() != 0 {
		t.Fatalf("Timers = %d after Stop", f.Timers())
	}
}

func TestFakeTimerStopDropsAnUnreadFire(t *testing.T) {
	f := clock.NewFake(t0)
	tm := f.NewTimer(time.Second)
	f.Advance(time.Second)
	tm.Stop()
	if _, ok := recv(tm.C()); ok {
		t.Fatal("a value fired before Stop was received after it")
	}
	tk := f.NewTicker(time.Second)
	f.Advance(time.Second)
	tk.Stop()
	if _, ok := recv(tk.C()); ok {
		t.Fatal("a tick before Stop was received after it")
	}
}

func TestFakeTimerZeroFiresAtOnce(t *testing.T) {
	f := clock.NewFake(t0)
	if _, ok := recv(f.NewTimer(0).C()); !ok {
		t.Fatal("NewTimer(0) did not fire")
	}
	if _, ok := recv(f.After(-time.Second)); !ok {
		t.Fatal("After(-1s) did not fire")
	}
}

func TestFakeTicker(t *testing.T) {
	f := clock.NewFake(t0)
	tk := f.NewTicker(time.Second)
	for i := 1; i <= 3; i++ {
		f.Advance(time.Second)
		if v, ok := recv(tk.C()); !ok || !v.Equal(t0.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("tick %d: %v %v", i, v, ok)
		}
	}
	// Ticks that come while one is unread are dropped: one is kept.
	f.Advance(5 * time.Second)
	if v, ok := recv(tk.C()); !ok || !v.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("kept tick %v %v, want the first of the five", v, ok)
	}
	if _, ok := recv(tk.C()); ok {
		t.Fatal("more than one tick kept")
	}
	f.Advance(999 * time.Millisecond)
	if _, ok := recv(tk.C()); ok {
		t.Fatal("ticked between its ticks")
	}
	f.Advance(time.Millisecond)
	if v, ok := recv(tk.C()); !ok || !v.Equal(t0.Add(9*time.Second)) {
		t.Fatalf("tick %v %v, want at 9s: the period holds after dropped ticks", v, ok)
	}
	tk.Stop()
	f.Advance(time.Hour)
	if _, ok := recv(tk.C()); ok {
		t.Fatal("a stopped ticker ticked")
	}
}

// Advance fires each timer in order, each sending its own time.
func TestFakeAdvanceFiresInOrder(t *testing.T) {
	f := clock.NewFake(t0)
	a := f.NewTimer(3 * time.Second)
	b := f.NewTimer(time.Second)
	tk := f.NewTicker(2 * time.Second)
	defer tk.Stop()
	f.Advance(10 * time.Second)
	for _, c := range []struct {
		name string
		c    <-chan time.Time
		at   time.Duration
	}{{"a", a.C(), 3 * time.Second}, {"b", b.C(), time.Second}, {"ticker", tk.C(), 2 * time.Second}} {
		if v, ok := recv(c.c); !ok || v.Sub(t0) != c.at {
			t.Errorf("%s fired %v (%v), want at %v", c.name, v.Sub(t0), ok, c.at)
		}
	}
	if f.Since(t0) != 10*time.Second {
		t.Fatalf("clock at %v after Advance", f.Since(t0))
	}
}

func TestFakeSetBackFiresNothing(t *testing.T) {
	f := clock.NewFake(t0)
	tm := f.NewTimer(time.Second)
	f.Set(t0.Add(-time.Hour))
	if _, ok := recv(tm.C()); ok {
		t.Fatal("a step back fired a timer")
	}
	f.Set(t0.Add(time.Second))
	if _, ok := recv(tm.C()); !ok {
		t.Fatal("the timer did not fire at its deadline")
	}
}

func TestFakeBlockUntil(t *testing.T) {
	f := clock.NewFake(t0)
	armed := make(chan clock.Timer)
	go func() { armed <- f.NewTimer(time.Second) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	tm := <-armed
	tm.Stop()
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if err := f.BlockUntil(short, 1); err == nil {
		t.Fatal("BlockUntil returned with no timer armed")
	}
}

func TestWithNow(t *testing.T) {
	f := clock.NewFake(t0)
	off := t0.Add(time.Hour)
	c := clock.WithNow(f, func() time.Time { return off })
	if !c.Now().Equal(off) || c.Since(t0) != time.Hour || c.Until(t0) != -time.Hour {
		t.Fatalf("readings %v %v %v", c.Now(), c.Since(t0), c.Until(t0))
	}
	tm := c.NewTimer(time.Second) // the base's timer
	f.Advance(time.Second)
	if _, ok := recv(tm.C()); !ok {
		t.Fatal("the base's timer did not fire")
	}
	// On Real, the readings keep the monotonic clock when now does.
	r := clock.WithNow(nil, func() time.Time { return time.Now().Add(time.Minute) })
	if s := r.Now().String(); !containsM(s) {
		t.Fatalf("an offset Real reading %s lost its monotonic reading", s)
	}
}

func TestRealTimers(t *testing.T) {
	f := clock.NewFake(t0)
	for _, c := range []struct {
		c    clock.Clock
		want bool
	}{
		{clock.Real, true},
		{clock.WithNow(clock.Real, time.Now), true},
		{clock.WithNow(nil, time.Now), true},
		{f, false},
		{clock.WithNow(f, f.Now), false},
	} {
		if got := clock.RealTimers(c.c); got != c.want {
			t.Errorf("RealTimers(%T) = %v, want %v", c.c, got, c.want)
		}
	}
}

// Timers made, stopped and read while the clock moves: run with -race.
func TestFakeConcurrent(t *testing.T) {
	f := clock.NewFake(t0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			f.Advance(time.Millisecond)
		}
	}()
	fired := 0
	for i := range 200 {
		tm := f.NewTimer(time.Duration(i%5) * time.Millisecond)
		select {
		case <-tm.C():
			fired++
		default:
			tm.Stop()
		}
		_ = f.Now()
	}
	<-done
	tk := f.NewTicker(time.Millisecond)
	defer tk.Stop()
	f.Advance(time.Millisecond)
	if _, ok := recv(tk.C()); !ok {
		t.Fatal("no tick after the clock moved")
	}
	if f.Since(t0) != time.Second+time.Millisecond {
		t.Fatalf("clock at %v, want 1.001s", f.Since(t0))
	}
	t.Logf("%d of 200 timers had fired when read", fired)
}

// TestSleep: Sleep returns when the clock passes d, or with ctx's error.
func TestSleep(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(context.Background(), f, time.Second) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.Advance(999 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Sleep returned %v before its second", err)
	default:
	}
	f.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if err := clock.Sleep(cctx, f, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep with a canceled ctx: %v", err)
	}
}
