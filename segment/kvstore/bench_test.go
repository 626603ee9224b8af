package kvstore_test

import (
	"log/slog"
	"testing"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/kvstore"
	"github.com/leafmq/leafmq/wire"
)

// noIncarnation hides the store's Incarnation: a Reserver then skips the
// check after each range.
type noIncarnation struct{ segment.Store }

// BenchmarkReserverLoad is one range load through segment.Reserver on a
// JetStream KV bucket (an embedded server on loopback), with the
// incarnation check after the floor (the store as it is) and without it:
// the difference is the check's cost per load.
func BenchmarkReserverLoad(b *testing.B) {
	s := natstest.RunServer(b)
	store := open(b, newJS(b, s.ClientURL()), kvstore.Options{Bucket: freshBucket()})
	ctx := testCtx(b)
	tag := wire.MustTag("bench")
	if err := store.Create(ctx, segment.Tag{Name: tag, Step: 1000}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		store segment.Store
	}{{"incarnation-check", store}, {"no-check", noIncarnation{store}}} {
		b.Run(c.name, func(b *testing.B) {
			r := &segment.Reserver{Store: c.store, Floors: segment.NewMemFloors(), Logger: slog.New(slog.DiscardHandler)}
			for b.Loop() {
				if _, err := r.Reserve(ctx, tag, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
