package responder_test

import (
	"log"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment/memstore"
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
