package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/freeport"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/wire"
)

// leafd started beside a NATS cluster whose JetStream has no meta leader yet
// (one of three servers up, as when a fresh cluster and its first leafd
// start together) waits with backoff instead of exiting: /healthz answers,
// /readyz says why it is not ready, and it serves as soon as the cluster
// has a quorum; it does not exit on "listing tags: … no answer".
func TestStartWaitsForJetStream(t *testing.T) {
	t.Parallel()
	c := natstest.NewCluster(t, 3)
	c.Start(0)
	bin := testenv.Build(t, "cmd/leafd")
	addr := freeAddr(t)
	type started struct {
		p   *leafdProc
		err error
	}
	done := make(chan started, 1)
	go func() {
		p, err := tryLeafd(t, bin, nil, "--name", "early", "--nats", c.URL(0), "--http", addr,
			"--data", t.TempDir(), "--kv-replicas", "3")
		done <- started{p, err}
	}()

	// While there is no quorum: alive, not ready, and saying why.
	var why string
	testenv.Eventually(t, "/readyz of a leafd waiting for JetStream", 30*time.Second, func() bool {
		select {
		case s := <-done:
			t.Fatalf("leafd did not wait for JetStream: %v", s.err)
		default:
		}
		code, body := get(t, "http://"+addr+"/readyz")
		why = body
		return code == http.StatusServiceUnavailable && strings.Contains(body, "starting")
	})
	if code, _ := get(t, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d while starting, want 200 (the process is alive)", code)
	}
	t.Logf("/readyz while waiting: %s", why)
	time.Sleep(2 * time.Second) // more than the store's 3 s answer window since start
	select {
	case s := <-done:
		t.Fatalf("leafd gave up on JetStream: %v", s.err)
	default:
	}

	c.Start(1)
	c.Start(2)
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	testenv.Eventually(t, "/readyz of a started leafd", 30*time.Second, func() bool {
		code, _ := get(t, "http://"+addr+"/readyz")
		return code == http.StatusOK
	})
	nc := natstest.Connect(t, c.URL(1))
	if _, err := takeReady(nc, "late", 10, true); err != nil {
		t.Fatal(err)
	}
	// And it is a member: its first write of its key in leaf_nodes failed
	// (no meta leader), and a node that gave up then would stay no member
	// for good, its slow answers unheard by the others' checks.
	if !isMember(t, nc, "early") {
		t.Fatal("leafd started during the election serves but has no key in leaf_nodes")
	}
}

// isMember reports whether a live node named name has its key in
// wire.MembersBucket.
func isMember(t *testing.T, nc *nats.Conn, name string) bool {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, wire.MembersBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var rec wire.Member
		if json.Unmarshal(e.Value(), &rec) == nil && rec.Node == name {
			return true
		}
	}
	return false
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// get returns the status and body of url, or 0 when nothing answers.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// leafd started before its NATS server answers stays alive (/healthz 200,
// /readyz 503 naming the wait) and serves once NATS is up; "no servers
// available for connection" is a wait, not an exit.
func TestStartWaitsForNATS(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "cmd/leafd")
	natsAddr, httpAddr := freeAddr(t), freeAddr(t)
	type started struct {
		p   *leafdProc
		err error
	}
	done := make(chan started, 1)
	go func() {
		p, err := tryLeafd(t, bin, nil, "--name", "patient", "--nats", "nats://"+natsAddr, "--http", httpAddr, "--data", t.TempDir())
		done <- started{p, err}
	}()
	testenv.Eventually(t, "/readyz of a leafd waiting for NATS", 30*time.Second, func() bool {
		select {
		case s := <-done:
			t.Fatalf("leafd did not wait for NATS: %v", s.err)
		default:
		}
		code, body := get(t, "http://"+httpAddr+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "connecting to NATS")
	})
	if code, _ := get(t, "http://"+httpAddr+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d while waiting for NATS, want 200", code)
	}
	_, port, _ := net.SplitHostPort(natsAddr)
	p, _ := strconv.Atoi(port)
	s := natstest.RunServer(t, func(o *server.Options) { o.Port = p })
	if st := <-done; st.err != nil {
		t.Fatal(st.err)
	}
	if _, err := takeReady(natstest.Connect(t, s.ClientURL()), "patient", 3, false); err != nil {
		t.Fatal(err)
	}
}
