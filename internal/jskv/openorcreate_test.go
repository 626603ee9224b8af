package jskv_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/jskv"
	"github.com/leafmq/leafmq/internal/natstest"
)

// TestOpenOrCreateAfterDelete: a bucket deleted (`nats kv del`) and made
// again at once, as a node does that finds it gone. The server removes the
// emptied directories of the deleted stream from a goroutine of its own,
// which now and then fails the new stream's create (about 1 in 300 here);
// OpenOrCreate makes it again.
func TestOpenOrCreateAfterDelete(t *testing.T) {
	s := natstest.RunServer(t)
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.KeyValueConfig{Bucket: "again", Storage: jetstream.FileStorage}
	for i := range 2000 {
		if _, err := jskv.OpenOrCreate(t.Context(), js, cfg); err != nil {
			t.Fatalf("make %d: %v", i, err)
		}
		if err := js.DeleteKeyValue(t.Context(), cfg.Bucket); err != nil {
			t.Fatal(err)
		}
	}
}
