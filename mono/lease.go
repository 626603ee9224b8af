package mono

import (
	"context"
	"errors"
	"time"

	"github.com/leafmq/leafmq/wire"
)

var (
	// ErrHeld: another holder leads the tag (Acquire).
	ErrHeld = errors.New("mono: lease held by another node")
	// ErrLost: the grant expired or was taken (Renew, Release).
	ErrLost = errors.New("mono: lease lost")
	// ErrNotLeader: this node does not lead the tag now (Leader.Next). A
	// 503 on the wire: a switch-over, the client asks again.
	ErrNotLeader = wire.NewCodedError(wire.CodeUnavailable, "mono: not the leader of the tag")
)

// Grant is one holding of a tag's lease.
type Grant struct {
	Tag    string
	Holder string
	Rev    uint64 // the store's revision of the lease, for compare-and-swap
	// Wait, when positive, is how long the new holder must not serve
	// after its acquire was sent: the lease was freed by someone other
	// than its holder (an operator's delete), so the holder may still be
	// serving until its own fence passes, at most a TTL.
	Wait time.Duration
}

// Lease is the one-leader-per-tag lease of monotonic tags. Implementations
// are safe for concurrent use and pass mono/leasetest.
type Lease interface {
	// Acquire makes holder the leader of tag when no one holds it (or the
	// last holder let it expire or released it); otherwise the error wraps
	// ErrHeld and names the holder.
	Acquire(ctx context.Context, tag, holder string) (Grant, error)
	// Renew extends g by TTL from now, only if g is still the holding: else
	// the error wraps ErrLost.
	Renew(ctx context.Context, g Grant) (Grant, error)
	// Release ends g at once, only if g is still the holding.
	Release(ctx context.Context, g Grant) error
	// Holder reports who holds tag now ("" if no one).
	Holder(ctx context.Context, tag string) (string, error)
	// TTL is how long a holding lasts after its last acquire or renewal
	// was received.
	TTL() time.Duration
}
