package producer_test

import (
	"context"
	"fmt"
	"github.com/leafmq/leafmq/wire"
	"log/slog"

	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/snowflake"
)

func Example() {
	ctx := context.Background()
	store := memstore.New()
	_ = store.Create(ctx, segment.Tag{Name: wire.MustTag("orders"), Step: 1000})

	engine, _ := segment.New(segment.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	_ = engine.Start(ctx)
	defer engine.Close()

	p, _ := producer.New(producer.Config{Segments: engine, Logger: slog.New(slog.DiscardHandler)})
	defer p.Close()
	p.Preload() // fill the rings of every known tag now

	ids := make([]int64, 5)
	if err := p.Segment(ctx, wire.MustTag("orders"), ids); err != nil {
		panic(err)
	}
	fmt.Println(ids)
	// Output: [1 2 3 4 5]
}

// A Snowflake ring over a Source that holds worker 1 of Leaf's layout.
func ExampleNewSnowflake() {
	ctx := context.Background()
	layout := snowflake.LeafLayout()
	src, err := snowflake.StartSource(ctx, snowflake.SourceConfig{
		Open: func(context.Context) (snowflake.Registry, error) {
			return snowflake.NewStatic(layout, 1)
		},
		Layout: layout,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer src.Close()

	ring, err := producer.NewSnowflake(producer.SnowflakeConfig{IDs: src, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer ring.Close()

	ids := make([]int64, 3)
	if err := ring.Next(ctx, ids); err != nil {
		panic(err)
	}
	fmt.Println(len(ids), layout.Decompose(ids[0]).Worker)
	// Output: 3 1
}
