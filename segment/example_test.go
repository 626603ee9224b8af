package segment_test

import (
	"context"
	"fmt"
	"github.com/leafmq/leafmq/wire"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
)

func Example() {
	ctx := context.Background()
	store := memstore.New() // production: segment/mysql or segment/kvstore
	if err := store.Create(ctx, segment.Tag{Name: wire.MustTag("order"), Step: 1000}); err != nil {
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
		id, err := e.Next(ctx, wire.MustTag("order"))
		if err != nil {
			panic(err)
		}
		fmt.Println(id)
	}
	first, n, _ := e.Reserve(ctx, wire.MustTag("order"), 5)
	fmt.Println(first, n)

	_, err = e.Next(ctx, wire.MustTag("no-such-tag"))
	fmt.Println(err)
	// Output:
	// 1
	// 2
	// 3
	// 4 5
	// unknown tag: "no-such-tag"
}

// A StepFile makes the dynamic step survive a restart: the first load of a
// tag after the restart asks the store for the step the tag had.
func ExampleStepFile() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "steps")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store := memstore.New()
	if err := store.Create(ctx, segment.Tag{Name: wire.MustTag("order"), Step: 1000}); err != nil {
		panic(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	path := filepath.Join(dir, "segment-steps.json")

	// Before the restart the tag was busy: its step had grown to 64,000.
	steps, err := segment.OpenStepFile(path, quiet)
	if err != nil {
		panic(err)
	}
	steps.Remember("order", 64_000, time.Now())
	if err := steps.Close(); err != nil { // writes the file
		panic(err)
	}

	// After it, the first segment is 64,000 ids, not the row's 1,000.
	steps, err = segment.OpenStepFile(path, quiet)
	if err != nil {
		panic(err)
	}
	defer steps.Close()
	e, err := segment.New(segment.Config{Store: store, Steps: steps, Logger: quiet,
		OnLoad: func(ev segment.LoadEvent) { fmt.Println("loaded", ev.Tag, ev.Start, ev.End, "step", ev.Step) }})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	if err := e.Start(ctx); err != nil {
		panic(err)
	}
	id, err := e.Next(ctx, wire.MustTag("order"))
	if err != nil {
		panic(err)
	}
	fmt.Println("first id", id)
	// Output:
	// loaded order 1 64001 step 64000
	// first id 1
}
