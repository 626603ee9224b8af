package kvworker_test

import (
	"context"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snowflake/kvworker"
)

func Example() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	reg, err := kvworker.Open(ctx, js, snowflake.LeafLayout(), kvworker.Options{Node: "leafd-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	r, err := reg.Register(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Issue nothing before the clock has passed r.LastLease; record a lease
	// before using time beyond it.
	if err := reg.Lease(ctx, time.Now().Add(3*time.Second)); err != nil {
		log.Fatal(err)
	}
	log.Printf("worker %d, previous lease %v", r.Worker, r.LastLease)
	<-reg.Lost() // stop issuing: another node may get this worker id
}
