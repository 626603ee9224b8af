package chaos

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestRegionNATSConf: nats-server takes a region's configuration as a
// one-server cluster named after the region, with JetStream, advertising
// the dead gateway address and an outbound gateway to each other region
// through the URL given (the proxy), advertising no client URL.
func TestRegionNATSConf(t *testing.T) {
	dir := t.TempDir()
	conf := regionNATSConf("r0", 4001, 4002, 4003, 4004, 4005, filepath.Join(dir, "js"),
		map[string]string{"r2": "nats://127.0.0.1:5002", "r1": "nats://127.0.0.1:5001"})
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, conf)
	}
	if o.ServerName != "r0" || o.Port != 4001 || o.HTTPPort != 4002 || !o.JetStream {
		t.Errorf("server %q port %d http %d jetstream %v", o.ServerName, o.Port, o.HTTPPort, o.JetStream)
	}
	if o.Cluster.Name != "r0" || o.Cluster.Port != 4003 || len(o.Routes) != 1 || o.Routes[0].Host != "127.0.0.1:4003" || !o.Cluster.NoAdvertise {
		t.Errorf("cluster %q port %d routes %v", o.Cluster.Name, o.Cluster.Port, o.Routes)
	}
	g := o.Gateway
	if g.Name != "r0" || g.Port != 4004 || g.Advertise != "127.0.0.1:4005" || len(g.Gateways) != 2 {
		t.Fatalf("gateway %q port %d advertise %q remotes %d", g.Name, g.Port, g.Advertise, len(g.Gateways))
	}
	for i, want := range []string{"r1", "r2"} {
		r := g.Gateways[i]
		if r.Name != want || len(r.URLs) != 1 || r.URLs[0].Host != "127.0.0.1:500"+want[1:] {
			t.Errorf("remote %d: %q %v, want %s through its proxy", i, r.Name, r.URLs, want)
		}
	}
	if o.PingInterval != 2*time.Second || o.MaxPingsOut != 3 {
		t.Errorf("ping %v × %d", o.PingInterval, o.MaxPingsOut)
	}
}

func TestValidateRegions(t *testing.T) {
	repo := t.TempDir()
	c := Config{Regions: 2, Repo: repo}
	if err := c.validateRegions(); err != nil {
		t.Fatal(err)
	}
	if c.Rate != 600 || c.Connections != 2 || c.MaxBatch != 50 || c.LeafdsPerRegion != 1 ||
		c.GatewayLatency != 30*time.Millisecond || c.RegionFor != 8*time.Second || len(c.Faults) != len(RegionFaults) {
		t.Errorf("defaults: %+v", c)
	}
	bad := []Config{
		{Regions: 1},
		{Regions: 4},
		{Regions: 2, Faults: []string{FaultKillLeafd}},
		{Regions: 2, LeafdsPerRegion: 3},
		{Regions: 2, RegionFor: time.Millisecond},
		{Regions: 2, GatewayLatency: -time.Millisecond},
	}
	for _, b := range bad {
		b.Repo = repo
		if err := b.validateRegions(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", b, err)
		}
	}
	single := Config{Regions: 2, Repo: repo}
	if err := single.validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("Run with Regions: %v, want ErrConfig", err)
	}
}

// TestRegionWindow: a window counts the requests sent in it, the answers,
// those with an id of the client's own region (whose latency the
// quantiles are of) and the median of the others.
func TestRegionWindow(t *testing.T) {
	ms := int64(time.Millisecond)
	recs := []reqRec{
		{at: 0, lat: 9 * ms, ok: true, by: 0}, // before the window
		{at: 10, lat: 1 * ms, ok: true, by: 1},
		{at: 11, lat: 3 * ms, ok: true, by: 1},
		{at: 12, lat: 2 * ms, ok: true, by: 1},
		{at: 13, lat: 60 * ms, ok: true, by: 0}, // from region 0
		{at: 14, lat: 2000 * ms, by: -1},        // timed out
		{at: 20, lat: 9 * ms, ok: true, by: 1},  // after it
	}
	w := window("r1", 1, recs, 10, 20)
	if w.Sent != 5 || w.OK != 4 || w.InRegion != 3 {
		t.Errorf("sent %d ok %d in-region %d, want 5 4 3", w.Sent, w.OK, w.InRegion)
	}
	if w.P50 != 2*time.Millisecond || w.P99 != 3*time.Millisecond || w.CrossP50 != 60*time.Millisecond {
		t.Errorf("p50 %v p99 %v cross %v, want 2ms 3ms 60ms", w.P50, w.P99, w.CrossP50)
	}
	if got := w.Answered(); got != 0.8 {
		t.Errorf("answered %v, want 0.8", got)
	}
	if q := quantile(nil, 0.5); q != 0 {
		t.Errorf("quantile of none = %d", q)
	}
}

// TestCheckSoFar: duplicates found mid-run, with check still right at
// the end.
func TestCheckSoFar(t *testing.T) {
	s := newIDSpace(0, 1)
	s.add(1, []int64{1, 3, 5})
	s.add(2, []int64{2, 4})
	if d := s.checkSoFar(); d.Duplicates != 0 || d.IDs != 5 {
		t.Fatalf("so far: %+v", d)
	}
	s.add(3, []int64{5, 7})
	if d := s.checkSoFar(); d.Duplicates != 1 {
		t.Fatalf("so far: %+v, want 1 duplicate", d)
	}
	s.add(4, []int64{3})
	if d := s.check(nil); d.Duplicates != 2 || d.IDs != 8 {
		t.Errorf("at the end: %+v, want 2 duplicates of 8", d)
	}
}

// TestRegionsReportText: the text names each fault with its phases and
// says whether the run passed.
func TestRegionsReportText(t *testing.T) {
	w := func(name string) RegionWindow {
		return RegionWindow{Region: name, Sent: 100, OK: 99, InRegion: 99, P50: 2 * time.Millisecond}
	}
	r := &RegionsReport{Regions: 2, LeafdsPerRegion: 1, GatewayLatency: 30 * time.Millisecond,
		Calm: []RegionWindow{w("r0"), w("r1")},
		RTT:  []RegionRTT{{From: "r0", To: "r1", Probe: 20, OK: 20, P50: 61 * time.Millisecond}},
		Faults: []RegionFaultResult{{Fault: FaultRegionKill, Region: "r1", During: []RegionWindow{w("r0"), w("r1")},
			Phases: []RegionPhase{{Name: "leafds down", During: []RegionWindow{w("r0")}}, {Name: "leafds and NATS down"}}}},
		Spaces: map[string]dupResult{"snowflake": {IDs: 10}}, IDs: 10, Pass: true}
	var b strings.Builder
	r.WriteText(&b)
	for _, want := range []string{"2 regions", "r0 → r1  20/20  p50   61.0 ms", "region-kill on r1", " leafds and NATS down:", "answered  99.00%", "PASS"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}
