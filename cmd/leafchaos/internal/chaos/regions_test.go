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

// TestRegionNATSConf: nats-server takes a region's server's configuration:
// a member of the cluster named after the region, routed to every server
// of it, with JetStream, advertising the dead gateway address and an
// outbound gateway to each other region through the URLs given (the
// proxies, one per server there), advertising no client URL.
func TestRegionNATSConf(t *testing.T) {
	dir := t.TempDir()
	conf := regionNATSConf("r0", "r0-1", natsPorts{4001, 4002, 4003, 4004, 4005}, []int{4103, 4003, 4203}, filepath.Join(dir, "js"),
		map[string][]string{"r2": {"nats://127.0.0.1:5002", "nats://127.0.0.1:5012"}, "r1": {"nats://127.0.0.1:5001"}})
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, conf)
	}
	if o.ServerName != "r0-1" || o.Port != 4001 || o.HTTPPort != 4002 || !o.JetStream {
		t.Errorf("server %q port %d http %d jetstream %v", o.ServerName, o.Port, o.HTTPPort, o.JetStream)
	}
	if o.Cluster.Name != "r0" || o.Cluster.Port != 4003 || len(o.Routes) != 3 || o.Routes[0].Host != "127.0.0.1:4103" || !o.Cluster.NoAdvertise {
		t.Errorf("cluster %q port %d routes %v", o.Cluster.Name, o.Cluster.Port, o.Routes)
	}
	g := o.Gateway
	if g.Username != gwUser("r0") || g.Password != gwPass("r0") {
		t.Errorf("gateway authorization %q %q, want r0's own", g.Username, g.Password)
	}
	if g.Name != "r0" || g.Port != 4004 || g.Advertise != "127.0.0.1:4005" || len(g.Gateways) != 2 {
		t.Fatalf("gateway %q port %d advertise %q remotes %d", g.Name, g.Port, g.Advertise, len(g.Gateways))
	}
	for i, want := range []string{"r1", "r2"} {
		r := g.Gateways[i]
		if r.Name != want || len(r.URLs) != i+1 || r.URLs[0].Host != "127.0.0.1:500"+want[1:] {
			t.Errorf("remote %d: %q %v, want %s through its proxies", i, r.Name, r.URLs, want)
		}
		for _, u := range r.URLs {
			if p, _ := u.User.Password(); u.User.Username() != gwUser(want) || p != gwPass(want) {
				t.Errorf("remote %s: URL %v without %s's credentials", want, u, want)
			}
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
	if c.Rate != 600 || c.Connections != 2 || c.MaxBatch != 50 || c.LeafdsPerRegion != 1 || c.ServersPerRegion != 1 ||
		c.GatewayLatency != 30*time.Millisecond || c.RegionFor != 8*time.Second || len(c.Faults) != len(RegionFaults) {
		t.Errorf("defaults: %+v", c)
	}
	bad := []Config{
		{Regions: 1},
		{Regions: 4},
		{Regions: 2, Faults: []string{FaultKillLeafd}},
		{Regions: 2, LeafdsPerRegion: 3},
		{Regions: 2, ServersPerRegion: 2},
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

// recsEvery is a request every 10 ms in [from, to) (seconds), each
// answered by region by within lat, or failed when by < 0.
func recsEvery(from, to float64, by int8, lat time.Duration) []reqRec {
	var out []reqRec
	for at := int64(from * 1e9); at < int64(to*1e9); at += int64(10 * time.Millisecond) {
		out = append(out, reqRec{at: at, lat: int64(lat), ok: by >= 0, by: by})
	}
	return out
}

// TestRegionRecovery: full service returns at the first 100 ms from
// which 99.9% get ids within 1 s for 5 s; answers after 1 s do not count;
// a stretch that never gets there has none.
func TestRegionRecovery(t *testing.T) {
	ms := time.Millisecond
	recs := append(recsEvery(0, 2.5, -1, 2000*ms), recsEvery(2.5, 3.2, 0, 1500*ms)...) // failing, then slow
	recs = append(recs, recsEvery(3.2, 12, 0, ms)...)
	got, ok := regionRecovery(recs, 0, int64(12*time.Second))
	if !ok || got != 3200*ms {
		t.Errorf("recovery %v %v, want 3.2s", got, ok)
	}
	// Measured from the heal, not from the load's start.
	if got, ok := regionRecovery(recs, int64(time.Second), int64(12*time.Second)); !ok || got != 2200*ms {
		t.Errorf("recovery from 1s: %v %v, want 2.2s", got, ok)
	}
	if _, ok := regionRecovery(recsEvery(0, 10, -1, 2000*ms), 0, int64(10*time.Second)); ok {
		t.Error("a stretch with no ids recovered")
	}
	// The rest of a short stretch counts if at least minJudged long.
	short := append(recsEvery(0, 1, -1, 2000*ms), recsEvery(1, 4, 0, ms)...)
	if got, ok := regionRecovery(short, 0, int64(4*time.Second)); !ok || got != time.Second {
		t.Errorf("short stretch: %v %v, want 1s", got, ok)
	}
	if _, ok := regionRecovery(short, 0, int64(2500*ms)); ok {
		t.Error("recovered with only 1.5s of ids after the failures (under minJudged)")
	}
}

// TestRegionAfter: after a heal each region is judged from the recovery
// goal on to the next fault: 99.9% within 1 s, or the goal is missed; a
// stretch under minJudged past the goal is not judged.
func TestRegionAfter(t *testing.T) {
	ms := time.Millisecond
	heal := int64(10 * time.Second)
	ok := append(recsEvery(10, 15, -1, 2000*ms), recsEvery(15, 40, 1, ms)...) // snowflake waiting 5 s after the heal
	a := regionAfter("r1", 1, ok, heal, int64(40*time.Second))
	if !a.Judged || !a.GoalMet || !a.Recovered || a.RecoveryS != 5 {
		t.Errorf("recovered in 5s: %+v", a)
	}
	if a.After.Sent != 3000 || a.After.OK != 2500 || a.AfterGoal.Sent != 1700 || a.AfterGoal.Fast != 1700 {
		t.Errorf("windows: after %+v, after goal %+v", a.After, a.AfterGoal)
	}
	late := append(recsEvery(10, 30, 1, ms), recsEvery(30, 31, -1, 2000*ms)...) // a second lost past the goal
	late = append(late, recsEvery(31, 40, 1, ms)...)
	if a := regionAfter("r1", 1, late, heal, int64(40*time.Second)); !a.Judged || a.GoalMet {
		t.Errorf("a second without ids 20s after the heal: %+v, want the goal missed", a)
	}
	if a := regionAfter("r1", 1, late, heal, heal+int64(regionRecoveryGoal+time.Second)); a.Judged || !a.GoalMet {
		t.Errorf("1s past the goal: %+v, want not judged", a)
	}
}

// TestRegionsFinishJudges: the run fails when a region's clients got
// under 90% of their requests answered in a phase of a kill (the killed
// region's are answered across a gateway), or under 99.9% within 1 s
// from the recovery goal after a heal to the next fault; it passes when
// each region met both.
func TestRegionsFinishJudges(t *testing.T) {
	ms := time.Millisecond
	s := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	run := func(r1 []reqRec) *RegionsReport {
		rr := &regionsRun{cfg: &Config{}, c: &cluster{}, spaces: map[string]*idSpace{},
			rs: []*region{{idx: 0, name: "r0"}, {idx: 1, name: "r1"}}}
		rr.recs = [][]reqRec{recsEvery(0, 60, 0, ms), r1}
		rep := &RegionsReport{Ended: rr.t0.Add(s(60)), Faults: []RegionFaultResult{
			{Fault: FaultRegionKill, Region: "r1", From: s(10), To: s(20), natsKilled: s(15)},
			{Fault: FaultRegionCut, Region: "r1", From: s(45), To: s(50)},
		}}
		rr.finish(rep, s(10))
		return rep
	}
	good := append(recsEvery(0, 10, 1, ms), recsEvery(10, 20, 0, 60*ms)...) // across the gateway
	good = append(good, recsEvery(20, 25, -1, 2000*ms)...)                  // its leafds starting again
	good = append(good, recsEvery(25, 60, 1, ms)...)
	if rep := run(good); !rep.Pass {
		t.Errorf("each region met its goals: %v", rep.Failures)
	} else if a := rep.Faults[0].After[1]; !a.Judged || !a.Recovered || a.RecoveryS != 5 {
		t.Errorf("r1 after the kill: %+v", a)
	}
	lost := append(recsEvery(0, 10, 1, ms), recsEvery(10, 15, -1, 2000*ms)...) // nothing across the gateway
	lost = append(lost, recsEvery(15, 60, 1, ms)...)
	if rep := run(lost); rep.Pass || !strings.Contains(strings.Join(rep.Failures, "\n"), "(leafds down): region r1 answered 0.0%") {
		t.Errorf("the killed region's clients unanswered with its leafds down: %v", rep.Failures)
	}
	slow := append(recsEvery(0, 40, 1, ms), recsEvery(40, 40.5, -1, 2000*ms)...) // lost 20 s after the heal
	slow = append(slow, recsEvery(40.5, 60, 1, ms)...)
	if rep := run(slow); rep.Pass || !strings.Contains(strings.Join(rep.Failures, "\n"), "availability: region-kill on r1 at 10s: region r1") {
		t.Errorf("r1 lost half a second 20 s after the kill's heal: %v", rep.Failures)
	}
}
