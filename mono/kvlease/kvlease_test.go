package kvlease_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/mono/kvlease"
	"github.com/leafmq/leafmq/mono/leasetest"
)

func TestConformance(t *testing.T) {
	s := natstest.RunServer(t)
	n := 0
	leasetest.Run(t, time.Second, func(t *testing.T, ttl time.Duration) mono.Lease {
		js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
		if err != nil {
			t.Fatal(err)
		}
		n++
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "mono" + string(rune('a'+n)), TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}
