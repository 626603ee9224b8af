package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.yaml.in/yaml/v3"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

func promtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(testenv.Promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestPrometheusFiles runs promtool over prometheus.yml (which loads
// alerts.yml), alerts.yml, and the alerts' unit tests in alerts_test.yml.
func TestPrometheusFiles(t *testing.T) {
	for _, file := range []string{"prometheus/alerts.yml", "prometheus/prometheus.yml"} {
		if bad := unknownMetrics(string(repoFile(t, file))); len(bad) > 0 {
			t.Errorf("%s names metrics leafd does not export: %v", file, bad)
		}
	}
	promtool(t, "check", "config", "prometheus/prometheus.yml")
	promtool(t, "check", "rules", "prometheus/alerts.yml")
	promtool(t, "test", "rules", "prometheus/alerts_test.yml")
}

// TestPrometheusEndToEnd runs a real Prometheus on deploy/prometheus's own
// config and rules (moved to a free port, a 1 s scrape interval and a leafd
// target) against a real leafd, takes ids over NATS, and reads the counts
// back through Prometheus' query API. Then every alert rule and every
// dashboard query must evaluate without error on the live data.
func TestPrometheusEndToEnd(t *testing.T) {
	bin := testenv.Prometheus(t)
	if testing.Short() {
		t.Skip("starts Prometheus")
	}
	const name = "prom-e2e"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := node.Start(ctx, config.Config{
		Name:    name,
		NATS:    config.NATSConfig{Listen: "127.0.0.1:-1"},
		HTTP:    config.HTTPConfig{Addr: "127.0.0.1:0"},
		DataDir: t.TempDir(),
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })

	prom := startPrometheus(t, bin, n.HTTPAddr())

	nc, err := nats.Connect(n.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const segReqs, sfReqs = 7, 5
	for range segReqs {
		if _, err := request(nc, wire.SegmentPrefix+"demo", nil); err != nil {
			t.Fatal(err)
		}
	}
	var worker int64 = -1
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		data, err := request(nc, "leaf.snowflake", nil)
		if err == nil {
			id, _ := strconv.ParseInt(string(data), 10, 64)
			worker = snowflake.LeafLayout().Decompose(id).Worker
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaf.snowflake: %v", err)
		}
	}
	for range sfReqs - 1 {
		if _, err := request(nc, "leaf.snowflake", nil); err != nil {
			t.Fatal(err)
		}
	}

	sel := `job="leafd"`
	// Id requests: leafmq_requests_total counts the node's self-probes too.
	prom.waitValue(t, fmt.Sprintf(`sum(leafmq_id_requests_total{%s,engine="segment"})`, sel), segReqs)
	prom.waitValue(t, fmt.Sprintf(`sum(leafmq_ids_issued_total{%s,engine="snowflake"})`, sel), sfReqs)
	prom.waitValue(t, fmt.Sprintf(`leafmq_snowflake_worker{%s}`, sel), float64(worker))
	prom.waitValue(t, fmt.Sprintf(`leafmq_snowflake_state{%s,state="serving"}`, sel), 1)
	// One node holds one of the 1024 worker ids of its KV bucket.
	prom.waitValue(t, fmt.Sprintf(`leafmq_snowflake_worker_ids_free{%s}`, sel), 1023)
	prom.waitValue(t, fmt.Sprintf(`sum(leafmq_request_duration_seconds_count{%s})`, sel), segReqs+sfReqs)

	t.Run("alert rules", func(t *testing.T) {
		// Rules run every second on this config: wait until each has run.
		deadline := time.Now().Add(20 * time.Second)
		for {
			var rules struct {
				Groups []struct {
					Rules []struct {
						Name, Health, State string
						LastError           string `json:"lastError"`
					}
				}
			}
			prom.get(t, "/api/v1/rules", nil, &rules)
			var total, ok int
			var firing []string
			for _, g := range rules.Groups {
				for _, r := range g.Rules {
					total++
					switch r.Health {
					case "ok":
						ok++
					case "err":
						t.Fatalf("rule %s: %s", r.Name, r.LastError)
					}
					if r.State != "inactive" {
						firing = append(firing, r.Name+" "+r.State)
					}
				}
			}
			if total == 0 {
				t.Fatal("Prometheus loaded no rules from alerts.yml")
			}
			if ok == total {
				if len(firing) > 0 {
					t.Fatalf("alerts on a healthy node: %v", firing)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d rules evaluated ok within 20s", ok, total)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("dashboard queries", func(t *testing.T) {
		vars := strings.NewReplacer("$instance", ".*", "$tag", ".*", "$__rate_interval", "1m", "$__range", "1h")
		for _, p := range dashboardPanels(loadDashboard(t)) {
			for _, tg := range p.Targets {
				var res struct{ ResultType string }
				prom.get(t, "/api/v1/query", url.Values{"query": {vars.Replace(tg.Expr)}}, &res)
			}
		}
	})
}

type prometheus struct{ base string }

// startPrometheus runs bin on a copy of deploy/prometheus/prometheus.yml
// that scrapes target every second, and waits until the target is up.
func startPrometheus(t *testing.T, bin, target string) prometheus {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(repoFile(t, "prometheus/prometheus.yml"), &cfg); err != nil {
		t.Fatal(err)
	}
	alerts, err := filepath.Abs("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	global := cfg["global"].(map[string]any)
	global["scrape_interval"], global["scrape_timeout"], global["evaluation_interval"] = "1s", "1s", "1s"
	cfg["rule_files"] = []string{alerts}
	jobs := cfg["scrape_configs"].([]any)
	for _, j := range jobs {
		job := j.(map[string]any)
		var targets []string
		switch job["job_name"] {
		case "leafd":
			targets = []string{target}
		case "prometheus":
			targets = []string{addr}
		default:
			t.Fatalf("unexpected job %v in prometheus.yml", job["job_name"])
		}
		job["static_configs"] = []map[string]any{{"targets": targets}}
	}
	dir := t.TempDir()
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+file, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", log)
		}
	})
	p := prometheus{base: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var targets struct {
			ActiveTargets []struct {
				Labels    map[string]string
				Health    string
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		}
		err := p.try("/api/v1/targets", nil, &targets)
		for _, at := range targets.ActiveTargets {
			if at.Labels["job"] == "leafd" && at.Health == "up" {
				return p
			}
			err = fmt.Errorf("target %v: %s %s", at.Labels, at.Health, at.LastError)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus did not scrape leafd at %s within 30s: %v", target, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// try GETs an API path and decodes its data into v.
func (p prometheus) try(path string, q url.Values, v any) error {
	u := p.base + path
	if q != nil {
		u += "?" + q.Encode()
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string
		Error  string
		Data   json.RawMessage
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%s: %s: %v", path, body, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s %v: %s", path, q, r.Error)
	}
	return json.Unmarshal(r.Data, v)
}

func (p prometheus) get(t *testing.T, path string, q url.Values, v any) {
	t.Helper()
	if err := p.try(path, q, v); err != nil {
		t.Fatal(err)
	}
}

// waitValue polls an instant query until it returns exactly one sample equal
// to want (scrapes run every second).
func (p prometheus) waitValue(t *testing.T, query string, want float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for {
		var res struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
		p.get(t, "/api/v1/query", url.Values{"query": {query}}, &res)
		if len(res.Result) == 1 {
			s, _ := res.Result[0].Value[1].(string)
			if v, err := strconv.ParseFloat(s, 64); err == nil && v == want {
				return
			}
		}
		last = fmt.Sprint(res.Result)
		if time.Now().After(deadline) {
			t.Fatalf("%s = %s, want %v", query, last, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
