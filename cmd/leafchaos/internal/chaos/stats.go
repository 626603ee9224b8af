package chaos

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// Outcome codes of a request besides the wire codes (400, 404, 503, 500).
const (
	CodeTimeout      = "timeout"
	CodeNoResponders = "no_responders"
	CodeBadReply     = "bad_reply" // wrong count, id 0 or negative, undecodable
	CodePoolEmpty    = "pool_empty"
	CodePoolUsed     = "pool_used" // batch not confirmed for single use (thrown away, as it must be)
	CodeOther        = "other"
	// CodeClientUnavailable: the Go client (package client) gave up: every
	// attempt within its deadline failed.
	CodeClientUnavailable = "client_unavailable"
)

// Engines, for the timeline.
const (
	engSegment = iota
	engSnowflake
	engPool
	engMono
	numEngines
)

// kindStats counts the outcomes of one kind of request. Safe for concurrent use.
type kindStats struct {
	sent, ok, ids atomic.Int64

	// lastOK is the unix ns of the latest success (or of the start); a
	// success swaps it and records the gap since the previous one.
	lastOK atomic.Int64

	mu        sync.Mutex
	errors    map[string]int64
	samples   map[string]string // code -> the last message seen with it
	maxGap    time.Duration
	maxGapEnd int64 // unix ns the longest gap ended
}

func newKindStats(start int64) *kindStats {
	k := &kindStats{errors: map[string]int64{}, samples: map[string]string{}}
	k.lastOK.Store(start)
	return k
}

func (k *kindStats) success(now int64, ids int) {
	k.ok.Add(1)
	k.ids.Add(int64(ids))
	prev := k.lastOK.Swap(now)
	if gap := time.Duration(now - prev); gap > 0 {
		k.mu.Lock()
		if gap > k.maxGap {
			k.maxGap, k.maxGapEnd = gap, now
		}
		k.mu.Unlock()
	}
}

func (k *kindStats) fail(code, msg string) {
	k.mu.Lock()
	k.errors[code]++
	if msg != "" {
		k.samples[code] = msg
	}
	k.mu.Unlock()
}

// finish closes the last gap at end (unix ns).
func (k *kindStats) finish(end int64) {
	prev := k.lastOK.Load()
	k.mu.Lock()
	if gap := time.Duration(end - prev); gap > k.maxGap {
		k.maxGap, k.maxGapEnd = gap, end
	}
	k.mu.Unlock()
}

func (k *kindStats) errorsCopy() map[string]int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.errors)
}

// timeline counts outcomes per engine in fixed buckets of time, by the time
// the request was sent (failures are also logged one by one, see failure).
type timeline struct {
	t0     int64 // unix ns
	bucket int64 // ns
	sentOK [numEngines][]atomic.Int64
	sentKO [numEngines][]atomic.Int64
}

func newTimeline(t0 int64, span, bucket time.Duration) *timeline {
	n := int(span/bucket) + 2
	tl := &timeline{t0: t0, bucket: int64(bucket)}
	for e := range numEngines {
		tl.sentOK[e] = make([]atomic.Int64, n)
		tl.sentKO[e] = make([]atomic.Int64, n)
	}
	return tl
}

func (tl *timeline) index(t int64) int {
	i := int((t - tl.t0) / tl.bucket)
	return min(max(i, 0), len(tl.sentOK[0])-1)
}

func (tl *timeline) record(eng int, sent int64, ok bool) {
	if ok {
		tl.sentOK[eng][tl.index(sent)].Add(1)
		return
	}
	tl.sentKO[eng][tl.index(sent)].Add(1)
}

// sum adds the buckets of a series whose start lies in [from, to).
func (tl *timeline) sum(series []atomic.Int64, from, to int64) int64 {
	var n int64
	i := tl.index(from)
	if tl.t0+int64(i)*tl.bucket < from { // the bucket holding from starts before it
		i++
	}
	for ; i < len(series); i++ {
		if tl.t0+int64(i)*tl.bucket >= to {
			break
		}
		n += series[i].Load()
	}
	return n
}
