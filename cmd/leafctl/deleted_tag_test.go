package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/freeport"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/wire"
)

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// runLeafd runs bin with the embedded nats-server on addr and the data
// directory data, as an operator would, and waits until it serves. The
// returned function stops it (SIGTERM); clean-up stops it too.
func runLeafd(t *testing.T, bin, addr, data string) (stop func()) {
	t.Helper()
	_, stop = runLeafdArgs(t, bin, "--nats-listen", addr, "--http", "127.0.0.1:0", "--data", data, "--name", "e2e")
	return stop
}

// runLeafdArgs runs bin with args and waits until it serves; it returns
// the process (for signals) and its stop (SIGTERM, also at clean-up).
func runLeafdArgs(t *testing.T, bin string, args ...string) (_ *exec.Cmd, stop func()) {
	t.Helper()
	var out, errOut testenv.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
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
	}
	t.Cleanup(stop)
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
	return cmd, stop
}

// startLeafdBinary builds and runs leafd with its defaults on a fresh data
// directory and returns its NATS URL.
func startLeafdBinary(t *testing.T) string {
	t.Helper()
	addr := freeAddr(t)
	runLeafd(t, testenv.Build(t, "cmd/leafd"), addr, filepath.Join(t.TempDir(), "data"))
	return "nats://" + addr
}

// idTaker asks for ids of a tag and fails the test on any id seen before.
type idTaker struct {
	t    *testing.T
	nc   *nats.Conn
	seen map[int64]bool
}

func (k *idTaker) take(ctx context.Context, tag string) error {
	k.t.Helper()
	msg := wire.NewRequest("leaf.segment."+tag, 1000, false)
	reply, err := k.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		k.t.Fatal(err)
	}
	if err := wire.ReplyError(reply); err != nil {
		return err
	}
	ids, err := wire.DecodeIDs(nil, reply.Data, false)
	if err != nil {
		k.t.Fatal(err)
	}
	for _, id := range ids {
		if k.seen[id] {
			k.t.Fatalf("id %d handed out twice", id)
		}
		k.seen[id] = true
	}
	return nil
}

func (k *idTaker) high() int64 {
	var h int64
	for id := range k.seen {
		h = max(h, id)
	}
	return h
}

var maxIDRe = regexp.MustCompile(`below (\d+)|up to (\d+)`)

// TestDeletedKeyThroughLeafd: a tag's key deleted, against the built leafd
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
	for taken := 0; taken < 10; {
		err := take()
		if errors.Is(err, wire.ErrUnavailable) {
			continue // a load slower than the ready wait: ask again, as clients do
		}
		if err != nil {
			t.Fatal(err)
		}
		taken++
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

// TestReplacedBucketThroughLeafd: the alloc bucket is deleted and made
// again (`nats kv rm leaf_alloc; nats kv add leaf_alloc`) under the built
// leafd, which then restarts on the same data directory. It never hands out
// an id twice: it refuses to auto-create on the new bucket, before and
// after its restart, and refuses a tag restarted below the ids it issued.
func TestReplacedBucketThroughLeafd(t *testing.T) {
	bin := testenv.Build(t, "cmd/leafd")
	addr, data := freeAddr(t), filepath.Join(t.TempDir(), "data")
	url := "nats://" + addr
	stop := runLeafd(t, bin, addr, data)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nc := natstest.Connect(t, url)
	k := &idTaker{t: t, nc: nc, seen: map[int64]bool{}}
	for range 10 {
		if err := k.take(ctx, "orders"); err != nil {
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
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, "leaf_alloc"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leaf_alloc", History: uint8(st.History()), Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	// Buffers drain (ids never handed out), then the node refuses.
	var refused error
	for range 20_000 {
		if refused = k.take(ctx, "orders"); refused != nil {
			break
		}
	}
	if refused == nil {
		t.Fatal("leafd kept serving from the replaced bucket")
	}
	// The first refusal may come from the load (the tag is gone); the
	// lookup after it refuses to auto-create.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(refused.Error(), "store was replaced") {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal says the store was replaced; last: %v", refused)
		}
		time.Sleep(50 * time.Millisecond)
		if refused = k.take(ctx, "orders"); refused == nil {
			t.Fatal("a request after the refusal got ids")
		}
	}

	// The node restarts on its data directory: it still refuses.
	nc.Close()
	stop()
	runLeafd(t, bin, addr, data)
	nc = natstest.Connect(t, url)
	k.nc = nc
	for _, tag := range []string{"orders", "fresh"} {
		err := k.take(ctx, tag)
		if err == nil || !strings.Contains(err.Error(), "store was replaced") {
			t.Fatalf("%s after the restart = %v, want a refusal saying the store was replaced", tag, err)
		}
	}

	// Restarted below what the node issued: the new bucket cannot tell, the
	// live node's floor can, and the restart itself is refused, naming it.
	if code, _, errOut := leafctl(url, "tag", "restart", "orders", "--floor", "1"); code == 0 ||
		!strings.Contains(errOut, "below the ids already issued") {
		t.Fatalf("tag restart --floor 1 on the new bucket = %d, %s; want refused below the node's floor", code, errOut)
	}
	if err := k.take(ctx, "orders"); err == nil {
		t.Fatal("ids served after a refused restart")
	}
	// Above the floor: served.
	floor := strconv.FormatInt(k.high()+100_000_000, 10)
	if code, _, errOut := leafctl(url, "tag", "restart", "orders", "--floor", floor); code != 0 {
		t.Fatalf("tag restart --floor %s = %d, %s", floor, code, errOut)
	}
	deadline = time.Now().Add(30 * time.Second)
	for k.take(ctx, "orders") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the tag restarted above the floor is not served")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
