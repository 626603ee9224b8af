package segment_test

import (
	"context"
	"fmt"
	"github.com/leafmq/leafmq/wire"
	"log/slog"
	"testing"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
)

// BenchmarkReserve measures the hot path (run with -cpu 1,2,4): parallel
// callers on one tag, one id or a batch at a time. Loads happen in the
// background with the default dynamic step.
func BenchmarkReserve(b *testing.B) {
	for _, max := range []int{1, 100} {
		b.Run(fmt.Sprintf("max=%d", max), func(b *testing.B) {
			ctx := context.Background()
			s := memstore.New()
			if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("bench"), Step: 100_000}); err != nil {
				b.Fatal(err)
			}
			e := newEngine(b, segment.Config{Store: s, RefreshInterval: -1, Logger: slog.New(slog.DiscardHandler)})
			start(b, e)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, _, err := e.Reserve(ctx, wire.MustTag("bench"), max); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
