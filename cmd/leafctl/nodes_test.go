package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/node"
)

func TestNodesPoolBatch(t *testing.T) {
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, config.Config{
		Name:     "ctl-pool",
		NATS:     config.NATSConfig{URL: s.ClientURL()},
		HTTP:     config.HTTPConfig{Addr: "off"},
		DataDir:  t.TempDir(),
		Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 2},
		Pool:     config.PoolConfig{Tags: "demo,snowflake", Depth: 4, Batch: 50},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	url := s.ClientURL()
	if code, _, errOut := leafctl(url, "next", "demo", "-n", "3"); code != 0 {
		t.Fatalf("next: %s", errOut)
	}
	// The pools fill up.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, out, _ := leafctl(url, "pool")
		if strings.Contains(out, "leaf.pool.segment.demo  4") && strings.Contains(out, "leaf.pool.snowflake     4") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool never full:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"nodes", []string{"nodes"}, 0, "ctl-pool", ""},
		// The SERVICE column names the micro services as nats micro ls
		// and the README do.
		{"nodes segment service", []string{"nodes"}, 0, "ctl-pool  leaf-segment", ""},
		{"nodes snowflake service", []string{"nodes"}, 0, "ctl-pool  leaf-snowflake", ""},
		// A node's two leaf-segment instances (its admin subjects, its
		// segment queue group) are told apart by the ENGINE column.
		{"nodes admin engine", []string{"nodes"}, 0, "leaf-segment    admin", ""},
		{"nodes segment engine", []string{"nodes"}, 0, "leaf-segment    segment", ""},
		{"nodes json service", []string{"nodes", "--json"}, 0, `"service": "leaf-snowflake"`, ""},
		{"nodes json", []string{"nodes", "--json"}, 0, `"node": "ctl-pool"`, ""},
		{"pool json", []string{"pool", "--json"}, 0, `"subject": "leaf.pool.snowflake"`, ""},
		{"batch", []string{"batch", "demo"}, 0, "\n", ""},
		{"batch snowflake json", []string{"batch", "snowflake", "--json"}, 0, "[", ""},
		{"batch bad tag", []string{"batch", "a.b"}, 2, "", "invalid"},
		{"batch no pool", []string{"batch", "other", "--wait", "100ms"}, 1, "", "empty"},
		{"batch no arg", []string{"batch"}, 2, "", "wants 1 argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := leafctl(url, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
				t.Fatalf("leafctl %v = %d\nstdout: %s\nstderr: %s\nwant code %d, stdout with %q, stderr with %q",
					tc.args, code, out, errOut, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
	if _, out, _ := leafctl(url, "batch", "demo"); len(strings.Fields(out)) != 50 {
		t.Fatalf("a batch of %d ids, want 50", len(strings.Fields(out)))
	}
}

func TestNodesNone(t *testing.T) {
	s := natstest.RunServer(t)
	if code, _, errOut := leafctl(s.ClientURL(), "nodes", "--wait", "100ms"); code != 1 || !strings.Contains(errOut, "no leafd") {
		t.Fatalf("nodes without leafd: %d %s", code, errOut)
	}
	if code, _, errOut := leafctl(s.ClientURL(), "pool"); code != 1 || !strings.Contains(errOut, "no pool") {
		t.Fatalf("pool without a pool: %d %s", code, errOut)
	}
}

func TestBenchPool(t *testing.T) {
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, config.Config{
		Name:     "bench-pool",
		NATS:     config.NATSConfig{URL: s.ClientURL()},
		HTTP:     config.HTTPConfig{Addr: "off"},
		DataDir:  t.TempDir(),
		Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 3},
		Pool:     config.PoolConfig{Tags: "bp,snowflake", Depth: 8, Batch: 100},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	for _, tag := range []string{"bp", "snowflake"} {
		code, out, errOut := leafctl(s.ClientURL(), "bench", "--mode", "pool", "--tag", tag, "-c", "2", "-d", "500ms",
			"--warmup", "0s", "--check", "--quiet")
		if code != 0 || !strings.Contains(out, "leaf.pool.") || strings.Contains(out, "duplicate") {
			t.Fatalf("bench pool %s = %d\n%s\n%s", tag, code, out, errOut)
		}
	}
	if code, _, errOut := leafctl(s.ClientURL(), "bench", "--mode", "pool", "--baseline"); code != 2 || !strings.Contains(errOut, "--baseline") {
		t.Fatalf("pool with baseline: %d %s", code, errOut)
	}
}

// With --region, pool and batch read the region's pool (LEAF_POOL_<region>):
// a node of region east fills east's, and the pool of no region is none.
func TestPoolRegionFlag(t *testing.T) {
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := config.Config{
		Name:     "ctl-east",
		NATS:     config.NATSConfig{URL: s.ClientURL()},
		HTTP:     config.HTTPConfig{Addr: "off"},
		DataDir:  t.TempDir(),
		Registry: config.RegistryConfig{Kind: config.RegistryKV},
		Pool:     config.PoolConfig{Tags: "demo", Depth: 3, Batch: 20},
	}
	cfg.Region.Count, cfg.Region.Name, cfg.Store.AutoCreate = 2, "east", "true"
	cfg.Region.SetID(0)
	n, err := node.Start(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	url := s.ClientURL()
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, out, _ := leafctl(url, "pool", "--region", "east")
		if strings.Contains(out, "leaf.in.east.pool.segment.demo  3") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("east's pool never full:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	code, out, errOut := leafctl(url, "batch", "demo", "--region", "east")
	if ids := strings.Fields(out); code != 0 || len(ids) != 20 {
		t.Fatalf("batch --region east: %d, %d ids: %s", code, len(ids), errOut)
	}
	if code, _, errOut := leafctl(url, "pool"); code != 1 || !strings.Contains(errOut, "no pool") {
		t.Fatalf("pool of no region: %d %s", code, errOut)
	}
	if code, _, _ := leafctl(url, "batch", "demo", "--region", "a.b"); code != 2 {
		t.Fatalf("batch --region a.b: exit %d, want 2", code)
	}
}
