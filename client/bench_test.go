package client

import (
	"context"
	"testing"

	"github.com/leafmq/leafmq/config"
)

// BenchmarkNext takes ids of one tag from one client with prefetch on, from
// one goroutine and from GOMAXPROCS goroutines (RunParallel), against a real
// leafd in the same process (which shares the CPUs). Run with -cpu 2.
func BenchmarkNext(b *testing.B) {
	url := natsURL(b)
	startLeafd(b, url, config.Config{})
	c := newClient(b, url)
	ctx := context.Background()
	for range 100_000 { // the rate estimate grows the batches
		if _, err := c.Next(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("1goroutine", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Next(ctx, "bench"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Next(ctx, "bench"); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
	})
}

// BenchmarkSnowflake is BenchmarkNext for snowflake ids (each one checks its
// batch's age against the clock) against a real leafd.
func BenchmarkSnowflake(b *testing.B) {
	url := natsURL(b)
	startLeafd(b, url, config.Config{})
	c := newClient(b, url)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Snowflake(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
}

// BenchmarkNextN takes 100 ids per call from a real leafd.
func BenchmarkNextN(b *testing.B) {
	url := natsURL(b)
	startLeafd(b, url, config.Config{})
	c := newClient(b, url)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.NextN(ctx, "bench", 100); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "ids/s")
}
