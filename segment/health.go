package segment

import (
	"sort"
	"sync"
	"time"
)

// LoadHealth follows an engine's loads (its LoadEvents) per tag, to tell
// which tags' loads fail now, since when and how often, and when a tag
// recovers. The zero value is ready to use; it is safe for concurrent use.
type LoadHealth struct {
	mu    sync.Mutex
	fails map[string]LoadFailure // by tag, while failing
}

// LoadFailure is a tag's run of failed loads.
type LoadFailure struct {
	Tag      string
	Failures int       // failed loads in a row
	Since    time.Time // of the first of them
	Err      error     // of the last
}

// Record notes ev, a load that ended at now. For a failed load it returns
// the tag's run of failures, this one counted; for a load that succeeds
// after failures, the run it ends and true; otherwise false.
func (h *LoadHealth) Record(ev LoadEvent, now time.Time) (LoadFailure, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev.Err != nil {
		if h.fails == nil {
			h.fails = map[string]LoadFailure{}
		}
		f := h.fails[ev.Tag]
		if f.Failures == 0 {
			f.Tag, f.Since = ev.Tag, now
		}
		f.Failures++
		f.Err = ev.Err
		h.fails[ev.Tag] = f
		return f, false
	}
	f, failed := h.fails[ev.Tag]
	delete(h.fails, ev.Tag)
	return f, failed
}

// Failing returns the tags whose loads fail now, sorted by tag.
func (h *LoadHealth) Failing() []LoadFailure {
	h.mu.Lock()
	out := make([]LoadFailure, 0, len(h.fails))
	for _, f := range h.fails {
		out = append(out, f)
	}
	h.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out
}
