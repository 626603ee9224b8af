package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// releasedHeader marks the delete marker of a Release.
const releasedHeader = "Leaf-Released"

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
		History:        1,
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
	return &Lease{js: js, kv: kv, opts: opts, prefix: "$KV." + opts.Bucket + ".", getSubj: jskv.GetSubject(js, opts.Bucket)}, nil
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
	last, err := jskv.MsgGet(cctx, l.js.Conn(), l.getSubj, jskv.MsgGetRequest{LastFor: l.prefix + tag})
	if err != nil {
		return mono.Grant{}, fail(cctx, "acquire "+tag, err)
	}
	var wait time.Duration
	if last == nil || last.Deleted() && !freedByHolderOrTTL(last) {
		wait = l.opts.TTL // freed by hand, or no trace: a holder may serve until its fence passes
	}
	rev, err := l.kv.Create(cctx, tag, l.value(holder), jetstream.KeyTTL(l.opts.TTL))
	if errors.Is(err, jetstream.ErrKeyExists) {
		who, herr := l.Holder(ctx, tag)
		if herr != nil {
			who = "?"
		}
		return mono.Grant{}, fmt.Errorf("%w: %q by %s", mono.ErrHeld, tag, who)
	}
	if err != nil {
		return mono.Grant{}, fail(cctx, "acquire "+tag, err)
	}
	return mono.Grant{Tag: tag, Holder: holder, Rev: rev, Wait: wait}, nil
}

// freedByHolderOrTTL reports whether marker m was written by a Release or
// by the server when the key's TTL ran out.
func freedByHolderOrTTL(m *jskv.StoredMsg) bool {
	h, err := nats.DecodeHeadersMsg(m.Header)
	if err != nil {
		return false
	}
	return h.Get(releasedHeader) != "" || h.Get(jetstream.MarkerReasonHeader) != ""
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
