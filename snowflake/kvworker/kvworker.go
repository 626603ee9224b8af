package kvworker

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/jskv"
	"github.com/leafmq/leafmq/snowflake"
)

// Defaults of Options.
const (
	DefaultBucket  = "leaf_workers"
	DefaultTTL     = 10 * time.Second
	DefaultTimeout = 3 * time.Second
)

// ErrInvalid: bad Options, or a bucket that cannot hold per-key TTLs.
var ErrInvalid = errors.New("invalid kvworker options")

// Options configures Open. The zero value is usable: every field has a
// default.
type Options struct {
	// Bucket is the KV bucket of claims and leases. Default "leaf_workers",
	// or BucketFor(Region) when Region is set. Open creates it (with LimitMarkerTTL, so per-key TTLs work) when it does
	// not exist; an existing bucket must allow per-key TTLs.
	Bucket string
	// Region names the region whose worker ids the registry hands out:
	// each region leases its workers (0..MaxWorker of a layout with region
	// bits) from a bucket of its own, "leaf_workers_<Region>", so two
	// regions with the same worker id never see each other's claims.
	// Default none (the whole deployment one bucket). [A-Za-z0-9_-]+.
	Region string
	// Replicas is the bucket's replica count when Open creates it. Default 1.
	Replicas int
	// TTL: a claim key not refreshed for TTL expires and frees its worker
	// id. Default 10s; at least 1s (the server's minimum message TTL),
	// whole seconds (the server keeps TTLs in seconds).
	TTL time.Duration
	// Refresh is how often the claim key's TTL is renewed. Default TTL/5;
	// must be below TTL/2.
	Refresh time.Duration
	// Timeout bounds Open, Register, Lease and Close (each call, retries
	// included). Default 3s.
	Timeout time.Duration
	// Node names this node in the claim value, for operators. Default the
	// empty string.
	Node string
	// Prefer are worker ids Register tries first, in order, before its
	// scan from a random id: those a restarting node stopped gracefully
	// with (snowflake.StoppedWorkers), so that it gets its own back, with
	// its stop record. A preferred id is claimed like any other (a Create
	// that fails while another node holds it); ids outside the layout are
	// skipped.
	Prefer []int64
	// Clock times the claim's refreshes and the retries' pauses, and
	// stamps the values written. Default clock.Real, whose readings carry
	// the monotonic clock the refresher measures the TTL on.
	Clock clock.Clock
}

// Registry is a snowflake.Registry on a JetStream KV bucket. It is safe for
// concurrent use, by any number of Registries on any number of nodes
// sharing the bucket.
type Registry struct {
	kv      jetstream.KeyValue
	js      jetstream.JetStream
	nc      *nats.Conn
	layout  snowflake.Layout
	opts    Options
	getSubj string // leader-only message get: <api prefix>STREAM.MSG.GET.KV_<bucket>
	dirSubj string // any replica's message get, for Lease without a meta leader
	keyPre  string // $KV.<bucket>.

	lost     chan struct{}
	lostOnce sync.Once
	stop     context.CancelFunc // stops the refresher
	wg       sync.WaitGroup     // the refresher

	// leaseMu serializes Lease calls; mu guards the fields below. Order:
	// leaseMu before mu.
	leaseMu    sync.Mutex
	mu         sync.Mutex
	registered bool
	closed     bool
	worker     int64
	rev        uint64    // revision of the claim key w<worker>
	lease      time.Time // highest lease recorded for worker (durably)
	// leaseRev is the revision of this registration's last write to the
	// lease key whose answer came (0: none, or another write may have
	// followed it): Lease swaps on it first, with no read.
	leaseRev uint64
	token    string // this registration's owner token in t<worker>
	fresh    bool   // the bucket had no message at all when opened

	// trip is how long a write to the bucket takes (nanoseconds), from
	// the writes that got an answer: up at once to a slower one, down a
	// quarter of the way to a faster one. Calls that got none (a stream
	// with no leader) do not count, so a leader election does not make
	// it look like a slow link.
	trip atomic.Int64

	rand func(n int64) int64
}

// minTry is the shortest a Lease gives one request before it asks again
// (a request a stream's old leader took with it is never answered).
const minTry = 250 * time.Millisecond

// observe counts d, the time one write to the bucket took, into trip.
func (r *Registry) observe(d time.Duration) {
	for {
		old := r.trip.Load()
		v := int64(d)
		if v < old {
			v = old - (old-v)/4
		}
		if r.trip.CompareAndSwap(old, v) {
			return
		}
	}
}

// LeaseTime implements snowflake.LeaseTimer: a Lease is a read from the
// stream leader and a compare-and-swap, two round trips of a write.
func (r *Registry) LeaseTime() time.Duration { return 2 * time.Duration(r.trip.Load()) }

// tryFor is how long a Lease waits for the answer to one request before
// it asks again: four write round trips, at least minTry. A request sent
// while the stream elects a leader is lost; the one after the election
// is answered within a round trip.
func (r *Registry) tryFor() time.Duration { return max(minTry, 4*time.Duration(r.trip.Load())) }

// claim is the JSON value of a claim key w<id>.
type claim struct {
	Node    string `json:"node"`
	Lease   int64  `json:"lease"`   // unix ms of the worker's time lease
	Updated int64  `json:"updated"` // unix ms of the write
}

// leaseRec is the JSON value of a lease key t<id>.
type leaseRec struct {
	Lease   int64  `json:"lease"` // unix ms, never lowered
	Node    string `json:"node"`
	Updated int64  `json:"updated"`
	// Owner is the token of the registration that holds the id: Register
	// writes its own, and a Lease succeeds only while the key carries it.
	Owner string `json:"owner,omitempty"`

	deleted bool // read: the key is a delete or purge marker
}

// errFenced: the lease key carries another registration's token.
var errFenced = errors.New("fenced")

// newToken is a registration's owner token: 128 random bits.
func newToken() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// Open returns a Registry for layout on the bucket opts.Bucket, creating
// the bucket when it does not exist. It does not claim a worker id:
// Register does. Errors wrap ErrInvalid for bad options and
// snowflake.ErrRegistryUnavailable when JetStream cannot be reached within
// opts.Timeout.
func Open(ctx context.Context, js jetstream.JetStream, layout snowflake.Layout, opts Options) (*Registry, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", ErrInvalid)
	}
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	if err := defaults(&opts); err != nil {
		return nil, err
	}
	r := &Registry{
		js:      js,
		nc:      js.Conn(),
		layout:  layout,
		opts:    opts,
		getSubj: jskv.GetSubject(js, opts.Bucket),
		dirSubj: jskv.DirectSubject(js, opts.Bucket),
		keyPre:  "$KV." + opts.Bucket + ".",
		lost:    make(chan struct{}),
		rand:    rand.Int64N,
	}
	cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	err := retry(cctx, opts.Clock, func() (bool, error) {
		kv, err := jskv.OpenOrCreate(cctx, js, jetstream.KeyValueConfig{
			Bucket:         opts.Bucket,
			Description:    "leafmq snowflake worker ids and time leases",
			History:        1,
			Storage:        jetstream.FileStorage,
			Replicas:       opts.Replicas,
			LimitMarkerTTL: opts.TTL,
		})
		if err != nil {
			return transient(err), err
		}
		st, err := kv.Status(cctx)
		if err != nil {
			return transient(err), err
		}
		if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
			r.fresh = bs.StreamInfo().State.LastSeq == 0
		}
		r.kv = kv
		return false, nil
	})
	if errors.Is(err, jskv.ErrNoKeyTTL) {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err != nil {
		return nil, fail(ctx, cctx, "open bucket "+opts.Bucket, err)
	}
	return r, nil
}

// BucketFor is the bucket of region's worker ids: DefaultBucket + "_" +
// region, or DefaultBucket for no region ("").
func BucketFor(region string) string {
	if region == "" {
		return DefaultBucket
	}
	return DefaultBucket + "_" + region
}

func defaults(o *Options) error {
	if strings.Trim(o.Region, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return fmt.Errorf("%w: region %q must be [A-Za-z0-9_-]+", ErrInvalid, o.Region)
	}
	if o.Bucket == "" {
		o.Bucket = BucketFor(o.Region)
	}
	if strings.Trim(o.Bucket, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return fmt.Errorf("%w: bucket %q must be [A-Za-z0-9_-]+", ErrInvalid, o.Bucket)
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		return fmt.Errorf("%w: replicas %d must be 1-5", ErrInvalid, o.Replicas)
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.TTL < time.Second || o.TTL%time.Second != 0 {
		return fmt.Errorf("%w: ttl %v must be a whole number of seconds, at least 1s", ErrInvalid, o.TTL)
	}
	if o.Refresh == 0 {
		o.Refresh = o.TTL / 5
	}
	if o.Refresh <= 0 || o.Refresh >= o.TTL/2 {
		return fmt.Errorf("%w: refresh %v must be positive and below ttl/2 (%v)", ErrInvalid, o.Refresh, o.TTL/2)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	o.Clock = clock.Or(o.Clock)
	if o.Timeout < 0 {
		return fmt.Errorf("%w: negative timeout %v", ErrInvalid, o.Timeout)
	}
	return nil
}

func claimKey(w int64) string { return "w" + strconv.FormatInt(w, 10) }
func leaseKey(w int64) string { return "t" + strconv.FormatInt(w, 10) }

// Register implements snowflake.Registry: it claims the first free worker
// id of Options.Prefer, else the first scanning from a random start
// (kv.Create of w<id> with a per-key TTL, which fails if another node
// holds it), fences out earlier holders by writing its own owner token
// into the id's lease key (compare-and-swap; the lease it replaces is
// LastLease) and starts refreshing the claim. Called again, it returns the
// same worker (or, once Lost is closed, an error wrapping
// snowflake.ErrNotRegistered).
func (r *Registry) Register(ctx context.Context) (snowflake.Registration, error) {
	if err := ctx.Err(); err != nil {
		return snowflake.Registration{}, fmt.Errorf("kvworker: register: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return snowflake.Registration{}, fmt.Errorf("%w: kvworker: register", snowflake.ErrRegistryClosed)
	}
	if r.registered {
		if r.isLost() {
			return snowflake.Registration{}, fmt.Errorf("%w: kvworker: register: claim of worker %d lost; open a new Registry", snowflake.ErrNotRegistered, r.worker)
		}
		return snowflake.Registration{Worker: r.worker, LastLease: r.lease}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()

	n := r.layout.MaxWorker() + 1
	start := r.rand(n)
	now := r.opts.Clock.Now()
	val, err := json.Marshal(claim{Node: r.opts.Node, Updated: now.UnixMilli()})
	if err != nil {
		return snowflake.Registration{}, err
	}
	token := newToken()
	worker, rev := int64(-1), uint64(0)
	var last time.Time
	var leaseRev uint64
	var deleted []string // ids whose lease key an operator deleted
	var tried map[int64]bool
	for i := -int64(len(r.opts.Prefer)); i < n && worker < 0; i++ {
		var id int64
		if i < 0 {
			id = r.opts.Prefer[i+int64(len(r.opts.Prefer))]
			if id < 0 || id >= n || tried[id] {
				continue
			}
			if tried == nil {
				tried = map[int64]bool{}
			}
			tried[id] = true
		} else if id = (start + i) % n; tried[id] {
			continue
		}
		err := retry(cctx, r.opts.Clock, func() (bool, error) {
			var err error
			sent := r.opts.Clock.Now()
			rev, err = r.kv.Create(cctx, claimKey(id), val, jetstream.KeyTTL(r.opts.TTL))
			if err == nil {
				r.observe(r.opts.Clock.Since(sent))
			}
			return transient(err), err
		})
		switch {
		case err == nil:
		case errors.Is(err, jetstream.ErrKeyExists) || conflict(err):
			continue // held by another node (or a racing Create won)
		default:
			return snowflake.Registration{}, fail(ctx, cctx, "register "+claimKey(id), err)
		}
		last, leaseRev, err = r.fence(cctx, id, token, now)
		if err == nil {
			worker = id
			break
		}
		// Give the id back; it expires anyway if this fails too.
		pctx, pcancel := context.WithTimeout(context.Background(), r.opts.Timeout)
		_ = r.kv.Purge(pctx, claimKey(id), jetstream.LastRevision(rev))
		pcancel()
		if !errors.Is(err, errLeaseDeleted) {
			return snowflake.Registration{}, fail(ctx, cctx, "register: fence "+leaseKey(id), err)
		}
		deleted = append(deleted, leaseKey(id))
	}
	if worker < 0 {
		var why string
		if len(deleted) > 0 {
			why = fmt.Sprintf("; the lease keys %s were deleted, so what their worker ids issued is unknown: "+
				"put each back with a lease past every id it issued ({\"lease\": <unix ms>}) to use it again", strings.Join(deleted, ", "))
		}
		return snowflake.Registration{}, fmt.Errorf("%w: kvworker: all %d worker ids of bucket %q are claimed or unusable%s", snowflake.ErrNoWorker, n, r.opts.Bucket, why)
	}
	r.registered, r.worker, r.rev, r.lease, r.token, r.leaseRev = true, worker, rev, last, token, leaseRev
	rctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	r.wg.Add(1)
	go r.refresh(rctx, worker, rev, now)
	return snowflake.Registration{Worker: worker, LastLease: last, Fresh: r.fresh}, nil
}

// errLeaseDeleted: the lease key of a worker id is a delete or purge
// marker.
var errLeaseDeleted = errors.New("lease key deleted")

// fence makes token the owner of worker's lease key by compare-and-swap on
// what it replaces, and returns the lease it replaced (LastLease): an
// earlier holder's Lease either landed before (and is in LastLease) or
// finds the token changed and fails; and the revision it wrote. A lease
// key that was deleted (a marker: t<N> is never deleted by leafmq, an
// operator did it) gives errLeaseDeleted: the worker's past leases are
// unknown, so it is not used.
func (r *Registry) fence(ctx context.Context, worker int64, token string, now time.Time) (time.Time, uint64, error) {
	var last time.Time
	var wrote uint64
	err := retry(ctx, r.opts.Clock, func() (bool, error) {
		// Read from a replica where the leader's read is refused for want
		// of a meta leader (a region cut off from the others): every
		// decision on it is confirmed by the compare-and-swap below on the
		// revision read, and a replica's older copy fails it and is read
		// again; a delete marker on an older copy only passes the id over.
		var replica bool
		rec, lrev, err := r.readLease(jskv.WithReplicaReads(ctx, &replica), worker)
		if err != nil {
			return transient(err), err
		}
		if rec.deleted {
			return false, errLeaseDeleted
		}
		last = time.Time{}
		if rec.Lease > 0 {
			last = time.UnixMilli(rec.Lease)
		}
		val, err := json.Marshal(leaseRec{Lease: rec.Lease, Node: r.opts.Node, Updated: now.UnixMilli(), Owner: token})
		if err != nil {
			return false, err
		}
		if lrev == 0 {
			wrote, err = r.kv.Create(ctx, leaseKey(worker), val)
		} else {
			wrote, err = r.kv.Update(ctx, leaseKey(worker), val, lrev)
		}
		return conflict(err) || transient(err), err
	})
	return last, wrote, err
}

// Lease implements snowflake.Registry: it raises the lease key t<worker>
// to until by compare-and-swap (never lowering it) before it returns. It is
// fenced: every time (a lower until included) it succeeds only while the
// key carries this registration's token. It swaps first on the revision of
// this registration's last answered write to the key (a success proves
// no one wrote it since); with none known, on a conflict or after a lost
// answer it reads t<worker> from the stream leader and swaps on the
// revision that carried the token. Once another registration took the worker id over, it closes
// Lost and fails with an error wrapping snowflake.ErrNotRegistered.
func (r *Registry) Lease(ctx context.Context, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kvworker: lease: %w", err)
	}
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	r.mu.Lock()
	closed, registered, worker, token := r.closed, r.registered, r.worker, r.token
	known, high := r.leaseRev, r.lease
	r.leaseRev = 0 // set again below once a write of this call is answered
	r.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("%w: kvworker: lease", snowflake.ErrRegistryClosed)
	case !registered:
		return fmt.Errorf("%w: kvworker: lease", snowflake.ErrNotRegistered)
	case r.isLost():
		return fmt.Errorf("%w: kvworker: lease: claim of worker %d lost", snowflake.ErrNotRegistered, worker)
	}
	ms := until.UnixMilli()
	if until.Sub(time.UnixMilli(ms)) > 0 {
		ms++ // round up: the stored lease must not be below until
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	key := leaseKey(worker)
	var holder leaseRec
	var wrote uint64 // the revision of this call's write that was answered
	try := r.tryFor()
	err := retry(cctx, r.opts.Clock, func() (bool, error) {
		// Each try is bounded, so that a request lost with a stream leader
		// is asked again of the next one; a try that got no answer gives
		// the next one twice as long (the writes may just be slow). A
		// compare-and-swap whose answer was lost may have landed: the next
		// try reads it back (still ours, high enough) and confirms.
		tctx, tcancel := context.WithTimeout(cctx, try)
		defer tcancel()
		lost := func() bool {
			if tctx.Err() != nil && cctx.Err() == nil {
				try *= 2
				return true
			}
			return false
		}
		if known != 0 {
			// The key's last revision is still the one this registration
			// wrote unless someone else wrote it since: a compare-and-swap
			// on it raises the lease and proves the token still ours with
			// no read. The stream leader alone answers it, whereas the
			// servers refuse a message get while they see no JetStream
			// meta leader (a region cut off from the others). A conflict
			// or a lost answer reads the key, as below.
			rev := known
			known = 0
			want := max(ms, high.UnixMilli())
			val, err := json.Marshal(leaseRec{Lease: want, Node: r.opts.Node, Updated: r.opts.Clock.Now().UnixMilli(), Owner: token})
			if err != nil {
				return false, err
			}
			sent := r.opts.Clock.Now()
			nrev, err := r.kv.Update(tctx, key, val, rev)
			if err == nil {
				r.observe(r.opts.Clock.Since(sent))
				ms, wrote = want, nrev
				return false, nil
			}
			return conflict(err) || transient(err) || lost(), err
		}
		// Where the leader's read is refused for want of a meta leader
		// (a region cut off from the others), the key is read from any
		// replica, whose copy may be older than the latest write: then
		// only the compare-and-swap confirms (a copy that shows the token
		// ours and the lease high enough is written again), and a copy
		// that shows another token is no proof of a takeover (it may
		// predate this registration's fence): read again.
		var replica bool
		rec, rev, err := r.readLease(jskv.WithReplicaReads(tctx, &replica), worker)
		if err != nil {
			return transient(err) || lost(), err
		}
		if rec.Owner != token {
			if replica {
				return true, fmt.Errorf("kvworker: lease key of worker %d read from a replica: another owner, unconfirmed", worker)
			}
			holder = rec
			return false, errFenced
		}
		if rec.Lease >= ms && !replica {
			ms, wrote = rec.Lease, rev
			return false, nil // confirmed: still ours, and high enough
		}
		ms = max(ms, rec.Lease)
		val, err := json.Marshal(leaseRec{Lease: ms, Node: r.opts.Node, Updated: r.opts.Clock.Now().UnixMilli(), Owner: token})
		if err != nil {
			return false, err
		}
		sent := r.opts.Clock.Now()
		nrev, err := r.kv.Update(tctx, key, val, rev)
		if err == nil {
			r.observe(r.opts.Clock.Since(sent))
			wrote = nrev
		}
		return conflict(err) || transient(err) || lost(), err
	})
	if errors.Is(err, errFenced) && holder.deleted {
		r.markLost()
		return fmt.Errorf("%w: kvworker: lease: the lease key of worker %d was deleted: claim lost", snowflake.ErrNotRegistered, worker)
	}
	if errors.Is(err, errFenced) {
		r.markLost()
		return fmt.Errorf("%w: kvworker: lease: worker %d was registered again (by node %q at %v): claim lost",
			snowflake.ErrNotRegistered, worker, holder.Node, time.UnixMilli(holder.Updated).UTC())
	}
	if err != nil {
		return fail(ctx, cctx, "lease "+key, err)
	}
	r.mu.Lock()
	if t := time.UnixMilli(ms); t.After(r.lease) {
		r.lease = t
	}
	r.leaseRev = wrote
	r.mu.Unlock()
	return nil
}

// Held implements snowflake.HeldCounter: the claim keys w<id> of the
// bucket (ids 0..MaxWorker) that exist now, the ids a Register would
// find taken. A claim whose TTL ran out counts until the server removes
// its key (within about a second), as a Create still fails on it until
// then; a purged or expired one (a marker) does not. It reads the keys
// from any replica: a count, not a fence.
func (r *Registry) Held(ctx context.Context) (int, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("%w: kvworker: held", snowflake.ErrRegistryClosed)
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	kl, err := r.kv.ListKeys(cctx)
	if err != nil {
		return 0, fail(ctx, cctx, "held: list keys", err)
	}
	defer func() { _ = kl.Stop() }()
	// A key may be listed twice while it is written (the lister is a
	// watcher): count ids, not lines.
	held := map[int64]bool{}
	for key := range kl.Keys() {
		if !strings.HasPrefix(key, "w") {
			continue // a lease key t<id>
		}
		id, err := strconv.ParseInt(key[1:], 10, 64)
		if err == nil && id >= 0 && id <= r.layout.MaxWorker() && claimKey(id) == key {
			held[id] = true
		}
	}
	// The lister ends its channel early, silently, when cctx ends.
	if cctx.Err() != nil {
		return 0, fail(ctx, cctx, "held: list keys", cctx.Err())
	}
	return len(held), nil
}

// ClaimTTL implements snowflake.ClaimTTLer: Options.TTL, after which a claim
// key that was not refreshed expires and another node may claim the id.
func (r *Registry) ClaimTTL() time.Duration { return r.opts.TTL }

// Lost implements snowflake.Registry: it is closed when the claim key could
// not be refreshed in time (or was taken over), before another node can
// claim the worker id, and when a Lease finds the worker registered again.
func (r *Registry) Lost() <-chan struct{} { return r.lost }

func (r *Registry) isLost() bool {
	select {
	case <-r.lost:
		return true
	default:
		return false
	}
}

func (r *Registry) markLost() { r.lostOnce.Do(func() { close(r.lost) }) }

// Close implements snowflake.Registry: it stops the refresher and, if the
// claim is still held, purges the claim key so the worker id is free at
// once. The lease key stays. Close is idempotent; later calls of Register
// and Lease return snowflake.ErrRegistryClosed.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	registered := r.registered
	r.mu.Unlock()
	if !registered {
		return nil
	}
	r.stop()
	r.wg.Wait()
	if r.isLost() {
		return nil // not ours any more: leave it
	}
	r.markLost() // a closed registry holds no claim
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.Timeout)
	defer cancel()
	r.mu.Lock()
	key, rev := claimKey(r.worker), r.rev
	r.mu.Unlock()
	err := retry(ctx, r.opts.Clock, func() (bool, error) {
		err := r.kv.Purge(ctx, key, jetstream.LastRevision(rev))
		return transient(err), err
	})
	if err != nil && !conflict(err) {
		// It expires after TTL anyway.
		return fail(context.Background(), ctx, "close: purge "+key, err)
	}
	return nil
}

// refresh renews the claim key's TTL every Refresh by publishing its value
// again, expecting the revision it last wrote. The claim expires at
// ok+TTL, ok being when the last successful refresh was sent, and no other
// node can create the key before then. So it closes Lost at
// ok+TTL-Refresh/4 at the latest, leaving the Source a quarter of Refresh
// to stop, and ends; a refresh that lands later fails (the key changed),
// and so does one after the key changed under us, which closes Lost too.
// A refresh that fails is sent again after Refresh/8, not a whole Refresh
// later, each try bounded by that deadline: the claim outlives a stream
// that elects a new leader within most of the TTL.
func (r *Registry) refresh(ctx context.Context, worker int64, rev uint64, ok time.Time) {
	defer r.wg.Done()
	subj := r.keyPre + claimKey(worker)
	tick := r.opts.Clock.NewTicker(r.opts.Refresh)
	defer tick.Stop()
	again := r.opts.Refresh / 8
	failed := false
	for {
		if !failed {
			select {
			case <-ctx.Done():
				return
			case <-tick.C():
			}
		} else if clock.Sleep(ctx, r.opts.Clock, again) != nil {
			return
		}
		sent := r.opts.Clock.Now()
		left := ok.Add(r.opts.TTL - r.opts.Refresh/4).Sub(sent)
		if left <= 0 {
			r.markLost() // too late already (a stalled process)
			return
		}
		r.mu.Lock()
		lease := r.lease
		r.mu.Unlock()
		c := claim{Node: r.opts.Node, Updated: sent.UnixMilli()}
		if !lease.IsZero() {
			c.Lease = lease.UnixMilli()
		}
		val, _ := json.Marshal(c) // cannot fail: strings and ints
		pctx, cancel := context.WithTimeout(ctx, min(r.opts.Timeout, r.opts.Refresh/2, left))
		ack, err := r.js.Publish(pctx, subj, val,
			jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(r.opts.TTL))
		cancel()
		switch {
		case err == nil:
			r.observe(r.opts.Clock.Since(sent))
			rev, ok, failed = ack.Sequence, sent, false
			r.mu.Lock()
			r.rev = rev
			r.mu.Unlock()
			continue
		case ctx.Err() != nil:
			return // closing
		case conflict(err):
			r.markLost() // expired and claimed again, or purged
			return
		}
		failed = true // the deadline is checked before the next try
	}
}

// readLease reads the lease key of worker from the stream leader: its
// value (zero if absent) and revision (0 if absent).
func (r *Registry) readLease(ctx context.Context, worker int64) (leaseRec, uint64, error) {
	var rec leaseRec
	m, err := r.msgGet(ctx, r.keyPre+leaseKey(worker))
	if err != nil || m == nil {
		return rec, 0, err
	}
	if m.Deleted() {
		rec.deleted = true
		return rec, m.Sequence, nil
	}
	if err := json.Unmarshal(m.Data, &rec); err != nil {
		return rec, 0, fmt.Errorf("kvworker: bucket %q key %s: bad value: %v", r.opts.Bucket, leaseKey(worker), err)
	}
	return rec, m.Sequence, nil
}

var (
	_ snowflake.Registry    = (*Registry)(nil)
	_ snowflake.ClaimTTLer  = (*Registry)(nil)
	_ snowflake.LeaseTimer  = (*Registry)(nil)
	_ snowflake.HeldCounter = (*Registry)(nil)
)
