package jskv_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/jskv"
	"github.com/leafmq/leafmq/internal/natstest"
)

// TestUnreplicated names a stream of one replica, whether its
// configuration says 1 or leaves it to the default, and leaves out a
// stream that does not exist.
func TestUnreplicated(t *testing.T) {
	srv := natstest.RunServer(t)
	js, err := jetstream.New(natstest.Connect(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "ONE", Subjects: []string{"one"}, Replicas: 1},
		{Name: "DEFAULT", Subjects: []string{"default"}},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	got := jskv.Unreplicated(ctx, js, "ONE", "MISSING", "DEFAULT")
	if len(got) != 2 || got[0].Stream != "ONE" || got[1].Stream != "DEFAULT" {
		t.Fatalf("Unreplicated = %+v, want ONE then DEFAULT", got)
	}
}
