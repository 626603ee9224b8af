package segment_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// earlyReadStore answers its first Get with what the store held when the
// read began, after release: a read taken just before a create that
// answers after it.
type earlyReadStore struct {
	*testStore
	began   atomic.Bool
	release chan struct{}
}

func (s *earlyReadStore) Get(ctx context.Context, tag wire.Tag) (segment.Tag, error) {
	t, err := s.testStore.Get(ctx, tag)
	if s.began.CompareAndSwap(false, true) {
		<-s.release
	}
	return t, err
}

// TestForgetDuringLookup: a tag created while a lookup of it is under way,
// its store read taken before the create. Once Forget (the create's
// announcement) returned, no request answers 404: neither one that
// would have waited on that lookup, nor one after it, from its miss
// cached.
func TestForgetDuringLookup(t *testing.T) {
	s := &earlyReadStore{testStore: newTestStore(), release: make(chan struct{})}
	e := newEngine(t, segment.Config{Store: s, RefreshInterval: -1, NegativeTTL: time.Minute})
	start(t, e)
	ctx := context.Background()
	tag := wire.MustTag("fresh")
	early := make(chan error, 1)
	go func() { _, err := e.Next(ctx, tag); early <- err }()
	waitFor(t, "the early read", s.began.Load)
	s.create(t, "fresh", 10)
	e.Forget("fresh")
	after := make(chan error, 1)
	go func() { _, err := e.Next(ctx, tag); after <- err }()
	time.Sleep(50 * time.Millisecond) // joins the early lookup, if it can
	close(s.release)
	if err := <-after; err != nil {
		t.Fatalf("Next after Forget = %v, want an id", err)
	}
	if err := <-early; err != nil && !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Next during the create = %v", err)
	}
	if _, err := e.Next(ctx, tag); err != nil {
		t.Fatalf("Next once the early lookup ended = %v, want an id", err)
	}
}
