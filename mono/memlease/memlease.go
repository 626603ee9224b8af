package memlease

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/mono"
)

// Lease is an in-memory mono.Lease.
type Lease struct {
	ttl   time.Duration
	clock clock.Clock

	mu      sync.Mutex
	rev     uint64
	held    map[string]holding
	dropped map[string]bool // freed by Drop: the next Acquire waits a TTL
}

type holding struct {
	holder string
	rev    uint64
	until  time.Time
}

// New returns a Lease with ttl on clock c (clock.Real if nil).
func New(ttl time.Duration, c clock.Clock) *Lease {
	return &Lease{ttl: ttl, clock: clock.Or(c), held: map[string]holding{}, dropped: map[string]bool{}}
}

// Drop ends tag's holding as an operator's delete of the lease key would:
// the holder learns it at its next renewal, and the next Acquire gets a
// Grant with Wait = TTL.
func (l *Lease) Drop(tag string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.held[tag]; ok {
		delete(l.held, tag)
		l.dropped[tag] = true
	}
}

// TTL implements mono.Lease.
func (l *Lease) TTL() time.Duration { return l.ttl }

func (l *Lease) live(tag string) (holding, bool) {
	h, ok := l.held[tag]
	if ok && !l.clock.Now().Before(h.until) {
		delete(l.held, tag)
		return holding{}, false
	}
	return h, ok
}

// Acquire implements mono.Lease.
func (l *Lease) Acquire(_ context.Context, tag, holder string) (mono.Grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.live(tag); ok {
		return mono.Grant{}, fmt.Errorf("%w: %q by %s", mono.ErrHeld, tag, h.holder)
	}
	l.rev++
	l.held[tag] = holding{holder: holder, rev: l.rev, until: l.clock.Now().Add(l.ttl)}
	g := mono.Grant{Tag: tag, Holder: holder, Rev: l.rev}
	if l.dropped[tag] {
		delete(l.dropped, tag)
		g.Wait = l.ttl
	}
	return g, nil
}

// Renew implements mono.Lease.
func (l *Lease) Renew(_ context.Context, g mono.Grant) (mono.Grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.live(g.Tag); !ok || h.rev != g.Rev {
		return mono.Grant{}, fmt.Errorf("%w: %q", mono.ErrLost, g.Tag)
	}
	l.rev++
	l.held[g.Tag] = holding{holder: g.Holder, rev: l.rev, until: l.clock.Now().Add(l.ttl)}
	g.Rev = l.rev
	return g, nil
}

// Release implements mono.Lease.
func (l *Lease) Release(_ context.Context, g mono.Grant) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.live(g.Tag); !ok || h.rev != g.Rev {
		return fmt.Errorf("%w: %q", mono.ErrLost, g.Tag)
	}
	delete(l.held, g.Tag)
	return nil
}

// Holder implements mono.Lease.
func (l *Lease) Holder(_ context.Context, tag string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, _ := l.live(tag)
	return h.holder, nil
}

var _ mono.Lease = (*Lease)(nil)
