package kvworker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/snowflake/kvworker"
)

// TestLeaseWithoutMetaLeader: a region cut off from the others keeps its
// bucket's stream leader, but its servers lose JetStream's meta leader
// (one for the whole super-cluster) and then refuse the API's message gets
// (503, JetStream system temporarily unavailable). A registered worker
// still renews its time lease there: its compare-and-swap on the revision
// it wrote last goes to the stream leader and proves the key still its
// own, with no read. Without it snowflake stops in every cut-off region
// once --lease-ahead has run out.
func TestLeaseWithoutMetaLeader(t *testing.T) {
	sc := natstest.RunSuperCluster(t, 1, 1, 1)
	nc := natstest.Connect(t, sc.URL(0))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r := open(t, js, layout16(), kvworker.Options{Region: "c0", Timeout: 2 * time.Second})
	reg, err := r.Register(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Lease(ctx(t), time.Now().Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	sc.Cut(0)
	sc.Cut(1)
	sc.Cut(2)
	sc.WaitNoMetaLeader(0, "KV_"+kvworker.BucketFor("c0"))
	for i := range 3 {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.Lease(c, time.Now().Add(3*time.Second))
		cancel()
		if err != nil {
			t.Fatalf("lease %d with c0 cut off: %v", i, err)
		}
	}
	// The key written again as it is (an operator's put of the same
	// value; as after an answer lost): the revision this registration
	// knows is no longer the latest, so the renewal must read the key,
	// from a replica, and confirm by its compare-and-swap.
	kv, err := js.KeyValue(ctx(t), kvworker.BucketFor("c0"))
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("t%d", reg.Worker)
	e, err := kv.Get(ctx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx(t), key, e.Value()); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.Lease(c, time.Now().Add(3*time.Second))
		cancel()
		if err != nil {
			t.Fatalf("lease %d with c0 cut off, after a write it did not make: %v", i, err)
		}
	}
	// A registration during the cut (a leafd that lost its claim, or
	// restarted): the fence reads the lease key from a replica, and the
	// id's last lease is its LastLease. Before, every register failed
	// with 10008 until the heal, and the region's snowflake stayed down.
	_ = r.Close()
	again := open(t, js, layout16(), kvworker.Options{Region: "c0", Timeout: 5 * time.Second, Prefer: []int64{reg.Worker}})
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg2, err := again.Register(c)
	if err != nil {
		t.Fatalf("register with c0 cut off: %v", err)
	}
	t.Logf("registered worker %d (was %d), last lease %v", reg2.Worker, reg.Worker, reg2.LastLease)
	if reg2.Worker == reg.Worker && reg2.LastLease.Before(time.Now().Add(2*time.Second)) {
		t.Fatalf("worker %d registered again with LastLease %v: below the lease renewed during the cut", reg2.Worker, reg2.LastLease)
	}
	sc.Heal(0)
	sc.Heal(1)
	sc.Heal(2)
}
