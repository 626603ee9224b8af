package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/wire"
)

// startLeafdBinary builds ./cmd/leafd and runs it with the embedded
// nats-server on a free loopback port and a temporary data directory, as an
// operator would. It returns the NATS URL.
func startLeafdBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs leafd")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build leafd with")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "leafd")
	build := exec.Command(goBin, "build", "-o", bin, "github.com/leafmq/leafmq/cmd/leafd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build leafd: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var out, errOut lockedBuffer
	cmd := exec.Command(bin, "--nats-listen", addr, "--http", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--name", "e2e")
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("leafd stderr:\n%s", errOut.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "nats req leaf.segment.demo") {
		select {
		case err := <-exited:
			t.Fatalf("leafd exited early (%v): %s", err, errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("leafd did not start: %s %s", out.String(), errOut.String())
		}
	}
	return "nats://" + addr
}

var maxIDRe = regexp.MustCompile(`below (\d+)|up to (\d+)`)

// TestDeletedKeyThroughLeafd: issue #12, path 2, against the built leafd
// with its defaults (embedded JetStream KV store, auto-create on). The key
// of a tag is deleted as `nats kv del leaf_alloc orders` does; leafd then
// answers an error for the tag, never an id it handed out before; `leafctl
// tag restart` below the ids already issued is refused, and at the floor the
// tag serves again with new ids.
func TestDeletedKeyThroughLeafd(t *testing.T) {
	url := startLeafdBinary(t)
	nc := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[int64]bool{}
	take := func() error {
		t.Helper()
		msg := wire.NewRequest("leaf.segment.orders", 1000, false)
		reply, err := nc.RequestMsgWithContext(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		if err := wire.ReplyError(reply); err != nil {
			return err
		}
		ids, err := wire.DecodeIDs(nil, reply.Data, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("id %d handed out twice", id)
			}
			seen[id] = true
		}
		return nil
	}
	for range 10 {
		if err := take(); err != nil {
			t.Fatal(err)
		}
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "leaf_alloc")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "orders"); err != nil { // nats kv del leaf_alloc orders
		t.Fatal(err)
	}
	// The node serves what its buffers hold (ids never handed out), then
	// refuses: its next load finds the key deleted.
	var refused error
	for range 20_000 {
		if refused = take(); refused != nil {
			break
		}
	}
	if refused == nil {
		t.Fatal("leafd kept serving the deleted tag")
	}
	// The first refusal may come from the load that found the key gone
	// (404 unknown tag); the lookup after it refuses to auto-create.
	said := refused.Error()
	for range 3 {
		err := take()
		if err == nil {
			t.Fatal("a request after the refusal got ids")
		}
		if !errors.Is(err, wire.ErrUnknownTag) {
			t.Fatalf("request after the key was deleted = %v, want 404", err)
		}
		said += "\n" + err.Error()
	}
	if !strings.Contains(said, "tag was deleted") {
		t.Fatalf("no refusal says the tag was deleted:\n%s", said)
	}

	var high int64
	for id := range seen {
		high = max(high, id)
	}
	code, _, errOut := leafctl(url, "tag", "restart", "orders", "--floor", "1")
	if code != 1 || !strings.Contains(errOut, "below") {
		t.Fatalf("tag restart --floor 1 = %d, %s; want refused", code, errOut)
	}
	m := maxIDRe.FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("the refusal names no max_id: %s", errOut)
	}
	floor, _ := strconv.ParseInt(m[1]+m[2], 10, 64)
	if floor <= high {
		t.Fatalf("the store's max_id %d is not above the highest id issued %d", floor, high)
	}
	if code, out, errOut := leafctl(url, "tag", "restart", "orders", "--floor", strconv.FormatInt(floor, 10)); code != 0 {
		t.Fatalf("tag restart --floor %d = %d, %s %s", floor, code, out, errOut)
	}
	// The node dropped the tag and cached the refusal for a few seconds;
	// then it serves again, above everything it issued.
	testDeadline := time.Now().Add(30 * time.Second)
	for {
		err := take()
		if err == nil {
			break
		}
		if time.Now().After(testDeadline) {
			t.Fatalf("the restarted tag is not served: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
