package segment_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
)

func Example() {
	ctx := context.Background()
	store := memstore.New() // production: segment/mysql or segment/kvstore
	if err := store.Create(ctx, segment.Tag{Name: "order", Step: 1000}); err != nil {
		panic(err)
	}

	e, err := segment.New(segment.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	if err := e.Start(ctx); err != nil { // lists the tags, preloads a segment of each
		panic(err)
	}

	for range 3 {
		id, err := e.Next(ctx, "order")
		if err != nil {
			panic(err)
		}
		fmt.Println(id)
	}
	first, n, _ := e.Reserve(ctx, "order", 5)
	fmt.Println(first, n)

	_, err = e.Next(ctx, "no-such-tag")
	fmt.Println(err)
	// Output:
	// 1
	// 2
	// 3
	// 4 5
	// unknown tag: "no-such-tag"
}
