package segment

import (
	"errors"
	"fmt"
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

// Refused reports whether a load failed for a reason of the tag alone,
// which lasts until an operator acts: an opaque tag whose key the node
// lacks, a mode conflict, a store below the ids already issued, a tag the
// store lost. Requests for it get their error (a 503 where another node,
// or a restart of the tag, may help); the node stays ready for every
// other tag (DESIGN invariant 8: readiness says so for that subject, here
// that tag, alone).
func (f LoadFailure) Refused() bool {
	return errors.Is(f.Err, ErrNoKey) || errors.Is(f.Err, ErrMode) ||
		errors.Is(f.Err, ErrBelowFloor) || errors.Is(f.Err, ErrTagDeleted)
}

// Problems sorts the failing tags into what makes the segment subject not
// ready (fatal: a tag whose loads fail with no ids left in its buffers,
// as state tells; state may be nil) and what it only warns of (a tag
// refused on this node, a tag still serving from its buffers).
func Problems(failing []LoadFailure, state func(tag string) (TagState, bool)) (fatal, warn []string) {
	for _, f := range failing {
		msg := fmt.Sprintf("segment store: loads of %s failing (%d times since %s)", f.Tag, f.Failures, f.Since.UTC().Format(time.RFC3339))
		switch {
		case f.Refused():
			warn = append(warn, fmt.Sprintf("segment: tag %s refused on this node: %v", f.Tag, f.Err))
		case state != nil && dry(state(f.Tag)):
			fatal = append(fatal, msg+", no ids left")
		default:
			warn = append(warn, msg+", still serving from buffers")
		}
	}
	return fatal, warn
}

// dry reports whether a tag the engine holds has no buffer with ids.
func dry(ts TagState, ok bool) bool {
	return ok && !ts.Segments[0].Ready && !ts.Segments[1].Ready
}
