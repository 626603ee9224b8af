package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/jskv"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// Defaults of Options.
const (
	DefaultBucket  = "leaf_alloc"
	DefaultTimeout = 3 * time.Second
)

// ErrCorrupt: a value in the bucket is not a row this package wrote (bad
// JSON, or a step or max_id out of range). The row is left as it is.
var ErrCorrupt = errors.New("corrupt kv value")

// Options configures Open. The zero value is usable: every field has a
// default.
type Options struct {
	// Bucket is the KV bucket holding one key per tag. Default "leaf_alloc".
	Bucket string
	// Replicas is the bucket's replica count, used only when Open creates the
	// bucket (an existing bucket is never reconfigured). Default 1; use 3 on a
	// cluster of three or more servers.
	Replicas int
	// Timeout bounds every Store call, including its compare-and-swap
	// retries; a call that does not finish in time returns an error wrapping
	// segment.ErrUnavailable. It also bounds Open. Tags and Modes take as
	// many steps as the bucket needs, and it bounds each step (see walk).
	// Default 3s.
	Timeout time.Duration
	// CloseConn makes Close (and a failed Open) also close the NATS
	// connection of the jetstream.JetStream given to Open. By default the
	// caller owns it.
	CloseConn bool
	// Clock stamps the rows' update_time and times the compare-and-swap
	// retries' pauses. Default clock.Real.
	Clock clock.Clock
}

// Store is a segment.Store on a JetStream KV bucket. It is safe for
// concurrent use, by any number of Stores on any number of nodes sharing the
// bucket.
type Store struct {
	kv       jetstream.KeyValue
	js       jetstream.JetStream
	nc       *nats.Conn
	bucket   string
	getSubj  string // leader-only message get: <api prefix>STREAM.MSG.GET.KV_<bucket>
	dirSubj  string // any replica's batched get, for walk: <api prefix>DIRECT.GET.KV_<bucket>
	keyPre   string // $KV.<bucket>.
	history  int64  // the bucket's history, as of Open
	replicas int    // Options.Replicas: of the buckets it creates

	idMu    sync.Mutex         // regionIDKV's
	idKV    jetstream.KeyValue // RegionIDBucket(idR), once opened
	idR     int
	timeout time.Duration
	owns    bool

	closed    atomic.Bool
	closeOnce sync.Once
	conflicts atomic.Int64 // CAS conflicts seen, for tests

	clock clock.Clock
}

// bucketHistory is the history of a bucket Open creates: 2, so that a
// `nats kv del` leaves the last row (and its max_id) behind its delete
// marker, and Restart can check a floor against it.
const bucketHistory = 2

// record is the JSON value stored under each tag's key.
type record struct {
	MaxID       int64     `json:"max_id"`
	Step        int       `json:"step"`
	Description string    `json:"description"`
	UpdateTime  time.Time `json:"update_time"`
	// Mode is a copy of the tag's mode key (modeKey), carried by every
	// revision so that an allocation reports it without a second read.
	Mode segment.Mode `json:"mode,omitzero"`
	// Back is set only on a revision written by HandBack: the max_id it
	// took back from. The revisions before it, up to Back, are not a
	// lowered max_id.
	Back int64 `json:"handed_back_from,omitempty"`

	// high is not stored: cas sets it, for advance, to the highest max_id
	// of the revisions the bucket keeps before the one read; prev to the
	// max_id of the revision right before it (0 if none is kept).
	high, prev int64
	// back is Back as read; cas clears Back on every write but HandBack's.
	back int64
}

// Open returns a Store on the bucket opts.Bucket, creating the bucket (a KV
// bucket with history 2, file storage and opts.Replicas replicas) when it
// does not exist. An existing bucket is used as it is.
//
// Open fails with an error wrapping segment.ErrInvalid for bad options and
// segment.ErrUnavailable when JetStream cannot be reached within
// opts.Timeout.
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: kvstore: nil JetStream", segment.ErrInvalid)
	}
	if opts.Bucket == "" {
		opts.Bucket = DefaultBucket
	}
	if _, err := wire.ParseTag(opts.Bucket); err != nil { // a bucket name follows a tag's rule
		return nil, fmt.Errorf("%w: kvstore: bucket %q must be [A-Za-z0-9_-]+", segment.ErrInvalid, opts.Bucket)
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Replicas < 1 || opts.Replicas > 5 {
		return nil, fmt.Errorf("%w: kvstore: replicas %d must be 1-5", segment.ErrInvalid, opts.Replicas)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("%w: kvstore: negative timeout %v", segment.ErrInvalid, opts.Timeout)
	}
	s := &Store{
		js:       js,
		nc:       js.Conn(),
		bucket:   opts.Bucket,
		getSubj:  jskv.GetSubject(js, opts.Bucket),
		dirSubj:  jskv.DirectSubject(js, opts.Bucket),
		keyPre:   "$KV." + opts.Bucket + ".",
		timeout:  opts.Timeout,
		replicas: opts.Replicas,
		owns:     opts.CloseConn,
		clock:    clock.Or(opts.Clock),
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	err := s.retry(cctx, func() (bool, error) {
		kv, err := js.KeyValue(cctx, opts.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(cctx, jetstream.KeyValueConfig{
				Bucket:      opts.Bucket,
				Description: "leafmq segment allocations (Leaf's leaf_alloc table)",
				History:     bucketHistory,
				Storage:     jetstream.FileStorage,
				Replicas:    opts.Replicas,
			})
			if errors.Is(err, jetstream.ErrBucketExists) {
				return true, err // created by another node meanwhile: look it up again
			}
		}
		if err != nil {
			return transient(err), err
		}
		st, err := kv.Status(cctx)
		if err != nil {
			return transient(err), err
		}
		s.kv, s.history = kv, st.History()
		return false, nil
	})
	if err != nil {
		if s.owns {
			s.nc.Close()
		}
		return nil, s.fail(ctx, cctx, "open bucket", opts.Bucket, err)
	}
	return s, nil
}

// Bucket returns the name of the KV bucket.
func (s *Store) Bucket() string { return s.bucket }

// Advance implements segment.Store: the floor is checked on the revision
// the compare-and-swap writes over.
func (s *Store) Advance(ctx context.Context, tag wire.Tag, step int, floor int64) (segment.Alloc, error) {
	if err := segment.CheckAdvanceStep(step); err != nil {
		return segment.Alloc{}, err
	}
	op := opNextStep
	if step == 0 {
		op = opNext
	}
	return s.advance(ctx, op, tag, step, floor)
}

func (s *Store) advance(ctx context.Context, op string, tag wire.Tag, step int, floor int64) (segment.Alloc, error) {
	var a segment.Alloc
	err := s.cas(ctx, op, tag, func(row *record) error {
		n := step
		if n == 0 {
			n = row.Step
		}
		if row.MaxID < floor {
			return fmt.Errorf("%w: tag %q: max_id %d in bucket %q is below this node's floor %d",
				segment.ErrBelowFloor, tag, row.MaxID, s.bucket, floor)
		}
		if row.lowered() {
			return fmt.Errorf("%w: tag %q: max_id %d is below %d, the max_id of the revision before it in bucket %q: "+
				"max_id was lowered; nothing changed; restart the tag at or above %d",
				segment.ErrBelowFloor, tag, row.MaxID, row.high, s.bucket, row.high)
		}
		if err := segment.CheckAdvance(tag, row.MaxID, n); err != nil {
			return err
		}
		row.MaxID += int64(n)
		a = segment.Alloc{Tag: tag, MaxID: row.MaxID, Step: n, TableStep: row.Step, Mode: row.mode()}
		return nil
	})
	if err != nil {
		return segment.Alloc{}, err
	}
	return a, nil
}

// SetStep implements segment.Store.
func (s *Store) SetStep(ctx context.Context, tag wire.Tag, step int) error {
	if err := segment.CheckStep(step); err != nil {
		return err
	}
	return s.cas(ctx, "set step", tag, func(row *record) error {
		if row.lowered() {
			return fmt.Errorf("%w: tag %q: max_id %d is below %d, the max_id of the revision before it in bucket %q: "+
				"max_id was lowered; nothing changed; raise it (leafctl tag set-max) to at least %d first",
				segment.ErrBelowFloor, tag, row.MaxID, row.high, s.bucket, row.high)
		}
		row.Step = step
		return nil
	})
}

// SetMaxID implements segment.Store.
func (s *Store) SetMaxID(ctx context.Context, tag wire.Tag, maxID int64) error {
	if maxID < 0 {
		return fmt.Errorf("%w: max_id %d must not be negative", segment.ErrInvalid, maxID)
	}
	return s.cas(ctx, "set max_id", tag, func(row *record) error {
		if maxID < row.MaxID {
			return fmt.Errorf("%w: max_id %d is below the current %d of %q", segment.ErrInvalid, maxID, row.MaxID, tag)
		}
		if maxID < row.high {
			return fmt.Errorf("%w: tag %q: max_id %d is below %d, the max_id of the revision before the current one in bucket %q "+
				"(max_id was lowered): set at least %d",
				segment.ErrBelowFloor, tag, maxID, row.high, s.bucket, row.high)
		}
		row.MaxID = maxID
		return nil
	})
}

// Operation names of the allocations, as errors show them.
const (
	opNext     = "next"
	opNextStep = "next step"
)

// cas runs read-modify-write on tag's row until the write lands on the
// revision that was read: read the row from the stream leader, apply f,
// kv.Update(key, value, revision). A conflict (another writer got there
// first) re-reads and tries again after a short jittered pause, bounded by
// the call's timeout. An error from f ends the loop unchanged.
//
// When the leader's reads are refused for want of a JetStream meta leader
// (a region cut off from the others), the reads go to any replica
// (msgGet), whose copy may be older than the latest write: the write's
// compare-and-swap still lands only on the latest revision, so an
// allocation stays exact, but a refusal decided on such a copy (no row, a
// max_id below a floor) is not final: the loop tries again, and the call
// fails with the store unavailable if no read confirms it in time.
func (s *Store) cas(ctx context.Context, op string, tag wire.Tag, f func(*record) error) error {
	if s.closed.Load() {
		return closedErr(op)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var ferr error
	err := s.retry(cctx, func() (bool, error) {
		var replica bool
		cctx := jskv.WithReplicaReads(cctx, &replica)
		m, err := s.last(cctx, tag.String())
		if err != nil {
			return transient(err), err
		}
		if m == nil || m.Deleted() {
			err := fmt.Errorf("%w: %q", segment.ErrUnknownTag, tag)
			if replica {
				return true, err
			}
			ferr = err
			return false, ferr
		}
		row, err := s.decode(tag.String(), m.Data)
		if err != nil {
			ferr = err
			return false, err
		}
		// Every write also reads the revision before the latest: a max_id
		// below it was lowered by hand (`nats kv put`), and a write of ours
		// on top (an allocation, or a step or max_id an operator sets)
		// would push that evidence out of the bucket's history.
		if row.high, row.prev, err = s.highest(cctx, tag, m.Sequence); err != nil {
			return transient(err), err
		}
		// A row with no mode of its own (written before modes, or put by
		// hand) takes its mode key's, so that no write serves an opaque or
		// monotonic tag as a plain one.
		if row.Mode.IsSegment() {
			md, ok, err := s.mode(cctx, tag)
			if err != nil {
				if errors.Is(err, ErrCorrupt) {
					ferr = err
				}
				return transient(err), err
			}
			if ok && !md.IsSegment() {
				row.Mode = md
			}
		}
		row.back, row.Back = row.Back, 0
		if err := f(&row); err != nil {
			if replica {
				return true, err
			}
			ferr = err
			return false, err
		}
		row.UpdateTime = s.clock.Now().UTC()
		val, err := json.Marshal(row)
		if err != nil {
			ferr = err
			return false, err
		}
		_, err = s.kv.Update(cctx, tag.String(), val, m.Sequence)
		return s.again(err), err
	})
	if err != nil && err == ferr {
		return err
	}
	return s.fail(ctx, cctx, op, tag.String(), err)
}

// Get implements segment.Store.
func (s *Store) Get(ctx context.Context, tag wire.Tag) (segment.Tag, error) {
	if s.closed.Load() {
		return segment.Tag{}, closedErr("get")
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var (
		m      *jskv.StoredMsg
		md     segment.Mode
		hasKey bool
	)
	err := s.retry(cctx, func() (bool, error) {
		var err error
		if m, err = s.last(cctx, tag.String()); err != nil {
			return transient(err), err
		}
		md, hasKey, err = s.mode(cctx, tag)
		return transient(err), err
	})
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return segment.Tag{}, err
		}
		return segment.Tag{}, s.fail(ctx, cctx, "get", tag.String(), err)
	}
	if m == nil || m.Deleted() {
		return segment.Tag{}, fmt.Errorf("%w: %q", segment.ErrUnknownTag, tag)
	}
	row, err := s.decode(tag.String(), m.Data)
	if err != nil {
		return segment.Tag{}, err
	}
	if hasKey && row.Mode.IsSegment() {
		row.Mode = md
	}
	return segment.Tag{Name: tag, MaxID: row.MaxID, Step: row.Step, Description: row.Description, UpdateTime: row.UpdateTime, Mode: row.mode()}, nil
}

// Create implements segment.Store. It writes with expected revision 0, for
// a key that has no message, so two concurrent Creates cannot both
// succeed. A key whose latest message is a delete or purge marker (Delete,
// `nats kv del`, `nats kv purge`) is a deleted tag, not an unknown one:
// Create refuses it with segment.ErrTagDeleted, and Restart brings it back.
//
// The tag's mode goes first to a key of its own, mode.<tag>, written once
// and never by anything else, so that it outlives the row: a name whose
// mode key records another mode is refused with segment.ErrMode.
func (s *Store) Create(ctx context.Context, t segment.Tag) error {
	t, err := segment.Normalize(t)
	if err != nil {
		return err
	}
	if s.closed.Load() {
		return closedErr("create")
	}
	row := record{MaxID: t.MaxID, Step: t.Step, Description: t.Description, UpdateTime: s.clock.Now().UTC()}
	if !t.Mode.IsSegment() {
		row.Mode = t.Mode // a plain row stays as it was before modes
	}
	val, err := json.Marshal(row)
	if err != nil {
		return err
	}
	mval, err := json.Marshal(t.Mode)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var exists error
	err = s.retry(cctx, func() (bool, error) {
		// Reads may go to a replica where the leader's are refused for want
		// of a meta leader (a region cut off from the others): a replica's
		// copy only lags, so a row, marker or mode it shows was written,
		// and a refusal on it is one the leader's copy gives too (a
		// deleted row may still read as there); a key it lacks is written
		// only by compare-and-swap on revision 0, which fails where the
		// key exists, and is read again.
		var replica bool
		cctx := jskv.WithReplicaReads(cctx, &replica)
		had, ok, err := s.mode(cctx, t.Name)
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				exists = err
			}
			return transient(err), err
		}
		if ok && !had.Equal(t.Mode) {
			exists = segment.ModeConflict(t.Name, had, t.Mode)
			return false, exists
		}
		m, err := s.last(cctx, t.Name.String())
		if err != nil {
			return transient(err), err
		}
		if m != nil {
			if m.Deleted() {
				exists = fmt.Errorf("%w: %q (bucket %q keeps its marker, revision %d)", segment.ErrTagDeleted, t.Name, s.bucket, m.Sequence)
			} else {
				exists = fmt.Errorf("%w: %q", segment.ErrTagExists, t.Name)
			}
			return false, exists
		}
		if !ok {
			if _, err := s.kv.Update(cctx, modeKey(t.Name.String()), mval, 0); err != nil {
				return s.again(err), err // another Create wrote it: read it again
			}
		}
		_, err = s.kv.Update(cctx, t.Name.String(), val, 0)
		return s.again(err), err
	})
	if err != nil && err == exists {
		return err
	}
	return s.fail(ctx, cctx, "create", t.Name.String(), err)
}

// modeKey is the key of tag's mode. Tags have no dots, so it never names a
// tag.
func modeKey(tag string) string { return "mode." + tag }

// mode reads tag's mode key: ok false when there is none (a tag created
// before modes were kept, or never created), the zero Mode for a key an
// operator deleted.
func (s *Store) mode(ctx context.Context, tag wire.Tag) (segment.Mode, bool, error) {
	m, err := s.last(ctx, modeKey(tag.String()))
	if err != nil || m == nil || m.Deleted() {
		return segment.Mode{}, false, err
	}
	var md segment.Mode
	if err := json.Unmarshal(m.Data, &md); err != nil {
		return md, false, fmt.Errorf("%w: bucket %q key %q: %v", ErrCorrupt, s.bucket, modeKey(tag.String()), err)
	}
	md, err = segment.NormalizeMode(md)
	if err != nil {
		return md, false, fmt.Errorf("%w: bucket %q key %q: %v", ErrCorrupt, s.bucket, modeKey(tag.String()), err)
	}
	return md, true, nil
}

// lowered reports whether the row's max_id is below the revision before
// it, other than by a HandBack. A HandBack's revision says the max_id it
// took back from, which is the max_id of the revision right before it (its
// write is conditional on that revision): a handed_back_from that is not
// (a row put by hand) hands nothing back.
func (r record) lowered() bool {
	var back int64
	if handedBack(r.back, r.prev) {
		back = r.back
	}
	return r.high > max(r.MaxID, back)
}

// handedBack reports whether a revision with handed_back_from back, over a
// revision with max_id prev, is a HandBack's.
func handedBack(back, prev int64) bool { return back > 0 && back == prev }

// HandBack implements segment.HandBacker: a revision with max_id to and
// handed_back_from from, written over the revision read only while its
// max_id is still from.
func (s *Store) HandBack(ctx context.Context, tag wire.Tag, from, to int64) error {
	if err := segment.CheckHandBack(tag, from, to); err != nil {
		return err
	}
	return s.cas(ctx, "hand back", tag, func(row *record) error {
		if row.MaxID != from || row.lowered() {
			return fmt.Errorf("%w: tag %q: max_id is %d, not %d", segment.ErrMoved, tag, row.MaxID, from)
		}
		row.MaxID, row.Back = to, from
		return nil
	})
}

var _ segment.HandBacker = (*Store)(nil)

// mode is the row's mode, KindSegment for a row written before modes.
func (r record) mode() segment.Mode {
	if r.Mode.IsSegment() {
		return segment.Mode{Kind: segment.KindSegment}
	}
	return r.Mode
}

// Delete implements segment.Store. It purges the key with the revision it
// read, so a concurrent allocation is never half-deleted: a purge marker
// replaces the row, and carries the row's JSON as its body, so that the
// tag's last max_id survives for Restart to check a floor against.
func (s *Store) Delete(ctx context.Context, tag wire.Tag) error {
	if s.closed.Load() {
		return closedErr("delete")
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var unknown error
	err := s.retry(cctx, func() (bool, error) {
		m, err := s.last(cctx, tag.String())
		if err != nil {
			return transient(err), err
		}
		if m == nil || m.Deleted() {
			unknown = fmt.Errorf("%w: %q", segment.ErrUnknownTag, tag)
			return false, unknown
		}
		err = s.purge(cctx, tag, m)
		return s.again(err), err
	})
	if err != nil && err == unknown {
		return err
	}
	return s.fail(ctx, cctx, "delete", tag.String(), err)
}

// purge writes a purge marker over m, the latest message of tag's key,
// whose body is m's row: kv.Purge with LastRevision, but with a body.
func (s *Store) purge(ctx context.Context, tag wire.Tag, m *jskv.StoredMsg) error {
	msg := nats.NewMsg(s.keyPre + tag.String())
	msg.Header.Set("KV-Operation", "PURGE")
	msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	msg.Data = m.Data
	_, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(m.Sequence))
	return err
}

// Restart implements segment.Store. The highest max_id it can find for the
// tag bounds the floor from below: the row, the body of a marker written by
// Delete, and any earlier revision the bucket keeps (history 2 keeps the
// row behind a `nats kv del` marker). A bare marker with nothing behind it
// (`nats kv purge`, or a bucket with history 1) leaves the floor to the
// operator; nodes that served the tag still refuse ranges below their own
// floors (segment.Config.Floors).
func (s *Store) Restart(ctx context.Context, tag wire.Tag, floor int64) error {
	if err := segment.CheckFloor(tag, floor, 0); err != nil {
		return err
	}
	if s.closed.Load() {
		return closedErr("restart")
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var ferr error
	err := s.retry(cctx, func() (bool, error) {
		m, err := s.last(cctx, tag.String())
		if err != nil {
			return transient(err), err
		}
		row := record{Step: segment.DefaultStep}
		var rev uint64
		if m != nil {
			rev = m.Sequence
			if r, err := s.decode(tag.String(), m.Data); err == nil {
				row = r // a live row, or the body of Delete's marker
			} else if !m.Deleted() {
				ferr = err // a corrupt row is never rewritten
				return false, err
			}
		}
		switch md, ok, err := s.mode(cctx, tag); {
		case err != nil:
			if errors.Is(err, ErrCorrupt) {
				ferr = err
			}
			return transient(err), err
		case ok && !row.Mode.IsSegment() && !row.Mode.Equal(md):
			ferr = fmt.Errorf("%w: tag %q: its row says %s, its mode key %s; nothing changed", ErrCorrupt, tag, row.Mode, md)
			return false, ferr
		case ok:
			row.Mode = md
		}
		high := row.MaxID
		if m != nil {
			h, _, err := s.highest(cctx, tag, m.Sequence)
			if err != nil {
				return transient(err), err
			}
			high = max(high, h)
		}
		if err := segment.CheckFloor(tag, floor, high); err != nil {
			ferr = err
			return false, err
		}
		row.MaxID = floor
		row.Back = 0 // a restart is not a hand-back
		row.UpdateTime = s.clock.Now().UTC()
		val, err := json.Marshal(row)
		if err != nil {
			ferr = err
			return false, err
		}
		_, err = s.kv.Update(cctx, tag.String(), val, rev)
		return s.again(err), err
	})
	if err != nil && err == ferr {
		return err
	}
	return s.fail(ctx, cctx, "restart", tag.String(), err)
}

// highest returns the highest max_id among the messages of tag's key
// before sequence last that decode as rows (what the bucket's history
// keeps), and the max_id of the last of them (0 if there is none, or it is
// a marker).
func (s *Store) highest(ctx context.Context, tag wire.Tag, last uint64) (high, prev int64, err error) {
	if s.history == 1 {
		return 0, 0, nil // nothing is kept behind the latest
	}
	for seq := uint64(1); seq < last; {
		m, err := s.msgGet(ctx, jskv.MsgGetRequest{Seq: seq, NextFor: s.keyPre + tag.String()})
		if err != nil {
			return 0, 0, err
		}
		if m == nil || m.Sequence >= last {
			break
		}
		r, err := s.decode(tag.String(), m.Data)
		switch {
		case err != nil:
			prev = 0
		case handedBack(r.Back, prev):
			high, prev = r.MaxID, r.MaxID // a hand-back: what came before it was not served
		default:
			high, prev = max(high, r.MaxID), r.MaxID
		}
		if s.history == 2 {
			break // the one revision behind the latest: no need to ask for the latest again
		}
		seq = m.Sequence + 1
	}
	return high, prev, nil
}

// Incarnation implements segment.Incarnation: the bucket's name and the
// creation time of its stream, which the servers keep for the stream's
// life and which a bucket deleted and made again does not share.
func (s *Store) Incarnation(ctx context.Context) (string, error) {
	if s.closed.Load() {
		return "", closedErr("incarnation")
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var inc string
	err := s.retry(cctx, func() (bool, error) {
		st, err := s.js.Stream(cctx, "KV_"+s.bucket)
		if err != nil {
			return transient(err), err
		}
		info := st.CachedInfo()
		inc = fmt.Sprintf("kv:%s:%s", s.bucket, info.Created.UTC().Format(time.RFC3339Nano))
		return false, nil
	})
	if err != nil {
		return "", s.fail(ctx, cctx, "incarnation", "", err)
	}
	return inc, nil
}

// Tags implements segment.Store. It walks the bucket's messages (see walk),
// so it sees every write acknowledged before it started.
func (s *Store) Tags(ctx context.Context) ([]string, error) {
	rows, _, err := s.walk(ctx, "tags")
	if err != nil {
		return nil, err
	}
	tags := make([]string, 0, len(rows))
	for k := range rows {
		tags = append(tags, k)
	}
	sort.Strings(tags)
	return tags, nil
}

// Modes implements segment.Store, in one walk like Tags: a tag's mode key,
// or the mode its row carries when it has none.
func (s *Store) Modes(ctx context.Context) (map[string]segment.Mode, error) {
	rows, modes, err := s.walk(ctx, "modes")
	if err != nil {
		return nil, err
	}
	out := make(map[string]segment.Mode, len(rows))
	for tag, data := range rows {
		md, ok := modes[tag]
		if !ok {
			r, err := s.decode(tag, data)
			if err != nil {
				return nil, err
			}
			md = r.mode()
		}
		out[tag] = md
	}
	return out, nil
}

// A walk reads the bucket in batches of walkBatch messages (at most
// walkBytes of them) from any replica.
const (
	walkBatch = 1000
	walkBytes = 1 << 20
)

// walkDirectWait bounds one batch (or Options.Timeout, if shorter). A
// replica answers a batch in milliseconds; one that takes it and never
// answers (cut off from the cluster, its interest not yet gone) must not
// hold the walk for long. A batch given up on costs only a request to the
// leader, so a short bound is safe.
const walkDirectWait = time.Second

// walk reads every key's latest message: the live rows by tag, and the
// mode keys by tag.
//
// It reads the messages in sequence order, so the last one seen for a key
// is its value. The bulk comes in batched direct gets, which any replica
// answers from what it has applied; the end is always confirmed by the
// stream leader (STREAM.MSG.GET of the next message after the last one
// seen), and a message the leader has where a lagging replica stopped is
// read from the leader before the batches go on. So every write
// acknowledged before the walk started is seen, or a later revision of the
// same key is; writes during the walk may or may not be, as with any read
// that takes time. It is not a snapshot: each key's value is the one it
// had when the walk passed it.
//
// Options.Timeout bounds each step (a batch, or one request to the leader
// with its retries), not the walk: a big bucket takes as many steps as it
// needs, a retry goes on from the last message read, and only the
// caller's context bounds the whole. A stream that does not answer
// batched gets (direct gets not allowed, an older server, a replica cut
// off) is read from the leader one message at a time for the rest of the
// walk.
func (s *Store) walk(ctx context.Context, op string) (rows map[string][]byte, modes map[string]segment.Mode, err error) {
	if s.closed.Load() {
		return nil, nil, closedErr(op)
	}
	rows, modes = make(map[string][]byte), make(map[string]segment.Mode)
	visit := func(m *jskv.StoredMsg) error {
		key := strings.TrimPrefix(m.Subject, s.keyPre)
		if tag, ok := strings.CutPrefix(key, "mode."); ok {
			if m.Deleted() {
				delete(modes, tag)
				return nil
			}
			var md segment.Mode
			if err := json.Unmarshal(m.Data, &md); err != nil {
				return fmt.Errorf("%w: bucket %q key %q: %v", ErrCorrupt, s.bucket, key, err)
			}
			modes[tag] = md
			return nil
		}
		if _, err := wire.ParseTag(key); err != nil {
			return nil // not a key of this package's
		}
		if m.Deleted() {
			delete(rows, key)
		} else {
			rows[key] = m.Data
		}
		return nil
	}
	seq := uint64(1) // the next sequence to read
	direct := true
	for {
		if s.closed.Load() {
			return nil, nil, closedErr(op)
		}
		if direct {
			more, err := s.batch(ctx, &seq, visit)
			switch {
			case errors.Is(err, ErrCorrupt):
				return nil, nil, err
			case err != nil:
				if ctx.Err() != nil {
					return nil, nil, s.fail(ctx, ctx, op, "", err)
				}
				// No batches (direct gets not allowed, an older server),
				// or a replica that did not answer one: the rest of this
				// walk goes to the leader, rather than pay a wait per
				// batch.
				direct = false
			case more:
				continue
			}
		}
		m, err := s.next(ctx, op, seq)
		if err != nil {
			return nil, nil, err
		}
		if m == nil {
			return rows, modes, nil
		}
		if err := visit(m); err != nil {
			return nil, nil, err
		}
		seq = m.Sequence + 1
	}
}

// batch reads one batch of the walk from any replica, from *seq on, and
// moves *seq past the last message read; more reports that the replica
// has more. walkDirectWait bounds it.
func (s *Store) batch(ctx context.Context, seq *uint64, visit func(*jskv.StoredMsg) error) (more bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, min(s.timeout, walkDirectWait))
	defer cancel()
	return jskv.DirectBatch(cctx, s.nc, s.dirSubj, *seq, s.keyPre+">", walkBatch, walkBytes, func(m *jskv.StoredMsg) error {
		if err := visit(m); err != nil {
			return err
		}
		*seq = m.Sequence + 1
		return nil
	})
}

// next asks the stream leader for the first message of the bucket at or
// after seq; nil when there is none. Options.Timeout bounds it, retries
// included.
func (s *Store) next(ctx context.Context, op string, seq uint64) (*jskv.StoredMsg, error) {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var m *jskv.StoredMsg
	err := s.retry(cctx, func() (bool, error) {
		var err error
		m, err = s.msgGet(cctx, jskv.MsgGetRequest{Seq: seq, NextFor: s.keyPre + ">"})
		return transient(err), err
	})
	if errors.Is(err, ErrCorrupt) {
		return nil, err
	}
	if err != nil {
		return nil, s.fail(ctx, cctx, op, "", err)
	}
	return m, nil
}

// Close implements segment.Store. It is idempotent; later calls of every
// other method return segment.ErrClosed. Calls already under way finish
// (within their timeout). With Options.CloseConn it also closes the NATS
// connection.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.owns {
			s.nc.Close()
		}
	})
	return nil
}

func (s *Store) decode(tag string, data []byte) (record, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%w: bucket %q key %q: %v", ErrCorrupt, s.bucket, tag, err)
	}
	if segment.CheckStep(r.Step) != nil || r.MaxID < 0 {
		return r, fmt.Errorf("%w: bucket %q key %q: max_id %d step %d out of range", ErrCorrupt, s.bucket, tag, r.MaxID, r.Step)
	}
	return r, nil
}

// retry calls f until it returns a nil error or says not to retry, pausing
// a jittered, growing while (1ms doubling to 64ms) between attempts, and
// stops when ctx ends. It returns f's last error.
func (s *Store) retry(ctx context.Context, f func() (again bool, err error)) error {
	for attempt := 0; ; attempt++ {
		again, err := f()
		if err == nil || !again {
			return err
		}
		if s.closed.Load() {
			return err
		}
		d := time.Millisecond << min(attempt, 6)
		d = d/2 + rand.N(d) // jitter: 0.5d..1.5d
		if clock.Sleep(ctx, s.clock, d) != nil {
			return err
		}
	}
}

// again reports whether a failed write should start over: a CAS conflict
// or a transient error.
func (s *Store) again(err error) bool {
	if conflict(err) {
		s.conflicts.Add(1)
		return true
	}
	return transient(err)
}

// fail turns err from a call on tag into the error the caller sees. ctx is
// the caller's context, cctx the call's (ctx bounded by the timeout).
func (s *Store) fail(ctx, cctx context.Context, op, tag string, err error) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf("kvstore: %s", op)
	if tag != "" {
		what = fmt.Sprintf("%s %q", what, tag)
	}
	switch {
	case s.closed.Load():
		return fmt.Errorf("%w: %s: %v", segment.ErrClosed, what, err)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w (%v)", what, ctx.Err(), err)
	case cctx.Err() != nil:
		// Our own timeout, not the caller's: do not wrap the
		// context error, which would read as the caller's deadline.
		return fmt.Errorf("%w: %s: no answer within %v: %v", segment.ErrUnavailable, what, s.timeout, err)
	case unavailable(err):
		return fmt.Errorf("%w: %s: %w", segment.ErrUnavailable, what, err)
	case errors.Is(err, jetstream.ErrInvalidBucketName):
		return fmt.Errorf("%w: %s: %w", segment.ErrInvalid, what, err)
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
}

func closedErr(op string) error {
	return fmt.Errorf("%w: kvstore: %s", segment.ErrClosed, op)
}

// The error classes of the shared JetStream KV code.
var (
	conflict    = jskv.Conflict
	transient   = jskv.Transient
	unavailable = jskv.Unavailable
)

var (
	_ segment.Store       = (*Store)(nil)
	_ segment.Incarnation = (*Store)(nil)
)
