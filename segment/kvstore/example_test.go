package kvstore_test

import (
	"context"
	"fmt"
	"github.com/leafmq/leafmq/wire"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/kvstore"
)

func Example() {
	// An embedded JetStream server, as leafd starts by default.
	dir, _ := os.MkdirTemp("", "kvstore-example")
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		panic(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(5 * time.Second) {
		panic("nats-server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	store, err := kvstore.Open(ctx, js, kvstore.Options{}) // bucket "leaf_alloc", R1
	if err != nil {
		panic(err)
	}
	defer store.Close()

	if err := store.Create(ctx, segment.Tag{Name: wire.MustTag("order"), Step: 1000, Description: "order ids"}); err != nil {
		panic(err)
	}
	for range 2 {
		a, err := store.Advance(ctx, wire.MustTag("order"), 0, 0)
		if err != nil {
			panic(err)
		}
		fmt.Printf("ids [%d, %d)\n", a.Start(), a.End())
	}
	a, _ := store.Advance(ctx, wire.MustTag("order"), 5, 0)
	fmt.Printf("ids [%d, %d)\n", a.Start(), a.End())
	// Output:
	// ids [1, 1001)
	// ids [1001, 2001)
	// ids [2001, 2006)
}
