package chaos

import (
	"cmp"
	"slices"
	"sync"
)

// run is the ids [start, end) handed out in one reply (or several adjacent
// ones), first seen at unix ns at: segment ranges and snowflake batches are
// runs of consecutive ids, so a run is 24 bytes for up to thousands of ids,
// and a single id costs 24 bytes at worst — 10M single ids fit in 240 MB.
type run struct{ start, end, at int64 }

// idSpace records every id taken from one id space (a segment tag, or
// snowflake) and finds duplicates at the end. Safe for concurrent use.
type idSpace struct {
	mu   sync.Mutex
	runs []run
	ids  int64
	max  int64 // the highest id added
	// per time window: for the per-tag trend
	window int64 // window length in ns, > 0
	t0     int64 // unix ns of window 0
	trend  []trendWindow
}

// trendWindow is what one window of time saw of an id space.
type trendWindow struct {
	IDs int64 `json:"ids"`
	Min int64 `json:"min"`
	Max int64 `json:"max"`
}

func newIDSpace(t0, window int64) *idSpace {
	return &idSpace{t0: t0, window: max(window, 1)}
}

// add records ids taken at unix ns now. Adjacent ids are folded into runs.
func (s *idSpace) add(now int64, ids []int64) {
	if len(ids) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids += int64(len(ids))
	lo, hi := ids[0], ids[0]
	defer func() { s.max = max(s.max, hi) }()
	for _, id := range ids {
		lo, hi = min(lo, id), max(hi, id)
		if n := len(s.runs); n > 0 && s.runs[n-1].end == id {
			s.runs[n-1].end++
			continue
		}
		s.runs = append(s.runs, run{id, id + 1, now})
	}
	w := int((now - s.t0) / s.window)
	if w < 0 {
		w = 0
	}
	for len(s.trend) <= w {
		s.trend = append(s.trend, trendWindow{})
	}
	tw := &s.trend[w]
	if tw.IDs == 0 {
		tw.Min, tw.Max = lo, hi
	} else {
		tw.Min, tw.Max = min(tw.Min, lo), max(tw.Max, hi)
	}
	tw.IDs += int64(len(ids))
}

// dupResult is what check found.
type dupResult struct {
	IDs        int64   `json:"ids"`
	Duplicates int64   `json:"duplicates"` // ids seen more than once (each extra sighting counts)
	Examples   []int64 `json:"examples,omitempty"`
	Min, Max   int64
	Runs       int `json:"runs"`
}

// check sorts the runs and counts every id covered more than once. It may
// be called once, after the last add. Each duplicate found is also passed
// to attr (if not nil) with the time of the later of its two sightings (to
// the resolution of a run), so that it can be blamed on a fault.
func (s *idSpace) check(attr func(at, n int64)) dupResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := dupResult{IDs: s.ids, Runs: len(s.runs)}
	if len(s.runs) == 0 {
		return r
	}
	slices.SortFunc(s.runs, func(a, b run) int { return cmp.Compare(a.start, b.start) })
	r.Min = s.runs[0].start
	covered := s.runs[0].end // every id below covered was seen
	coveredAt := s.runs[0].at
	for _, x := range s.runs[1:] {
		if x.start < covered {
			d := min(x.end, covered) - x.start
			r.Duplicates += d
			if attr != nil {
				attr(max(x.at, coveredAt), d)
			}
			for id := x.start; id < x.start+d && len(r.Examples) < 10; id++ {
				r.Examples = append(r.Examples, id)
			}
		}
		if x.end > covered {
			covered, coveredAt = x.end, x.at
		}
	}
	r.Max = covered - 1
	return r
}

// maxSeen is the highest id added so far (0: none).
func (s *idSpace) maxSeen() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max
}

// trendWindows returns a copy of the per-window figures.
func (s *idSpace) trendWindows() []trendWindow {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.trend)
}

// checkSoFar is check over a copy of the runs added so far: it may be
// called while adds go on, and check may still be called at the end.
func (s *idSpace) checkSoFar() dupResult {
	s.mu.Lock()
	c := &idSpace{runs: slices.Clone(s.runs), ids: s.ids}
	s.mu.Unlock()
	return c.check(nil)
}
