package bench

import (
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestScheduleRate(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	start := c.t
	// 1000/s: slot k due at start + k ms; warm-up 10ms, then 20ms recorded.
	s := newSchedule(c.now, 10*time.Millisecond, 20*time.Millisecond, 1000, 0)
	var recorded int
	for k := 0; ; k++ {
		at, rec, ok := s.next()
		if !ok {
			if k != 30 {
				t.Fatalf("ran out after %d slots, want 30", k)
			}
			break
		}
		if want := start.Add(time.Duration(k) * time.Millisecond); !at.Equal(want) {
			t.Fatalf("slot %d due %v, want %v", k, at.Sub(start), want.Sub(start))
		}
		if rec != (k >= 10) {
			t.Fatalf("slot %d recorded %v", k, rec)
		}
		if rec {
			recorded++
		}
	}
	if recorded != 20 {
		t.Errorf("%d recorded slots, want 20", recorded)
	}
	if _, _, ok := s.next(); ok {
		t.Error("schedule restarted after it ended")
	}
}

func TestScheduleRateBacklogEndsWithTheClock(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	s := newSchedule(c.now, 0, time.Second, 1000, 0)
	if _, _, ok := s.next(); !ok { // slot 0, on time
		t.Fatal("no first slot")
	}
	c.t = c.t.Add(time.Second) // the client stalled for the whole run
	if at, _, ok := s.next(); ok {
		t.Fatalf("slot 1 (due %v) handed out after the end of the run", at)
	}
}

func TestScheduleRateNoDrift(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	s := newSchedule(c.now, 0, 1<<62, 3, 0) // 1/3 s does not divide evenly
	s.tickets.Store(3_000_000_000)          // far into a long run
	at, _, ok := s.next()
	if !ok || !at.Equal(c.t.Add(1_000_000_000*time.Second)) {
		t.Errorf("slot 3e9 at 3/s due %v", at.Sub(c.t))
	}
}

func TestScheduleUnratedClockAndLimit(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	s := newSchedule(c.now, time.Second, 10*time.Second, 0, 3)
	if at, rec, ok := s.next(); !ok || rec || !at.IsZero() {
		t.Fatalf("warm-up slot: %v %v %v", at, rec, ok)
	}
	c.t = c.t.Add(time.Second)
	for i := range 3 {
		if _, rec, ok := s.next(); !ok || !rec {
			t.Fatalf("recorded slot %d: %v %v", i, rec, ok)
		}
	}
	if _, _, ok := s.next(); ok {
		t.Fatal("a fourth request with Requests 3")
	}

	s = newSchedule(c.now, 0, 10*time.Second, 0, 0)
	c.t = c.t.Add(10 * time.Second)
	if _, _, ok := s.next(); ok {
		t.Fatal("a slot at the end of the run")
	}
}
