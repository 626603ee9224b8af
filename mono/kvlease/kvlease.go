// Package kvlease keeps the leases of monotonic tags (mono.Lease) in a
// JetStream KV bucket, leaf_mono by default: one key per tag holding the
// leader's name, written with a per-key TTL (the bucket's LimitMarkerTTL)
// so that a leader that stops renewing loses the tag after TTL, counted by
// the server from its last write. Every renewal and release is a
// compare-and-swap on the revision the holder wrote last, so a holder that
// lost the key can neither renew nor delete it. It passes mono/leasetest.
//
// The room: beside segment/kvstore and snowflake/kvlease, on internal/jskv.
package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	opts   Options
	prefix string // the bucket's subject prefix, $KV.<bucket>.
}

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
	return &Lease{js: js, kv: kv, opts: opts, prefix: "$KV." + opts.Bucket + "."}, nil
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
	return mono.Grant{Tag: tag, Holder: holder, Rev: rev}, nil
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
	err := l.kv.Delete(cctx, g.Tag, jetstream.LastRevision(g.Rev))
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
