package node_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// Leaf's HTTP API on a running node, called as Leaf's users do, hands out
// the same id spaces as NATS: no id twice across the two.
func TestLeafHTTPAPI(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	n := startNode(t, config.Config{Name: "http", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 5}})
	waitServing(t, n)
	nc := natstest.Connect(t, s.ClientURL())
	base := "http://" + n.HTTPAddr()
	get := func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	seen := map[int64]bool{}
	add := func(id int64) {
		if seen[id] {
			t.Fatalf("id %d handed out twice", id)
		}
		seen[id] = true
	}
	methods := []string{"GET", "POST", "PUT"}
	for i := range 300 {
		for _, path := range []string{"/api/segment/get/web", "/api/snowflake/get/anything"} {
			code, body := get(methods[i%3], path)
			id, err := strconv.ParseInt(body, 10, 64)
			if code != 200 || err != nil {
				t.Fatalf("%s %s = %d %q", methods[i%3], path, code, body)
			}
			add(id)
		}
		ids, err := takeReady(nc, "web", 3, i%2 == 0)
		if err != nil {
			t.Fatal(err)
		}
		sf, err := takeFrom(nc, wire.SnowflakeSubject, 3, i%2 == 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range append(ids, sf...) {
			add(id)
		}
	}
	sfID, err := snowflake.LeafLayout().Compose(mustEpoch(t, "2026-01-02"), 5, 9)
	if err != nil {
		t.Fatal(err)
	}
	code, body := get("GET", "/decodeSnowflakeId?snowflakeId="+strconv.FormatInt(sfID, 10))
	var dec map[string]string
	if code != 200 || json.Unmarshal([]byte(body), &dec) != nil || dec["workerId"] != "5" || dec["sequenceId"] != "9" ||
		!strings.HasPrefix(dec["timestamp"], "1767312000000(") {
		t.Fatalf("decode = %d %s", code, body)
	}
	if code, body := get("GET", "/api/segment/get/a.b"); code != 400 {
		t.Fatalf("bad key = %d %s", code, body)
	}
	if code, body := get("GET", "/readyz"); code != 200 {
		t.Fatalf("readyz = %d %s", code, body)
	}
	if code, body := get("GET", "/"); code != 200 || !strings.Contains(body, "<html") {
		t.Fatalf("status page = %d", code)
	}
	code, body = get("GET", "/status.json")
	if code != 200 || !strings.Contains(body, `"node":"http"`) || !strings.Contains(body, `"tag":"web"`) {
		t.Fatalf("status.json = %d %s", code, body)
	}
	if code, _ := get("GET", "/healthz"); code != 200 {
		t.Fatalf("healthz = %d", code)
	}
	if code, body := get("GET", "/metrics"); code != 200 || !strings.Contains(body, "leafmq_ids_issued_total") {
		t.Fatalf("metrics = %d", code)
	}
}

// Ids taken over Leaf's HTTP API count in the request metrics as ids taken
// over NATS do (ids issued, requests by code, latency), and the HTTP
// endpoints of requests_total tell the two transports apart.
func TestHTTPMetrics(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	n := startNode(t, config.Config{Name: "httpmetrics", NATS: config.NATSConfig{URL: s.ClientURL()}, Registry: config.RegistryConfig{Kind: config.RegistryStatic, WorkerID: 6}})
	waitServing(t, n)
	base := "http://" + n.HTTPAddr()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for range 3 {
		if code, body := get("/api/segment/get/web"); code != 200 {
			t.Fatalf("segment = %d %s", code, body)
		}
	}
	for range 2 {
		if code, body := get("/api/snowflake/get/x"); code != 200 {
			t.Fatalf("snowflake = %d %s", code, body)
		}
	}
	if code, body := get("/api/segment/get/a.b"); code != 400 {
		t.Fatalf("bad key = %d %s", code, body)
	}
	_, body := get("/metrics")
	for _, want := range []string{
		`leafmq_ids_issued_total{engine="segment"} 3`,
		`leafmq_ids_issued_total{engine="snowflake"} 2`,
		`leafmq_segment_ids_issued_total{tag="web"} 3`,
		`leafmq_id_requests_total{code="200",engine="segment"} 3`,
		`leafmq_id_requests_total{code="400",engine="segment"} 1`,
		`leafmq_id_requests_total{code="200",engine="snowflake"} 2`,
		`leafmq_request_duration_seconds_count{engine="segment"} 4`,
		`leafmq_request_duration_seconds_count{engine="snowflake"} 2`,
		`leafmq_requests_total{endpoint="http-segment"} 4`,
		`leafmq_request_errors_total{endpoint="http-segment"} 1`,
		`leafmq_requests_total{endpoint="http-snowflake"} 2`,
		`leafmq_request_errors_total{endpoint="http-snowflake"} 0`,
		`leafmq_requests_total{endpoint="segment"} 0`,
		`leafmq_requests_total{endpoint="snowflake"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
