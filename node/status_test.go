package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
)

// Every node answers leaf.admin.status with its tags, buffers, rings and
// snowflake state.
func TestStatus(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	a := startNode(t, config.Config{Name: "st-a", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 1}})
	startNode(t, config.Config{Name: "st-b", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryOff}})
	waitServing(t, a)
	nc := natstest.Connect(t, s.ClientURL())
	for range 20 {
		if _, err := takeReady(nc, "st", 10, false); err != nil {
			t.Fatal(err)
		}
	}
	sts, err := ask.Status(context.Background(), nc, "", 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 2 || sts[0].Node != "st-a" || sts[1].Node != "st-b" {
		t.Fatalf("statuses %+v", sts)
	}
	var taken uint64
	for _, st := range sts {
		if !st.Ready || st.Store != "jetstream-kv" || st.Version == "" || st.Started == 0 {
			t.Errorf("%s: %+v", st.Node, st)
		}
		for _, tag := range st.Tags {
			if tag.Tag == "st" {
				// The current buffer may be used up, the other one ready,
				// or on its way (a load, with its fsyncs, under way).
				ready := tag.Loading
				for _, b := range tag.Buffers {
					ready = ready || b.Ready && b.Max > b.Value && b.Step > 0
				}
				if tag.Loads == 0 || !ready || tag.RingCap == 0 {
					t.Errorf("%s: tag %+v", st.Node, tag)
				}
				taken += tag.Taken
			}
		}
	}
	if taken == 0 || taken > 200 { // requests that find the ring short are served by the engine
		t.Errorf("%d ids taken from the rings, want some of the 200", taken)
	}
	sf := sts[0].Snow
	if sf == nil || sf.State != "serving" || sf.Worker != 1 || !sf.Joined || sf.Registry != "static" ||
		sf.LeaseUntil <= time.Now().UnixNano() || !strings.HasPrefix(sf.Layout, "1+41+10+12") || sf.RingCap != 65536 {
		t.Errorf("snowflake status %+v", sf)
	}
	if sts[1].Snow != nil {
		t.Errorf("a node with snowflake off reports %+v", sts[1].Snow)
	}
	if err := a.Ready(); err != nil {
		t.Errorf("Ready: %v", err)
	}
}
