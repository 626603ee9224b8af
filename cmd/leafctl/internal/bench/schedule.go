package bench

import (
	"sync/atomic"
	"time"
)

// schedule hands out send slots to every worker of one run and decides when
// the run is over. It is shared by all workers.
//
// Without a rate a slot is "now". With a rate, slot k is due at
// start + k/rate on one schedule for all workers; a worker that takes a slot
// waits until it is due, and measures latency from the due time, not from
// when it managed to send. A server stall therefore shows up in the
// latencies of every request that should have been sent during it, instead
// of silently lowering the send rate (coordinated omission).
//
// Memory order: tickets and counted are independent counters, each used only
// through its own atomic Add, so every slot number and every counted request
// is handed out exactly once. done is a sticky hint that lets workers stop
// without touching the counters; a worker that misses it reaches the same
// verdict from the clock or the counters itself.
type schedule struct {
	now     func() time.Time // injected for tests
	start   time.Time        // slot 0 of a rated run
	measure time.Time        // slots before this are warm-up, not recorded
	end     time.Time        // no slot at or after this
	rate    int64            // slots per second; 0: as fast as possible
	limit   int64            // recorded requests at most; 0: no limit

	tickets atomic.Int64 // next slot number, rated runs only
	counted atomic.Int64 // recorded slots handed out, limited runs only
	done    atomic.Bool
}

func newSchedule(now func() time.Time, warmup, duration time.Duration, rate, limit int) *schedule {
	start := now()
	measure := start.Add(warmup)
	return &schedule{
		now:     now,
		start:   start,
		measure: measure,
		end:     measure.Add(duration),
		rate:    int64(rate),
		limit:   int64(limit),
	}
}

// next returns the next slot: when to send (the zero time means now) and
// whether the request is recorded. ok is false once the run is over.
func (s *schedule) next() (at time.Time, rec, ok bool) {
	if s.done.Load() {
		return time.Time{}, false, false
	}
	now := s.now()
	when := now
	if s.rate > 0 {
		k := s.tickets.Add(1) - 1
		// k/rate seconds without overflowing k*1e9 on long runs.
		off := time.Duration(k/s.rate)*time.Second + time.Duration(k%s.rate*int64(time.Second)/s.rate)
		at = s.start.Add(off)
		when = at
	}
	// The wall clock ends the run too: a client that fell behind the rate
	// does not work off its backlog past the end.
	if !when.Before(s.end) || !now.Before(s.end) {
		s.done.Store(true)
		return time.Time{}, false, false
	}
	rec = !when.Before(s.measure)
	if rec && s.limit > 0 && s.counted.Add(1) > s.limit {
		s.done.Store(true)
		return time.Time{}, false, false
	}
	return at, rec, true
}
