package deploy_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type grafanaTarget struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource map[string]any `json:"datasource"`
}

type grafanaPanel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource map[string]any           `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Targets    []grafanaTarget          `json:"targets"`
	Panels     []grafanaPanel           `json:"panels"` // of a collapsed row
}

type grafanaDashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	var d grafanaDashboard
	dec := json.NewDecoder(strings.NewReader(string(repoFile(t, "grafana/leafmq.json"))))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("grafana/leafmq.json: %v", err)
	}
	return d
}

// dashboardPanels returns every panel that is not a row, rows' own included.
func dashboardPanels(d grafanaDashboard) []grafanaPanel {
	var out []grafanaPanel
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

func TestGrafanaDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 || d.SchemaVersion > 41 {
		t.Errorf("uid %q title %q schemaVersion %d: want a uid, a title and schemaVersion ~39", d.UID, d.Title, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" {
		t.Fatalf("no datasource variable: %v", vars)
	}
	ids := map[int]string{}
	used := map[string]bool{}
	panels := dashboardPanels(d)
	if len(panels) < 15 {
		t.Fatalf("%d panels", len(panels))
	}
	for _, p := range panels {
		if prev, ok := ids[p.ID]; ok || p.ID == 0 {
			t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.Datasource["uid"] != "${datasource}" {
			t.Errorf("panel %q: datasource %v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v", p.Title, g)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			ms := metricsIn(tg.Expr)
			if len(ms) == 0 {
				t.Errorf("panel %q query %s: %q names no leafmq_ metric", p.Title, tg.RefID, tg.Expr)
			}
			if bad := unknownMetrics(tg.Expr); len(bad) > 0 {
				t.Errorf("panel %q query %s: leafd exports no %v", p.Title, tg.RefID, bad)
			}
			if tg.Datasource["uid"] != "${datasource}" {
				t.Errorf("panel %q query %s: datasource %v", p.Title, tg.RefID, tg.Datasource)
			}
			for _, m := range ms {
				used[m] = true
			}
		}
	}
	// What the dashboard is for: each of these is on it.
	for _, m := range []string{"ids_issued_total", "requests_total", "request_duration_seconds",
		"request_errors_total", "id_requests_total", "ring_fill_ratio", "segment_ids_issued_total", "segment_step", "segment_loads_total",
		"segment_load_seconds", "segment_store_errors_total", "snowflake_state", "snowflake_worker",
		"snowflake_lease_until_timestamp_seconds", "snowflake_peer_clock_offset_seconds",
		"snowflake_layout_remaining_seconds", "events_published_total"} {
		if !used[m] {
			t.Errorf("no panel shows leafmq_%s", m)
		}
	}
}

// The provisioning files parse and load the dashboard from where
// docker-compose.yml mounts it, with the data source compose runs.
func TestGrafanaProvisioning(t *testing.T) {
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name, Type, URL string
			IsDefault       bool `yaml:"isDefault"`
		}
	}
	if err := yaml.Unmarshal(repoFile(t, "grafana/provisioning/datasources/prometheus.yml"), &ds); err != nil {
		t.Fatal(err)
	}
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" ||
		ds.Datasources[0].URL != "http://prometheus:9090" || !ds.Datasources[0].IsDefault {
		t.Errorf("datasources: %+v", ds)
	}
	var prov struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Type    string
			Options map[string]any
		}
	}
	if err := yaml.Unmarshal(repoFile(t, "grafana/provisioning/dashboards/leafmq.yml"), &prov); err != nil {
		t.Fatal(err)
	}
	if len(prov.Providers) != 1 || prov.Providers[0].Type != "file" {
		t.Fatalf("providers: %+v", prov)
	}
	dir, _ := prov.Providers[0].Options["path"].(string)
	grafana := composeService(t, "grafana")
	if !slices.Contains(grafana.Volumes, "./grafana/leafmq.json:"+dir+"/leafmq.json:ro") ||
		!slices.Contains(grafana.Volumes, "./grafana/provisioning:/etc/grafana/provisioning:ro") {
		t.Errorf("compose grafana volumes %v do not put the dashboard in %s", grafana.Volumes, dir)
	}
}
