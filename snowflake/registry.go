package snowflake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Errors of registries, shared by every backend.
var (
	// ErrNoWorker: every worker id of the layout is taken (or the one a
	// backend would reuse is beyond the layout's range, Leaf #57).
	ErrNoWorker = errors.New("no worker id available")
	// ErrRegistryUnavailable: the backend cannot be reached.
	ErrRegistryUnavailable = errors.New("worker registry unavailable")
	// ErrNotRegistered: Lease before Register, or after the claim was lost
	// (expired, or taken over by a later Register of the same worker id).
	ErrNotRegistered = errors.New("worker not registered")
	// ErrRegistryClosed: the registry was closed.
	ErrRegistryClosed = errors.New("worker registry closed")
	// ErrWorkerInUse: a live process other than this one says it holds the
	// worker id a registry gave this one (SourceConfig.Holder).
	ErrWorkerInUse = errors.New("worker id held by a live process")
)

// Registration is a claimed worker id.
type Registration struct {
	// Worker is unique among the live nodes of the registry, 0..MaxWorker.
	Worker int64
	// LastLease is the highest time lease ever recorded for this worker id,
	// by this node or any earlier holder; zero if none. The generator must
	// not issue ids until its clock is past it (Config.LastIssued). A
	// LeaseFile with a stop record that still holds reports the last time
	// used instead (StopRecorder): a bound just as safe, and lower.
	LastLease time.Time
	// Fresh: the registry had recorded nothing at all when it was opened
	// (a bucket never written), so no process has served any of its worker
	// ids before. A worker id with no lease on record then need not wait
	// out a holder that stopped.
	Fresh bool
	// Partial: LastLease is only what this process recorded itself (a
	// cache file standing in for an unreachable registry), not the
	// registry's: another process with the same identity may have leased
	// the worker id beyond it since. The Source then waits out a holder
	// that stopped, as for a worker id with no lease on record.
	Partial bool
}

// Registry hands out worker ids and keeps their time leases: the seam
// between the generator and ZooKeeper, a WORKER_NODE table, JetStream KV or
// static configuration. Implementations are safe for concurrent use.
//
// The contract every backend passes (snowflake/registrytest):
//   - Register claims a worker id that no other live registration holds and
//     returns it with its LastLease. It fences out every earlier holder of
//     the id before it returns: from then on no earlier registration's
//     Lease succeeds, so LastLease is at or after every lease an earlier
//     holder ever had confirmed.
//   - Lease durably records that the worker will use no time beyond until,
//     before it returns; a later Register of the same worker id (by anyone)
//     reports a LastLease at or after it. Leases never move backwards: a
//     lower until is a no-op, but still a confirmation of the claim.
//   - Lease is fenced: it succeeds only while the claim is still this
//     registration's. Once a later Register of the same worker id has
//     happened (in any process), it fails with an error wrapping
//     ErrNotRegistered and closes Lost — even when the process was frozen
//     and its keep-alive never saw the claim expire.
//   - Lost is closed when the claim can no longer be guaranteed (a lease or
//     session that could not be kept alive, or a fenced Lease); the node
//     must stop issuing ids.
//   - Close releases what it can and is idempotent; later calls return
//     ErrRegistryClosed.
//
// A registry whose claims lapse also implements ClaimTTLer. Static has
// nothing to fence: its id comes from configuration, and two processes
// configured with one id are outside the promise.
type Registry interface {
	Register(ctx context.Context) (Registration, error)
	Lease(ctx context.Context, until time.Time) error
	Lost() <-chan struct{}
	Close() error
}

// ClaimTTLer is implemented by a Registry whose claim lapses when it is
// not renewed (a KV key TTL, a ZooKeeper session, a lease row). ClaimTTL is
// the fencing bound: a Source serves no id later than ClaimTTL after the
// start of its last successful Lease call (or of Register, before the
// first), measured on the local monotonic clock, so a process frozen past it (SIGSTOP, a long GC pause, a VM
// migration) stops before another process can have claimed the worker id.
// A Registry that does not implement it (Static) has no such bound.
type ClaimTTLer interface {
	ClaimTTL() time.Duration
}

// LeaseTimer is implemented by a Registry that knows how long a Lease call
// takes on its link now (round trips to its backend, measured): a Source
// leases that much further ahead and gives a renewal twice as long, so a
// node far from its registry still serves. Zero: not known.
type LeaseTimer interface {
	LeaseTime() time.Duration
}

// HeldCounter is implemented by a Registry that can count the worker ids
// of its region (its bucket, znode or table: what it hands out from) that
// a new registration could not get now: the runway of worker ids is the
// layout's MaxWorker+1 minus Held. It counts what the backend says, not
// this registration's view, so every node of a region reports the same
// number, and it works before Register too. What counts as held is the
// backend's rule for handing ids out again: a JetStream KV claim key that
// exists (one whose TTL ran out counts until the server removes it, as a
// Create still fails on it then); with ids that are never handed out
// again (ZooKeeper's sequence numbers, WORKER_NODE's disposable ids)
// every id handed out so far, live or not. Ids beyond the layout do not
// count, so Held is at most MaxWorker+1.
type HeldCounter interface {
	Held(ctx context.Context) (int, error)
}

// StopRecorder is implemented by a Registry that keeps a stop record
// (LeaseFile): at a graceful stop, the last time the worker used. A
// restart of the same worker id on the same data directory then waits only
// past that time instead of past the whole time lease, provided nothing
// leased the worker id since (the registry's lease is still the one of the
// stop). Source.Close calls RecordStop once its generator can make no more
// ids, before it closes the registry; a crash leaves no record, and the
// restart waits out the whole lease.
type StopRecorder interface {
	RecordStop(worker int64, used time.Time) error
}

// Static is a Registry with a worker id from configuration. It keeps leases
// in memory only, so a restarted node learns nothing of its previous leases:
// give it Config.LastIssued from elsewhere, or use it only where clocks are
// trusted. Two nodes configured with one id issue duplicates: operators own
// that.
type Static struct {
	worker int64
	mu     sync.Mutex
	reg    bool
	closed bool
	lease  time.Time
	lost   chan struct{}
}

// NewStatic returns a Static registry for worker, which must fit layout.
func NewStatic(layout Layout, worker int64) (*Static, error) {
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	if worker < 0 || worker > layout.MaxWorker() {
		return nil, fmt.Errorf("%w: worker %d is outside 0..%d of layout %s", ErrNoWorker, worker, layout.MaxWorker(), layout)
	}
	return &Static{worker: worker, lost: make(chan struct{})}, nil
}

// Register implements Registry.
func (s *Static) Register(ctx context.Context) (Registration, error) {
	if err := ctx.Err(); err != nil {
		return Registration{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Registration{}, ErrRegistryClosed
	}
	s.reg = true
	return Registration{Worker: s.worker, LastLease: s.lease}, nil
}

// Lease implements Registry.
func (s *Static) Lease(ctx context.Context, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrRegistryClosed
	case !s.reg:
		return ErrNotRegistered
	}
	if until.After(s.lease) {
		s.lease = until
	}
	return nil
}

// Lost implements Registry: a static claim is never lost.
func (s *Static) Lost() <-chan struct{} { return s.lost }

// Close implements Registry.
func (s *Static) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

var _ Registry = (*Static)(nil)
