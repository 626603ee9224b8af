package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/jskv"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// Defaults of Options.
const (
	DefaultBucket  = "leaf_mono"
	DefaultTTL     = 5 * time.Second
	DefaultTimeout = 3 * time.Second
)

// Options configure a Lease. Zero values mean the defaults.
type Options struct {
	Bucket   string
	Replicas int // of a bucket Open creates; default 1
	// TTL: whole seconds, at least 1s (the server keeps message TTLs in
	// seconds). Default 5s.
	TTL time.Duration
	// Timeout bounds each call. Default 3s.
	Timeout time.Duration
	// Clock stamps the records and measures the waits of a grant (on its
	// monotonic readings). Default clock.Real.
	Clock clock.Clock
}

// Lease is a mono.Lease on a JetStream KV bucket.
type Lease struct {
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	opts    Options
	prefix  string     // the bucket's subject prefix, $KV.<bucket>.
	getSubj string     // the stream leader's message get
	mu      sync.Mutex // guards w
	w       *watch     // when this process saw each key's last record
}

// catchUp is how long Acquire waits for the watch to have seen a key's
// last message before it waits a whole TTL instead.
const catchUp = 500 * time.Millisecond

// releasedHeader marks the delete marker of a Release with the holder;
// releasedRevHeader with the revision it released.
const (
	releasedHeader    = "Leaf-Released"
	releasedRevHeader = "Leaf-Released-Rev"
)

// history is how many messages the bucket keeps per key: a Release's
// marker and the record it released, so that Acquire can tell the two
// belong together (and a marker written by hand does not pass for one).
const history = 2

type record struct {
	Holder string `json:"holder"`
	At     int64  `json:"at"` // unix ms of the write, for operators
}

// Open opens (creating it if needed, with per-key TTLs on) the bucket.
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Lease, error) {
	if opts.Bucket == "" {
		opts.Bucket = DefaultBucket
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	opts.Clock = clock.Or(opts.Clock)
	if opts.TTL < time.Second || opts.TTL%time.Second != 0 {
		return nil, fmt.Errorf("%w: mono lease ttl %v must be whole seconds, at least 1s", segment.ErrInvalid, opts.TTL)
	}
	cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	kv, err := openBucket(cctx, js, opts)
	if err != nil {
		return nil, err
	}
	l := &Lease{js: js, kv: kv, opts: opts, prefix: "$KV." + opts.Bucket + ".", getSubj: jskv.GetSubject(js, opts.Bucket)}
	if err := l.checkBucket(cctx); err != nil {
		return nil, err
	}
	if l.w, err = startWatch(cctx, js, opts.Clock, opts.Bucket, l.prefix); err != nil {
		return nil, fail(cctx, "watch bucket "+opts.Bucket, err)
	}
	return l, nil
}

// openBucket opens the bucket, creating it if needed, with per-key TTLs
// on and the history Acquire reads.
func openBucket(ctx context.Context, js jetstream.JetStream, opts Options) (jetstream.KeyValue, error) {
	kv, err := jskv.OpenOrCreate(ctx, js, jetstream.KeyValueConfig{
		Bucket:         opts.Bucket,
		Description:    "leafmq: leaders of monotonic tags",
		History:        history,
		Storage:        jetstream.FileStorage,
		Replicas:       opts.Replicas,
		LimitMarkerTTL: opts.TTL,
	})
	if errors.Is(err, jskv.ErrNoKeyTTL) {
		if err = allowTTL(ctx, js, opts); err == nil {
			kv, err = js.KeyValue(ctx, opts.Bucket)
		}
		if errors.Is(err, segment.ErrInvalid) {
			return nil, err
		}
	}
	if err != nil {
		return nil, fail(ctx, "open bucket "+opts.Bucket, err)
	}
	if err := keepHistory(ctx, js, kv); err != nil {
		return nil, fail(ctx, "open bucket "+opts.Bucket, err)
	}
	return kv, nil
}

// ttlDisabledCode is JetStream's error code for a message with a TTL sent
// to a stream without per-message TTLs.
const ttlDisabledCode = 10166

// ttlDisabled reports whether err says the stream has per-message TTLs off.
func ttlDisabled(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == ttlDisabledCode
}

// allowTTL turns on the per-message TTLs of a bucket that has them off
// (made by hand without --marker-ttl): with them off every grant fails and
// the tags have no leader. It is safe with no wait of its own: no lease
// was ever granted in such a bucket (a grant is a write with a TTL, which
// the stream refuses), and the Acquire that follows judges the bucket as
// any other — a bucket made again under this process gets a whole TTL
// from the watch that starts on it, and one found so at Open a whole TTL
// from Open. The server allows turning TTLs on, never off. When it
// refuses, the error wraps segment.ErrInvalid: the leader reports it.
func allowTTL(ctx context.Context, js jetstream.JetStream, opts Options) error {
	s, err := js.Stream(ctx, "KV_"+opts.Bucket)
	if err != nil {
		return fail(ctx, "turn on per-key TTLs of bucket "+opts.Bucket, err)
	}
	cfg := s.CachedInfo().Config
	if cfg.AllowMsgTTL && cfg.SubjectDeleteMarkerTTL > 0 {
		return nil
	}
	cfg.AllowMsgTTL = true
	if cfg.SubjectDeleteMarkerTTL == 0 {
		cfg.SubjectDeleteMarkerTTL = opts.TTL
	}
	cfg.AllowRollup, cfg.DenyPurge = true, false // as the server requires of delete markers
	_, err = js.UpdateStream(ctx, cfg)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil || jskv.Unavailable(err) || jskv.Transient(err):
		return fail(ctx, "turn on per-key TTLs of bucket "+opts.Bucket, err)
	}
	return fmt.Errorf("%w: mono kvlease: bucket %q has no per-key TTLs and turning them on failed: %v; "+
		"delete it (nats kv del %s) and let leafd make it again", segment.ErrInvalid, opts.Bucket, err, opts.Bucket)
}

// streamGone reports whether err says the bucket's stream does not exist
// (deleted by hand: nats kv del --bucket).
func streamGone(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) ||
		(errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamNotFound)
}

// Close stops following the bucket.
func (l *Lease) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.stop()
	return nil
}

// TTL implements mono.Lease.
func (l *Lease) TTL() time.Duration { return l.opts.TTL }

func (l *Lease) value(holder string) []byte {
	b, _ := json.Marshal(record{Holder: holder, At: l.opts.Clock.Now().UnixMilli()}) // cannot fail
	return b
}

// Acquire implements mono.Lease.
func (l *Lease) Acquire(ctx context.Context, tag, holder string) (mono.Grant, error) {
	if _, err := wire.ParseTag(tag); err != nil {
		return mono.Grant{}, err
	}
	// The caller counts Wait from when it sent the acquire, just before
	// this call: every wait is measured from here, not from when it was
	// worked out (the reads and the watch's catch-up come in between).
	entry := l.opts.Clock.Now()
	cctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	kept, err := l.kept(cctx, tag)
	if streamGone(err) {
		// A bucket deleted by hand is made again, as at Open: leases in it
		// are gone with it, and the new bucket's keys are judged as any
		// bucket made again — a whole TTL's wait (wait), so a leader that
		// holds a lease of the old bucket has stepped down before anyone
		// serves under a new one.
		if _, err = openBucket(cctx, l.js, l.opts); err == nil {
			kept, err = l.kept(cctx, tag)
		}
	}
	if err != nil {
		return mono.Grant{}, fail(cctx, "acquire "+tag, err)
	}
	// Create, conditional on the message the wait was decided on still
	// being the key's last: a holder that took the key meanwhile and was
	// deleted by hand must not pass for the marker read above.
	var last uint64
	if len(kept) > 0 {
		last = kept[len(kept)-1].Sequence
		if headers(kept[len(kept)-1]) == nil {
			return mono.Grant{}, l.held(ctx, tag)
		}
	}
	// Freed by its holder's release: no wait. Anything else — the
	// server's TTL marker, a delete, purge or removal by hand, no message
	// at all — proves nothing of its own: a holder may serve until a TTL
	// after its last renewal, which arrived here no later than the last
	// record of the key this process saw.
	var wait time.Duration
	if !released(kept) {
		if wait, err = l.wait(cctx, tag, kept, entry); err != nil {
			return mono.Grant{}, fail(cctx, "acquire "+tag, err)
		}
	}
	grant := func() (*jetstream.PubAck, error) {
		return l.js.Publish(cctx, l.prefix+tag, l.value(holder),
			jetstream.WithExpectLastSequencePerSubject(last), jetstream.WithMsgTTL(l.opts.TTL))
	}
	ack, err := grant()
	if ttlDisabled(err) {
		// The bucket made again by hand without per-key TTLs: the wait
		// above was judged as in any bucket made again (allowTTL).
		if err = allowTTL(cctx, l.js, l.opts); err == nil {
			ack, err = grant()
		}
	}
	if jskv.Conflict(err) {
		return mono.Grant{}, l.held(ctx, tag)
	}
	if err != nil {
		return mono.Grant{}, fail(cctx, "acquire "+tag, err)
	}
	return mono.Grant{Tag: tag, Holder: holder, Rev: ack.Sequence, Wait: wait}, nil
}

// wait is the Grant.Wait of a key not released by its holder, judged by
// the watch (see watch). The watch must have delivered every message the
// stream holds up to its last sequence now, the key's last among them: a
// follower cut off from NATS while the holder renewed, whose missed
// renewals were then purged with the key, has not, and must not trust
// what it saw before the cut (TestFollowerAwayWaits). A
// bucket made again (found so, or when the watch does not catch up in
// time) gets a whole TTL and a new watch.
func (l *Lease) wait(ctx context.Context, tag string, kept []*jskv.StoredMsg, entry time.Time) (time.Duration, error) {
	l.mu.Lock()
	w := l.w
	l.mu.Unlock()
	whole := func() time.Duration { return l.opts.TTL + l.opts.Clock.Since(entry) } // a TTL from now
	same, upTo, err := l.follow(ctx, w)
	if err != nil || !same {
		return whole(), err
	}
	var last *msgID
	if len(kept) > 0 && kept[len(kept)-1].Sequence >= w.first {
		m := kept[len(kept)-1]
		last = &msgID{m.Sequence, m.Time.UnixNano()}
	}
	// No message, or one from before the watch began: sent before it
	// began (the bucket is the one the watch follows).
	if d, ok := w.wait(ctx, tag, last, upTo, l.opts.TTL, catchUp, entry); ok {
		return d, nil
	}
	return whole(), nil
}

// follow reports whether the watch w follows the bucket's stream as it is
// now, and the stream's last sequence; if not, a new watch takes its
// place.
func (l *Lease) follow(ctx context.Context, w *watch) (bool, uint64, error) {
	s, err := l.js.Stream(ctx, "KV_"+l.opts.Bucket)
	if err != nil {
		return false, 0, err
	}
	info := s.CachedInfo()
	if info.Created.Equal(w.created) {
		return true, info.State.LastSeq, nil
	}
	if err := l.checkBucket(ctx); err != nil { // made again, by hand
		return false, 0, err
	}
	nw, err := startWatch(ctx, l.js, l.opts.Clock, l.opts.Bucket, l.prefix)
	if err != nil {
		return false, 0, err
	}
	l.mu.Lock()
	if l.w == w {
		l.w = nw
		nw = w
	}
	l.mu.Unlock()
	nw.stop() // the old one, or the new one when another call replaced w first
	return false, 0, nil
}

// held is the ErrHeld of tag, naming its holder.
func (l *Lease) held(ctx context.Context, tag string) error {
	who, err := l.Holder(ctx, tag)
	if err != nil {
		who = "?"
	}
	return fmt.Errorf("%w: %q by %s", mono.ErrHeld, tag, who)
}

// kept returns the messages the bucket keeps for tag, oldest first.
func (l *Lease) kept(ctx context.Context, tag string) ([]*jskv.StoredMsg, error) {
	var out []*jskv.StoredMsg
	for seq := uint64(1); len(out) <= history; {
		m, err := jskv.MsgGet(ctx, l.js.Conn(), l.getSubj, jskv.MsgGetRequest{Seq: seq, NextFor: l.prefix + tag})
		if err != nil {
			return nil, err
		}
		if m == nil {
			break
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
	return out, nil
}

// released reports whether the messages kept for a key (oldest first)
// show that its holder let go: the last is a Release's marker that names
// the holder and revision of the record right before it (a marker written
// by hand without them does not pass).
func released(kept []*jskv.StoredMsg) bool {
	if len(kept) < 2 {
		return false
	}
	h := headers(kept[len(kept)-1])
	if h == nil || h.Get(releasedHeader) == "" {
		return false
	}
	prev := kept[len(kept)-2]
	if headers(prev) != nil {
		return false
	}
	var r record
	return json.Unmarshal(prev.Data, &r) == nil && r.Holder == h.Get(releasedHeader) &&
		h.Get(releasedRevHeader) == strconv.FormatUint(prev.Sequence, 10)
}

// checkBucket refuses a bucket that expires values on its own (a max age,
// as `nats kv add --ttl` sets): a lease there expires while its holder
// still serves, and the holder loses it at every renewal
// (TestMaxAgeBucketRefused: the bucket made again with a 1s max age).
func (l *Lease) checkBucket(ctx context.Context) error {
	st, err := l.kv.Status(ctx)
	if err != nil {
		return fail(ctx, "status of bucket "+l.opts.Bucket, err)
	}
	if age := st.TTL(); age != 0 {
		return fmt.Errorf("%w: mono kvlease: bucket %q expires values after %v (a max age): a lease can expire under its holder; "+
			"delete the bucket (nats kv del %s) and let leafd make it again", segment.ErrInvalid, l.opts.Bucket, age, l.opts.Bucket)
	}
	return nil
}

// headers are m's headers if it is a marker (a delete, purge or
// server-written marker), nil if it is a record.
func headers(m *jskv.StoredMsg) nats.Header {
	if !m.Deleted() {
		return nil
	}
	h, err := nats.DecodeHeadersMsg(m.Header)
	if err != nil {
		return nats.Header{"KV-Operation": {"?"}} // a marker of unknown kind
	}
	return h
}

// keepHistory raises the history of a bucket made by an older leafd (one
// message per key) to history.
func keepHistory(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) error {
	st, err := kv.Status(ctx)
	if err != nil {
		return err
	}
	if st.History() >= history {
		return nil
	}
	info, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return err
	}
	cfg := info.CachedInfo().Config
	cfg.MaxMsgsPerSubject = history
	_, err = js.UpdateStream(ctx, cfg)
	return err
}

// Renew implements mono.Lease: the value again, with the TTL, expecting
// the revision of g.
func (l *Lease) Renew(ctx context.Context, g mono.Grant) (mono.Grant, error) {
	cctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	ack, err := l.js.Publish(cctx, l.prefix+g.Tag, l.value(g.Holder),
		jetstream.WithExpectLastSequencePerSubject(g.Rev), jetstream.WithMsgTTL(l.opts.TTL))
	// A stream without per-key TTLs is not the one g was granted in (the
	// server never turns them off): the bucket was made again.
	if jskv.Conflict(err) || ttlDisabled(err) {
		return mono.Grant{}, fmt.Errorf("%w: %q: %v", mono.ErrLost, g.Tag, err)
	}
	if err != nil {
		return mono.Grant{}, fail(cctx, "renew "+g.Tag, err)
	}
	g.Rev = ack.Sequence
	return g, nil
}

// Release implements mono.Lease.
func (l *Lease) Release(ctx context.Context, g mono.Grant) error {
	cctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	// kv.Delete with LastRevision, plus a header that says the holder
	// itself let go (Acquire need not wait).
	msg := nats.NewMsg(l.prefix + g.Tag)
	msg.Header.Set("KV-Operation", "DEL")
	msg.Header.Set(releasedHeader, g.Holder)
	msg.Header.Set(releasedRevHeader, strconv.FormatUint(g.Rev, 10))
	_, err := l.js.PublishMsg(cctx, msg, jetstream.WithExpectLastSequencePerSubject(g.Rev))
	if jskv.Conflict(err) {
		return fmt.Errorf("%w: %q: %v", mono.ErrLost, g.Tag, err)
	}
	if err != nil {
		return fail(cctx, "release "+g.Tag, err)
	}
	return nil
}

// Holder implements mono.Lease.
func (l *Lease) Holder(ctx context.Context, tag string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	e, err := l.kv.Get(cctx, tag)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "", nil
	}
	if err != nil {
		return "", fail(cctx, "holder of "+tag, err)
	}
	var r record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return "", fmt.Errorf("kvlease: bucket %q key %s: bad value: %v", l.opts.Bucket, tag, err)
	}
	return r.Holder, nil
}

func fail(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil || jskv.Unavailable(err) || jskv.Transient(err) {
		return fmt.Errorf("%w: mono kvlease: %s: %w", segment.ErrUnavailable, what, err)
	}
	return fmt.Errorf("mono kvlease: %s: %w", what, err)
}

var _ mono.Lease = (*Lease)(nil)
