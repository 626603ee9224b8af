package node_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/wire"
)

// httpGet answers GET path on n's HTTP port.
func httpGet(t *testing.T, n *node.Node, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric is the value of series (name and labels, as /metrics writes
// them) on n's /metrics, and whether it is there.
func metric(t *testing.T, n *node.Node, series string) (float64, bool) {
	t.Helper()
	_, body := httpGet(t, n, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}

// subjectOf is subject's status in st.
func subjectOf(st wire.NodeStatus, subject string) (wire.SubjectStatus, bool) {
	for _, s := range st.Subjects {
		if s.Subject == subject {
			return s, true
		}
	}
	return wire.SubjectStatus{}, false
}

// TestRefusedTagKeepsNodeReady: a node that rightly refuses one tag (an
// opaque tag whose key it lacks) answers it 503 and stays ready for every
// other tag: /readyz, /readyz/segment and leaf.admin.status say ready, the
// status and leafmq_segment_tag_refused name the refused tag.
func TestRefusedTagKeepsNodeReady(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := startNode(t, config.Config{Name: "keyed", NATS: config.NATSConfig{Listen: "127.0.0.1:-1"}, DataDir: dir, Store: config.StoreConfig{OpaqueKey: testOpaqueKey}})
	nc := natstest.Connect(t, n.ClientURL())
	admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Step: 100, Mode: "opaque"})
	if _, err := takeReady(nc, "orders", 3, false); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if err := n.Close(t.Context()); err != nil {
		t.Fatal(err)
	}

	n = startNode(t, config.Config{Name: "unkeyed", NATS: config.NATSConfig{Listen: "127.0.0.1:-1"}, DataDir: dir})
	nc = natstest.Connect(t, n.ClientURL())
	for range 3 {
		if ids, err := take(nc, "orders", 1, false); !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "key") {
			t.Fatalf("ids %v, %v; want a 503 about the key", ids, err)
		}
	}
	if _, err := takeReady(nc, "plain", 5, false); err != nil {
		t.Fatal(err)
	}
	if err := n.Ready(); err != nil {
		t.Errorf("Ready = %v, want ready: one refused tag leaves every other tag served", err)
	}
	for _, path := range []string{"/readyz", "/readyz/segment"} {
		if code, body := httpGet(t, n, path); code != 200 {
			t.Errorf("GET %s = %d %s, want 200", path, code, body)
		}
	}
	if code, body := httpGet(t, n, "/readyz/nonsense"); code != 404 {
		t.Errorf("GET /readyz/nonsense = %d %s, want 404", code, body)
	}
	sts, err := ask.Status(context.Background(), nc, "", 500*time.Millisecond)
	if err != nil || len(sts) != 1 {
		t.Fatalf("status %+v, %v", sts, err)
	}
	st := sts[0]
	if seg, ok := subjectOf(st, wire.SubjectSegment); !st.Ready || !ok || !seg.Serving || !seg.Ready {
		t.Errorf("status: ready %v, segment %+v; want both ready", st.Ready, seg)
	}
	refused := ""
	for _, tag := range st.Tags {
		if tag.Tag == "orders" {
			refused = tag.Refused
		}
	}
	if !strings.Contains(refused, "key") {
		t.Errorf("status of tag orders: refused %q, want the missing key named", refused)
	}
	if v, ok := metric(t, n, `leafmq_segment_tag_refused{tag="orders"}`); !ok || v != 1 {
		t.Errorf("leafmq_segment_tag_refused{tag=\"orders\"} = %v (there: %v), want 1", v, ok)
	}
	if v, ok := metric(t, n, `leafmq_subject_ready{subject="segment"}`); !ok || v != 1 {
		t.Errorf("leafmq_subject_ready{subject=\"segment\"} = %v (there: %v), want 1", v, ok)
	}
}

// TestSelfProbeCatchesSilentSubject: each node probes the subjects it
// serves through NATS and counts the probes its own subscriptions answer.
// A node whose segment subscriptions are gone while it still says it
// serves segment ids shows it: leafmq_subject_serving stays 1 while
// leafmq_probes_answered_total stands still (what the
// LeafmqSubjectNotAnswering alert reads) and its own probes fail.
func TestSelfProbeCatchesSilentSubject(t *testing.T) {
	defer node.SetProbeEvery(20 * time.Millisecond)()
	s := natstest.RunServer(t)
	n := startNode(t, config.Config{Name: "probed", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 3}})
	waitServing(t, n)
	answered := func(subject string) float64 {
		t.Helper()
		v, _ := metric(t, n, `leafmq_probes_answered_total{subject="`+subject+`"}`)
		return v
	}
	deadline := time.Now().Add(10 * time.Second)
	for answered(wire.SubjectSegment) < 3 || answered(wire.SubjectSnowflake) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("probes answered: segment %v, snowflake %v; want them counted", answered(wire.SubjectSegment), answered(wire.SubjectSnowflake))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, sub := range []string{wire.SubjectSegment, wire.SubjectSnowflake} {
		if code, body := httpGet(t, n, "/readyz/"+sub); code != 200 {
			t.Errorf("/readyz/%s = %d %s", sub, code, body)
		}
		if v, ok := metric(t, n, `leafmq_subject_serving{subject="`+sub+`"}`); !ok || v != 1 {
			t.Errorf("leafmq_subject_serving{subject=%q} = %v (there: %v), want 1", sub, v, ok)
		}
	}

	if err := n.StopSegmentService(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // probes under way land
	before := answered(wire.SubjectSegment)
	failedBefore, _ := metric(t, n, `leafmq_probe_requests_total{result="failed",subject="segment"}`)
	time.Sleep(500 * time.Millisecond) // 25 probe intervals
	if v, _ := metric(t, n, `leafmq_subject_serving{subject="segment"}`); v != 1 {
		t.Fatalf("leafmq_subject_serving{subject=\"segment\"} = %v: the node no longer says it serves segment", v)
	}
	if got := answered(wire.SubjectSegment); got != before {
		t.Errorf("segment probes answered grew from %v to %v with no segment subscription", before, got)
	}
	if failed, _ := metric(t, n, `leafmq_probe_requests_total{result="failed",subject="segment"}`); failed <= failedBefore {
		t.Errorf("failed segment probes %v, before %v: want the node's own probes to fail", failed, failedBefore)
	}
	if answered(wire.SubjectSnowflake) <= 3 {
		t.Error("snowflake probes stopped too")
	}
}

// A node that takes a monotonic tag's lease over waits until the lease of
// the leader before it has surely run out, answering 503 meanwhile:
// /readyz/mono must not say ready while every request of its only tag gets
// a 503. The lease is deleted by hand, so the holder loses it and takes it
// again with that wait.
func TestMonoTakeoverWaitNotReady(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	n := startNode(t, config.Config{Name: "mt", NATS: config.NATSConfig{URL: s.ClientURL()}})
	nc := natstest.Connect(t, s.ClientURL())
	admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "mt", Step: 50, Mode: "mono"})
	testenv.Eventually(t, "mt served", 30*time.Second, func() bool {
		code, _ := httpGet(t, n, "/readyz/mono")
		return code == 200 && askOnce(nc, wire.MonoPrefix+"mt") == nil
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), "leaf_mono")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(context.Background(), "mt"); err != nil {
		t.Fatal(err)
	}
	refused, lied := 0, 0
	for deadline := time.Now().Add(25 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		// Readiness on both sides of the request: the node may lose the
		// lease between a /readyz that was true and the request.
		before, _ := httpGet(t, n, "/readyz/mono")
		err := askOnce(nc, wire.MonoPrefix+"mt")
		if errors.Is(err, wire.ErrUnavailable) {
			refused++
			if after, _ := httpGet(t, n, "/readyz/mono"); before == 200 && after == 200 {
				lied++
			}
		}
		if err == nil && refused > 0 {
			break // served again after the wait
		}
	}
	if refused == 0 {
		t.Fatal("no 503 after the lease was deleted: the takeover wait was not seen")
	}
	if lied > 0 {
		t.Errorf("/readyz/mono said 200 at %d of the %d requests refused with 503 during the takeover wait", lied, refused)
	}
}
