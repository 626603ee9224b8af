package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/client"
	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/node"
)

// leafd starts a leafd node with an embedded NATS server in-process, for the
// examples, and returns its URL and a function that stops it.
func leafd(autoCreate string) (url string, stop func()) {
	dir, err := os.MkdirTemp("", "leafmq-example")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := node.Start(ctx, config.Config{
		Name:     "example",
		NATS:     config.NATSConfig{Listen: "127.0.0.1:-1"},
		HTTP:     config.HTTPConfig{Addr: "off"},
		DataDir:  dir,
		Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 7},
		Store:    config.StoreConfig{AutoCreate: autoCreate},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		log.Fatal(err)
	}
	return n.ClientURL(), func() {
		_ = n.Close(context.Background())
		_ = os.RemoveAll(dir)
	}
}

func ExampleNew() {
	url, stop := leafd("")
	defer stop()

	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // before nc.Close

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	id, err := c.Next(ctx, "orders") // a new tag starts at 1; ids grow, gaps are allowed
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id > 0)
	// Output: true
}

func ExampleClient_Next() {
	url, stop := leafd("")
	defer stop()
	nc, _ := nats.Connect(url)
	defer nc.Close()
	c, _ := client.New(nc)
	defer c.Close()

	ctx := context.Background()
	seen := map[int64]bool{}
	for range 3 {
		id, err := c.Next(ctx, "orders") // from the local cache, refilled in the background
		if err != nil {
			log.Fatal(err)
		}
		seen[id] = true
	}
	ids, err := c.NextN(ctx, "orders", 4) // 4 more
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range ids {
		seen[id] = true
	}
	// Ids are unique; they are usually, not always, consecutive.
	fmt.Println(len(seen), "distinct ids")
	// Output: 7 distinct ids
}

func ExampleClient_Next_errors() {
	url, stop := leafd("false") // tags are not created on first use
	defer stop()
	nc, _ := nats.Connect(url)
	defer nc.Close()
	c, _ := client.New(nc)
	defer c.Close()

	ctx := context.Background()
	_, err := c.Next(ctx, "no-such-tag")
	fmt.Println(errors.Is(err, client.ErrUnknownTag))
	_, err = c.Next(ctx, "orders.*") // rejected locally: not a tag
	fmt.Println(errors.Is(err, client.ErrBadRequest))
	c.Close()
	_, err = c.Next(ctx, "orders")
	fmt.Println(errors.Is(err, client.ErrClosed))
	// Output:
	// true
	// true
	// true
}

func ExampleClient_Snowflake() {
	url, stop := leafd("")
	defer stop()
	nc, _ := nats.Connect(url)
	defer nc.Close()
	c, _ := client.New(nc, client.WithSnowflakeMaxAge(500*time.Millisecond))
	defer c.Close()

	id, err := c.Snowflake(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	d := c.Decode(id)
	fmt.Println("worker", d.Worker)
	// Output: worker 7
}

func ExampleClient_Decode() {
	url, stop := leafd("")
	defer stop()
	nc, _ := nats.Connect(url)
	defer nc.Close()
	c, _ := client.New(nc) // the layout is the servers': WithLayout, default Leaf's
	defer c.Close()

	d := c.Decode(1958136933381066753) // local: 41 bits of ms since 2010-11-04, 10 of worker, 12 of sequence
	fmt.Println(d.Time.Format(time.RFC3339Nano), d.Worker, d.Sequence)
	// Output: 2025-08-20T12:00:00Z 5 1
}
