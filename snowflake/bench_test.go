package snowflake_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/leafmq/leafmq/snowflake"
)

// BenchmarkNextN measures the real clock's throughput of one worker on the
// Leaf layout, whose limit is 4096 ids/ms (4.096M ids/s). b.N counts ids.
func BenchmarkNextN(b *testing.B) {
	for _, size := range []int{4096, 65536} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			g, err := snowflake.New(snowflake.Config{Worker: 1})
			if err != nil {
				b.Fatal(err)
			}
			dst := make([]int64, size)
			ctx := context.Background()
			start := time.Now()
			for left := b.N; left > 0; left -= len(dst) {
				if _, err := g.NextN(ctx, dst[:min(left, len(dst))]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ids/s")
		})
	}
}

// BenchmarkNext is one id per call, from several goroutines.
func BenchmarkNext(b *testing.B) {
	g, err := snowflake.New(snowflake.Config{Worker: 1})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := g.Next(context.Background()); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ids/s")
}

// BenchmarkSourceNext measures a Source (registry, persisted lease, clock
// guard) over batches. borrow=none is the sustained rate, bounded by the
// layout's 4.096M ids/s; borrow=lease may run ahead of the clock up to the
// lease (UidGenerator's borrowing), so short runs exceed the limit.
func BenchmarkSourceNext(b *testing.B) {
	for _, bc := range []struct {
		name   string
		borrow time.Duration
	}{{"none", -1}, {"lease", 0}} {
		b.Run("borrow="+bc.name+"/batch=4096", func(b *testing.B) {
			layout := snowflake.LeafLayout()
			src, err := snowflake.StartSource(context.Background(), snowflake.SourceConfig{
				Open: func(context.Context) (snowflake.Registry, error) {
					return snowflake.NewStatic(layout, 1)
				},
				BorrowAhead: bc.borrow,
				Logger:      slog.New(slog.DiscardHandler),
			})
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			dst := make([]int64, 4096)
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for left := b.N; left > 0; left -= len(dst) {
				if err := src.Next(ctx, dst[:min(left, len(dst))]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ids/s")
		})
	}
}
