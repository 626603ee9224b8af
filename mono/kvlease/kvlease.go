package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/jskv"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/segment"
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
}

// Lease is a mono.Lease on a JetStream KV bucket.
type Lease struct {
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	opts    Options
	prefix  string // the bucket's subject prefix, $KV.<bucket>.
	getSubj string // the stream leader's message get
}

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
	if opts.TTL < time.Second || opts.TTL%time.Second != 0 {
		return nil, fmt.Errorf("%w: mono lease ttl %v must be whole seconds, at least 1s", segment.ErrInvalid, opts.TTL)
	}
	cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	kv, err := jskv.OpenOrCreate(cctx, js, jetstream.KeyValueConfig{
		Bucket:         opts.Bucket,
		Description:    "leafmq: leaders of monotonic tags",
		History:        history,
		Storage:        jetstream.FileStorage,
		Replicas:       opts.Replicas,
		LimitMarkerTTL: opts.TTL,
	})
	if errors.Is(err, jskv.ErrNoKeyTTL) {
		return nil, fmt.Errorf("%w: %w", segment.ErrInvalid, err)
	}
	if err != nil {
		return nil, fail(cctx, "open bucket "+opts.Bucket, err)
	}
	if err := keepHistory(cctx, js, kv); err != nil {
		return nil, fail(cctx, "open bucket "+opts.Bucket, err)
	}
	l := &Lease{js: js, kv: kv, opts: opts, prefix: "$KV." + opts.Bucket + ".", getSubj: jskv.GetSubject(js, opts.Bucket)}
	if _, _, err := l.checkBucket(cctx); err != nil {
		return nil, err
	}
	return l, nil
}

// TTL implements mono.Lease.
func (l *Lease) TTL() time.Duration { return l.opts.TTL }

func (l *Lease) value(holder string) []byte {
	b, _ := json.Marshal(record{Holder: holder, At: time.Now().UnixMilli()}) // cannot fail
	return b
}

// Acquire implements mono.Lease.
func (l *Lease) Acquire(ctx context.Context, tag, holder string) (mono.Grant, error) {
	if err := segment.CheckTag(tag); err != nil {
		return mono.Grant{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	kept, err := l.kept(cctx, tag)
	if err != nil {
		return mono.Grant{}, fail(cctx, "acquire "+tag, err)
	}
	var wait time.Duration
	switch ok, byTTL := freed(kept); {
	case !ok:
		wait = l.opts.TTL // freed by hand, or no trace: a holder may serve until its fence passes
	case byTTL:
		// A TTL marker is the holder's expiry only if the bucket expires
		// nothing sooner (one made again with a max age below the TTL
		// expires live leases), and keeps the record before a marker (with
		// one message per key, a value put by hand with a short TTL over a
		// live lease leaves nothing but its own marker).
		kept, markerTTL, err := l.checkBucket(cctx)
		if err != nil {
			return mono.Grant{}, err
		}
		// A marker TTL below the lease's lets the server keep a value put
		// by hand with a short TTL that short, so two such puts can push
		// the holder's record out and expire before its lease does.
		if kept < history || markerTTL < l.opts.TTL {
			wait = l.opts.TTL
		}
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
	ack, err := l.js.Publish(cctx, l.prefix+tag, l.value(holder),
		jetstream.WithExpectLastSequencePerSubject(last), jetstream.WithMsgTTL(l.opts.TTL))
	if jskv.Conflict(err) {
		return mono.Grant{}, l.held(ctx, tag)
	}
	if err != nil {
		return mono.Grant{}, fail(cctx, "acquire "+tag, err)
	}
	return mono.Grant{Tag: tag, Holder: holder, Rev: ack.Sequence, Wait: wait}, nil
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

// freed reports whether the messages kept for a key (oldest first) show
// that its last holder let go, so that no holder can be serving: the last
// is a Release's marker that names the holder and revision of the record
// right before it, or the marker the server wrote when the key's TTL ran
// out with no record kept before it (a record still kept, or a delete by
// hand, means the message that expired may have been put by hand over a
// holder that still serves: an adversary broke order with `nats kv put`
// of a short-TTL value over a live lease, 1,998 calls out of order, and
// with a hand-written release marker, 6,842). Anything else — no message,
// a delete, purge or removal by hand — is not.
func freed(kept []*jskv.StoredMsg) (ok, byTTL bool) {
	if len(kept) == 0 {
		return false, false
	}
	h := headers(kept[len(kept)-1])
	if h == nil {
		return false, false // a record: held
	}
	if who := h.Get(releasedHeader); who != "" {
		if len(kept) < 2 || headers(kept[len(kept)-2]) != nil {
			return false, false
		}
		prev := kept[len(kept)-2]
		var r record
		return json.Unmarshal(prev.Data, &r) == nil && r.Holder == who &&
			h.Get(releasedRevHeader) == strconv.FormatUint(prev.Sequence, 10), false
	}
	if h.Get(jetstream.MarkerReasonHeader) != "MaxAge" || h.Get("KV-Operation") != "" {
		return false, false
	}
	for _, m := range kept[:len(kept)-1] {
		if p := headers(m); p == nil || p.Get(jetstream.MarkerReasonHeader) != "MaxAge" || p.Get("KV-Operation") != "" {
			return false, false
		}
	}
	return true, true
}

// checkBucket refuses a bucket that expires values on its own (a max age,
// as `nats kv add --ttl` sets): a lease there can expire while its holder
// still serves, and its marker would pass for the holder's expiry. An
// adversary made the bucket again with a 1s max age and broke order
// (32,785 calls). It returns how many messages per key the bucket keeps
// and its marker TTL.
func (l *Lease) checkBucket(ctx context.Context) (history int64, markerTTL time.Duration, err error) {
	st, err := l.kv.Status(ctx)
	if err != nil {
		return 0, 0, fail(ctx, "status of bucket "+l.opts.Bucket, err)
	}
	if age := st.TTL(); age != 0 {
		return 0, 0, fmt.Errorf("%w: mono kvlease: bucket %q expires values after %v (a max age): a lease can expire under its holder; "+
			"delete the bucket (nats kv del %s) and let leafd make it again", segment.ErrInvalid, l.opts.Bucket, age, l.opts.Bucket)
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		markerTTL = bs.LimitMarkerTTL()
	}
	return st.History(), markerTTL, nil
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
	if jskv.Conflict(err) {
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
