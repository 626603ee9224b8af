package responder_test

import (
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/snowflake"
)

// A node serves leaf.segment.<tag> and leaf.admin.* from its producer and
// store; here a counter stands in for the producer.
func Example() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	r, err := responder.Start(responder.Config{
		Conn:  nc,
		IDs:   &counter{tags: map[string]bool{"demo": true}},
		Store: memstore.New(),
		Node:  "example",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Stop()
	// Now `nats req leaf.segment.demo 10` answers ten ids.
}

// Decode gives the fields of a snowflake id as leaf.snowflake.decode
// answers them.
func ExampleDecode() {
	layout := snowflake.LeafLayout()
	id, err := layout.Compose(time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC), 1, 42)
	if err != nil {
		log.Fatal(err)
	}
	d := responder.Decode(layout, id)
	fmt.Println(d.Time, d.Timestamp, d.Worker, d.Sequence)
	// Output: 2026-01-02T03:04:05.678Z 1767323045678 1 42
}
