package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
)

func TestRunServer(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"}); err != nil {
		t.Fatal(err)
	}
}

func TestRunCluster(t *testing.T) {
	start := time.Now()
	servers := natstest.RunCluster(t, 3)
	t.Logf("cluster ready in %v", time.Since(start))
	nc := natstest.Connect(t, natstest.ClientURLs(servers))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	t.Logf("R3 bucket usable after %v", time.Since(start))
}

// TestRunSuperCluster: a request from one cluster reaches a subscriber in
// the other through the gateways, is slowed by Slow, lost while both
// clusters are cut, and goes through again after Heal.
func TestRunSuperCluster(t *testing.T) {
	start := time.Now()
	sc := natstest.RunSuperCluster(t, 1, 2)
	t.Logf("supercluster ready in %v", time.Since(start))
	far := natstest.Connect(t, sc.URL(1))
	if _, err := far.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := far.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := far.ConnectedClusterName(); got != "c1" {
		t.Fatalf("cluster name %q, want c1", got)
	}
	near := natstest.Connect(t, sc.URL(0))
	ask := func(timeout time.Duration) (time.Duration, error) {
		t0 := time.Now()
		_, err := near.Request("echo", []byte("x"), timeout)
		return time.Since(t0), err
	}
	testenv.Eventually(t, "an answer across the gateway", 10*time.Second, func() bool {
		_, err := ask(time.Second)
		return err == nil
	})

	sc.Cut(0)
	sc.Cut(1)
	if _, err := ask(500 * time.Millisecond); err == nil {
		t.Fatal("an answer through a cut gateway")
	}
	sc.Heal(0)
	sc.Heal(1)
	testenv.Eventually(t, "an answer after the heal", 10*time.Second, func() bool {
		_, err := ask(time.Second)
		return err == nil
	})

	sc.Slow(0, 30*time.Millisecond)
	sc.Slow(1, 30*time.Millisecond)
	rtt, err := ask(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rtt < 60*time.Millisecond {
		t.Fatalf("round trip %v through two links slowed 30 ms each, want at least 60 ms", rtt)
	}
}
