package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/freeport"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/snowflake/kvworker"
)

// TestStartChecksRunTogether: the start's independent steps run together.
// A node whose MySQL segment store does not answer yet (nothing listens on
// its port) claims its snowflake worker id in the KV registry meanwhile,
// so its start ends as soon as the store answers instead of registering
// only then (after the store opened and the tags loaded).
func TestStartChecksRunTogether(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	closed, err := freeport.Addr() // a port nothing listens on
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		n, err := node.Start(ctx, config.Config{
			Name:     "together",
			NATS:     config.NATSConfig{URL: s.ClientURL()},
			Store:    config.StoreConfig{MySQL: fmt.Sprintf("leaf:leaf@tcp(%s)/leaf", closed)},
			Registry: config.RegistryConfig{Kind: config.RegistryKV},
			DataDir:  t.TempDir(),
			HTTP:     config.HTTPConfig{Addr: "127.0.0.1:0"},
		}, nil)
		if err == nil {
			_ = n.Close(context.Background())
		}
		done <- err
	}()
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	claimed := func() bool {
		kctx, kcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer kcancel()
		kv, err := js.KeyValue(kctx, kvworker.DefaultBucket)
		if err != nil {
			return false
		}
		keys, err := kv.Keys(kctx)
		if err != nil {
			return false
		}
		for _, k := range keys {
			e, err := kv.Get(kctx, k)
			if err != nil || k[0] != 'w' {
				continue
			}
			var c struct{ Node string }
			if json.Unmarshal(e.Value(), &c) == nil && c.Node == "together" {
				return true
			}
		}
		return false
	}
	testenv.Eventually(t, "a worker id claimed while the segment store does not answer", 20*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("start ended while the store did not answer: %v", err)
		default:
		}
		return claimed()
	})
	cancel()
	if err := <-done; err == nil {
		t.Fatal("started without its segment store")
	}
}
