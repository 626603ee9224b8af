package kvlease

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/clock"
)

// watch follows every message stored in the bucket, as it is stored, and
// remembers on this process's monotonic clock when it last saw a record
// (not a marker) of each key. That is the evidence a lease freed by
// anything other than its holder's release is judged by: whatever the
// bucket says now (a TTL marker, a delete, nothing), a holder renewed no
// later than the last record of its key this process saw arrive, so it
// stops serving within a TTL of that arrival. Markers the server writes
// and markers written by hand look alike (the server's TTL marker can be
// forged, and the stream's settings edited around a hand put), so none of
// them is taken for proof.
//
// Only an unbroken run of deliveries counts: a gap in the stream's
// sequence (a message removed before this process got it, around a
// consumer reset) starts the run again from the moment it is seen.
type watch struct {
	clock   clock.Clock // only its monotonic readings are used
	mono0   time.Time
	created time.Time // of the stream followed: a bucket made again is another
	first   uint64    // the first stream sequence followed
	cc      jetstream.ConsumeContext

	mu    sync.Mutex
	since time.Duration            // since(mono0) when the unbroken run began; <0 while there is none
	next  uint64                   // the stream sequence expected next
	seen  map[string]time.Duration // key -> since(mono0) its latest record arrived
	last  map[string]msgID         // key -> its latest message delivered, of any kind
}

// msgID names a stored message: its stream sequence and the server's
// timestamp (a bucket made again reuses sequences).
type msgID struct {
	seq uint64
	at  int64
}

func (w *watch) now() time.Duration { return w.clock.Since(w.mono0) }

// startWatch starts following the bucket's stream from its next message.
func startWatch(ctx context.Context, js jetstream.JetStream, c clock.Clock, bucket, prefix string) (*watch, error) {
	stream := "KV_" + bucket
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info := s.CachedInfo()
	first := info.State.LastSeq + 1
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{prefix + ">"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    first,
		HeadersOnly:    true,
	})
	if err != nil {
		return nil, err
	}
	w := &watch{clock: c, mono0: c.Now(), created: info.Created, first: first, since: -1, next: first,
		seen: map[string]time.Duration{}, last: map[string]msgID{}}
	// The ordered consumer recreates itself after an error, from the
	// message after the last one delivered; one removed meanwhile shows as
	// a gap. A consumer that stays down delivers nothing more, and every
	// key written since is "not seen yet": a whole TTL.
	w.cc, err = cons.Consume(func(m jetstream.Msg) { w.deliver(m, prefix) })
	if err != nil {
		return nil, err
	}
	// Every message stored before the consumer existed was sent before
	// now: the run begins here, not earlier.
	w.mu.Lock()
	if w.since < 0 {
		w.since = w.now()
	}
	w.mu.Unlock()
	return w, nil
}

func (w *watch) deliver(m jetstream.Msg, prefix string) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	seq := md.Sequence.Stream
	if seq != w.next || w.since < 0 {
		w.since = now // a gap, or back to an earlier message: what was between is unknown
	}
	w.next = seq + 1
	key := strings.TrimPrefix(m.Subject(), prefix)
	w.last[key] = msgID{seq, md.Timestamp.UnixNano()}
	if h := m.Headers(); h.Get("KV-Operation") == "" && h.Get(jetstream.MarkerReasonHeader) == "" {
		w.seen[key] = now
	}
}

// wait is how long after at a new holder of key must not serve: a TTL from when
// this process last saw a record of the key arrive, or from the start of
// the unbroken run if it saw none. last is the key's last message in the
// bucket: nil if there is none or it was stored before the watch began.
// The watch must have delivered every message up to the stream sequence
// upTo (the stream's last, in the bucket the watch follows), and last; it
// is waited for up to catchUp; ok is false if it did not come (a message
// removed before it was delivered never comes).
func (w *watch) wait(ctx context.Context, key string, last *msgID, upTo uint64, ttl, catchUp time.Duration, at time.Time) (d time.Duration, ok bool) {
	deadline := w.clock.Now().Add(catchUp)
	for {
		w.mu.Lock()
		if w.since >= 0 && w.next > upTo && (last == nil || w.last[key] == *last) {
			from := max(w.since, w.seen[key])
			left := from + ttl - at.Sub(w.mono0)
			w.mu.Unlock()
			return max(left, 0), true
		}
		w.mu.Unlock()
		if w.clock.Now().After(deadline) || ctx.Err() != nil {
			return ttl, false
		}
		t := w.clock.NewTimer(5 * time.Millisecond)
		select {
		case <-t.C():
		case <-ctx.Done():
		}
		t.Stop()
	}
}

func (w *watch) stop() {
	if w.cc != nil {
		w.cc.Stop()
	}
}

func (w *watch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("watch{since %v, next %d, keys %d}", w.since, w.next, len(w.seen))
}
