package docs_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The README's Quickstart with its second node: a leafd with its defaults
// and one joined to it with --nats. The first one's embedded server is the
// only NATS and holds the store: while it is down (kill -9) the second is
// not ready and says why (its Leaf HTTP API serves what its buffers
// hold); once the first is back on its data directory, the second
// reconnects by itself and serves again, and no id of either repeats. docs/fault-model.md#a-nats-server-crashes-or-restarts says so.
func TestQuickstartFirstNodeRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts leafd")
	}
	leafdBin, _ := bins(t)
	natsAddr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	dataFirst := t.TempDir()
	first, err := launch(leafdBin, dataFirst, "--name", "first", "--nats-listen", natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.stop() })
	second, err := launch(leafdBin, t.TempDir(), "--name", "second", "--nats", "nats://"+natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.stop)

	seen := map[int64]string{}
	take := func(n *leafd, who string) {
		t.Helper()
		code, body := n.get("/api/segment/get/demo")
		id, err := strconv.ParseInt(body, 10, 64)
		if code != http.StatusOK || err != nil || id <= 0 {
			t.Fatalf("%s: /api/segment/get/demo: %d %q", who, code, body)
		}
		if by, ok := seen[id]; ok {
			t.Fatalf("%s handed out %d, which %s had handed out", who, id, by)
		}
		seen[id] = who
	}
	for range 50 {
		take(first, "first")
		take(second, "second")
	}

	first.kill()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := second.get("/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "NATS") {
			t.Logf("second while the first is down: %d %s", code, body)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second, 30 s after the first was killed: /readyz %d %q, want 503 naming NATS", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Its Leaf HTTP API still serves what its buffers hold, or 503 once
	// they are empty; none of those ids may come again.
	for range 20 {
		code, body := second.get("/api/segment/get/demo")
		if code == http.StatusServiceUnavailable {
			break
		}
		id, err := strconv.ParseInt(body, 10, 64)
		if code != http.StatusOK || err != nil {
			t.Fatalf("second's HTTP API while the first is down: %d %q, want an id or 503", code, body)
		}
		if by, ok := seen[id]; ok {
			t.Fatalf("second handed out %d while the first was down, which %s had handed out", id, by)
		}
		seen[id] = "second, alone"
	}

	restarted := time.Now()
	first, err = launch(leafdBin, dataFirst, "--name", "first", "--nats-listen", natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.waitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("second ready again %v after the first was started again", time.Since(restarted).Round(10*time.Millisecond))
	for range 50 {
		take(first, "first, restarted")
		take(second, "second")
	}
}
