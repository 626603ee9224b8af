package producer_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
)

func Example() {
	ctx := context.Background()
	store := memstore.New()
	_ = store.Create(ctx, segment.Tag{Name: "orders", Step: 1000})

	engine, _ := segment.New(segment.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	_ = engine.Start(ctx)
	defer engine.Close()

	p, _ := producer.New(producer.Config{Segments: engine, Logger: slog.New(slog.DiscardHandler)})
	defer p.Close()
	p.Preload() // fill the rings of every known tag now

	ids := make([]int64, 5)
	if err := p.Segment(ctx, "orders", ids); err != nil {
		panic(err)
	}
	fmt.Println(ids)
	// Output: [1 2 3 4 5]
}
