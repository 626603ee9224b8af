package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/node"
)

// TestTagRegion: with two regions on one NATS cluster (one queue group for
// the unscoped admin subjects), --region names the store a tag command
// acts on: every tag created with --region west is in west's list and not
// in east's. Of the deployment's three region ids one has no nodes yet: a
// monotonic create waits for its answer until the operator names it
// undeployed.
func TestTagRegion(t *testing.T) {
	s := natstest.RunServer(t)
	for i, name := range []string{"east", "west"} {
		cfg := config.Config{Name: name + "-1", NATS: config.NATSConfig{URL: s.ClientURL()}, HTTP: config.HTTPConfig{Addr: "off"},
			DataDir: t.TempDir(), Registry: config.RegistryConfig{Kind: config.RegistryKV}}
		cfg.Region.Count, cfg.Region.Name = 3, name
		cfg.Region.SetID(i)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n, err := node.Start(ctx, cfg, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close(context.Background()) })
	}
	url := s.ClientURL()
	for i := range 6 {
		tag := fmt.Sprintf("w%d", i)
		if code, _, errOut := leafctl(url, "tag", "create", tag, "--region", "west"); code != 0 {
			t.Fatalf("create %s in west: %d %s", tag, code, errOut)
		}
	}
	_, west, _ := leafctl(url, "tag", "list", "--region", "west")
	_, east, _ := leafctl(url, "tag", "list", "--region", "east")
	for i := range 6 {
		tag := fmt.Sprintf("w%d ", i)
		if !strings.Contains(west, tag) || strings.Contains(east, tag) {
			t.Fatalf("tag %s: west's list\n%s\neast's list\n%s\nwant it in west's only", tag, west, east)
		}
	}
	if code, _, errOut := leafctl(url, "tag", "create", "ticks", "--mode", "mono"); code != 1 || !strings.Contains(errOut, "no answer from region ids [2]") {
		t.Errorf("mono create with region id 2 silent: %d %s, want refused", code, errOut)
	}
	if code, out, errOut := leafctl(url, "tag", "create", "ticks", "--mode", "mono", "--undeployed-regions", "2"); code != 0 || !strings.Contains(out, "mono") {
		t.Errorf("mono create with region id 2 undeployed: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := leafctl(url, "tag", "create", "ticks2", "--undeployed-regions", "x"); code != 2 {
		t.Errorf("--undeployed-regions x: %d %s, want a usage error", code, errOut)
	}
	if code, _, errOut := leafctl(url, "tag", "list", "--region", "a.b"); code != 2 || !strings.Contains(errOut, "--region") {
		t.Errorf("--region a.b: %d %s, want a usage error", code, errOut)
	}
}
