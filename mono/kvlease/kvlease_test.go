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

// TestAcquireAfterHandDeleteWaits: a lease freed by its holder's Release
// or by its TTL is taken at once; one deleted or purged by hand (`nats kv
// del leaf_mono TAG`), or with no trace at all (its markers erased too, a
// key never written), is taken with Wait = TTL, because a holder may still
// be serving until its fence passes.
func TestAcquireAfterHandDeleteWaits(t *testing.T) {
	s := natstest.RunServer(t)
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	l, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "waits", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "waits")
	if err != nil {
		t.Fatal(err)
	}
	acquire := func(want time.Duration, why string) mono.Grant {
		t.Helper()
		g, err := l.Acquire(ctx, "t", "n")
		if err != nil || g.Wait != want {
			t.Fatalf("%s: Acquire = %+v, %v; want Wait %v", why, g, err, want)
		}
		return g
	}
	g := acquire(time.Second, "a key with no message")
	if err := l.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	acquire(0, "after a Release")
	if err := kv.Delete(ctx, "t"); err != nil { // the operator
		t.Fatal(err)
	}
	acquire(time.Second, "after nats kv del")
	if err := kv.Purge(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	g = acquire(time.Second, "after nats kv purge")
	if err := l.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	acquire(0, "after a Release")
	if err := kv.Purge(ctx, "t"); err != nil { // the operator, then every marker erased
		t.Fatal(err)
	}
	if err := kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}
	acquire(time.Second, "after a purge and its marker erased")
	// Not renewed: the server expires the key after its TTL.
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, err = l.Acquire(ctx, "t", "n")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key did not expire: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if g.Wait != 0 {
		t.Fatalf("Acquire after the TTL ran out = %+v, want Wait 0", g)
	}
}
