package chaos

import (
	"errors"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestIDSpaceCheck(t *testing.T) {
	tests := []struct {
		name     string
		adds     [][]int64
		ids      int64
		runs     int
		dups     int64
		examples []int64
	}{
		{name: "empty"},
		{name: "one run", adds: [][]int64{{1, 2, 3}, {4, 5}}, ids: 5, runs: 1},
		{name: "interleaved nodes", adds: [][]int64{{1}, {1001}, {2}, {1002}, {3}}, ids: 5, runs: 5},
		{name: "single twice", adds: [][]int64{{7}, {9}, {7}}, ids: 3, runs: 3, dups: 1, examples: []int64{7}},
		{name: "batch overlaps batch", adds: [][]int64{{10, 11, 12, 13}, {12, 13, 14}}, ids: 7, runs: 2, dups: 2, examples: []int64{12, 13}},
		{name: "batch inside batch", adds: [][]int64{{10, 11, 12, 13, 14}, {11, 12}}, ids: 7, runs: 2, dups: 2, examples: []int64{11, 12}},
		{name: "three times", adds: [][]int64{{5}, {5}, {5}}, ids: 3, runs: 3, dups: 2, examples: []int64{5, 5}},
		{name: "duplicate within a reply", adds: [][]int64{{3, 3}}, ids: 2, runs: 2, dups: 1, examples: []int64{3}},
		{name: "negative and large", adds: [][]int64{{-1, 0}, {1 << 62}}, ids: 3, runs: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newIDSpace(0, int64(time.Second))
			for i, ids := range tt.adds {
				s.add(int64(i), ids)
			}
			r := s.check(nil)
			if r.IDs != tt.ids || r.Runs != tt.runs || r.Duplicates != tt.dups || !slices.Equal(r.Examples, tt.examples) {
				t.Errorf("check = ids %d runs %d dups %d examples %v; want %d %d %d %v",
					r.IDs, r.Runs, r.Duplicates, r.Examples, tt.ids, tt.runs, tt.dups, tt.examples)
			}
		})
	}
}

func TestIDSpaceTrend(t *testing.T) {
	s := newIDSpace(1000, 10)
	s.add(1000, []int64{5, 6})
	s.add(1005, []int64{1})
	s.add(1025, []int64{100})
	s.add(500, []int64{2}) // before the start: window 0
	want := []trendWindow{{IDs: 4, Min: 1, Max: 6}, {}, {IDs: 1, Min: 100, Max: 100}}
	if got := s.trendWindows(); !slices.Equal(got, want) {
		t.Errorf("trend = %+v, want %+v", got, want)
	}
}

func TestTimeline(t *testing.T) {
	tl := newTimeline(0, time.Second, 100*time.Millisecond)
	ms := int64(time.Millisecond)
	tl.record(engSegment, 50*ms, true)
	tl.record(engSegment, 150*ms, false)
	tl.record(engSegment, 5000*ms, true) // after the span: the last bucket
	if got := tl.sum(tl.sentOK[engSegment], 0, 100*ms); got != 1 {
		t.Errorf("sent ok in [0,100ms) = %d, want 1", got)
	}
	if got := tl.sum(tl.sentKO[engSegment], 100*ms, 200*ms); got != 1 {
		t.Errorf("sent failed in [100,200ms) = %d, want 1", got)
	}
	if got := tl.sum(tl.sentOK[engSegment], 0, 10*int64(time.Second)); got != 2 {
		t.Errorf("sent ok = %d, want 2", got)
	}
	if got := tl.sum(tl.sentKO[engSnowflake], 0, 10*int64(time.Second)); got != 0 {
		t.Errorf("snowflake failed = %d, want 0", got)
	}
	// Adjacent windows whose bound is not on a bucket edge share no bucket:
	// each request counts once.
	a := tl.sum(tl.sentKO[engSegment], 0, 120*ms)
	b := tl.sum(tl.sentKO[engSegment], 120*ms, 10*int64(time.Second))
	if a+b != 1 {
		t.Errorf("windows [0,120ms) and [120ms,10s) count %d+%d failed, want 1 in all", a, b)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		err  error
	}{
		{name: "defaults", cfg: Config{Repo: "/x"}},
		{name: "too short", cfg: Config{Repo: "/x", Duration: time.Second}, err: ErrConfig},
		{name: "bad tag", cfg: Config{Repo: "/x", Tags: []string{"a.b"}}, err: ErrConfig},
		{name: "bad fault", cfg: Config{Repo: "/x", Faults: []string{"meteor"}}, err: ErrConfig},
		{name: "bad batch", cfg: Config{Repo: "/x", MaxBatch: 1}, err: ErrConfig},
		{name: "bad max step", cfg: Config{Repo: "/x", MaxStep: -1}, err: ErrConfig},
		{name: "freeze too short", cfg: Config{Repo: "/x", Freeze: time.Millisecond}, err: ErrConfig},
		{name: "net fault too short", cfg: Config{Repo: "/x", NetFor: time.Millisecond}, err: ErrConfig},
		{name: "goals with overlap", cfg: Config{Repo: "/x", Goals: true, Overlap: true}, err: ErrConfig},
		{name: "op phase too short", cfg: Config{Repo: "/x", OpPhase: time.Millisecond}, err: ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.validate()
			if !errors.Is(err, tt.err) {
				t.Fatalf("validate = %v, want %v", err, tt.err)
			}
		})
	}
	c := Config{Repo: "/x"}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.Duration != 3*time.Minute || c.DBPause != 18*time.Second || c.Rate != 3000 || len(c.Faults) != len(AllFaults) ||
		c.MaxStep != 10_000_000 || c.Freeze != 13*time.Second || c.NetFor != 4*time.Second || c.HostsFor != 8*time.Second {
		t.Errorf("defaults: %+v", c)
	}
	long := Config{Repo: "/x", Duration: 30 * time.Minute}
	_ = long.validate()
	if long.DBPause != time.Minute {
		t.Errorf("30m run pauses MariaDB for %v, want 1m", long.DBPause)
	}
}

func TestIDSpaceBlame(t *testing.T) {
	s := newIDSpace(0, int64(time.Second))
	s.add(10, []int64{1, 2, 3})
	s.add(20, []int64{7})
	s.add(30, []int64{2, 3}) // 2 duplicates, seen again at 30
	s.add(40, []int64{7, 8}) // 1 duplicate at 40
	s.add(5, []int64{100})   // none
	s.add(50, []int64{1})    // 1 at 50: the later of 10 and 50
	got := map[int64]int64{}
	r := s.check(func(at, n int64) { got[at] += n })
	if r.Duplicates != 4 {
		t.Fatalf("duplicates = %d, want 4", r.Duplicates)
	}
	want := map[int64]int64{30: 2, 40: 1, 50: 1}
	if !maps.Equal(got, want) {
		t.Errorf("blamed %v, want %v", got, want)
	}
	if m := s.maxSeen(); m != 100 {
		t.Errorf("maxSeen = %d, want 100", m)
	}
}

func TestSchedule(t *testing.T) {
	tests := []struct {
		name             string
		d, warm, cool    time.Duration
		n, wantN         int
		wantFirst, wantL time.Duration
	}{
		{name: "short run, many faults: one each", d: 100 * time.Second, warm: 10 * time.Second, cool: 12 * time.Second, n: 40, wantN: 40, wantFirst: 10 * time.Second},
		{name: "long run: one every faultSpacing", d: 30 * time.Minute, warm: 10 * time.Second, cool: 15 * time.Second, n: 3, wantN: 44, wantFirst: 10 * time.Second},
		{name: "no time at all", d: time.Second, warm: time.Second, cool: time.Second, n: 2, wantN: 2, wantFirst: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := schedule(tt.d, tt.warm, tt.cool, tt.n)
			if len(got) != tt.wantN || got[0] != tt.wantFirst {
				t.Fatalf("schedule = %d faults from %v, want %d from %v", len(got), got[0], tt.wantN, tt.wantFirst)
			}
			for i := 1; i < len(got); i++ {
				if got[i] <= got[i-1] && tt.d > tt.warm+tt.cool {
					t.Errorf("fault %d at %v, not after %v", i, got[i], got[i-1])
				}
			}
			if last := got[len(got)-1]; tt.d > tt.warm+tt.cool && last >= tt.d-tt.cool {
				t.Errorf("last fault at %v, in the cool-down", last)
			}
		})
	}
}

func TestLanes(t *testing.T) {
	main, _ := splitFaults(AllFaults)
	if got := lanes(main, false); len(got) != 1 || !slices.Equal(got[0], main) {
		t.Errorf("one lane = %v", got)
	}
	got := lanes(main, true)
	if len(got) != 2 || len(got[0])+len(got[1]) != len(main) {
		t.Fatalf("two lanes = %v", got)
	}
	for _, k := range got[0] {
		if !strings.HasPrefix(k, "freeze-leafd-") && !strings.HasPrefix(k, "clock-") {
			t.Errorf("lane 0 has %s: it must only freeze or restart main leafds", k)
		}
	}
	for _, k := range got[1] {
		if strings.HasPrefix(k, "freeze-leafd-") || strings.HasPrefix(k, "clock-") {
			t.Errorf("lane 1 has %s", k)
		}
	}
}

func TestSplitFaults(t *testing.T) {
	main, ops := splitFaults(AllFaults)
	if len(main)+len(ops) != len(AllFaults) || len(ops) != 12 {
		t.Fatalf("split %d + %d of %d", len(main), len(ops), len(AllFaults))
	}
	for _, f := range ops {
		if !isOp(f) {
			t.Errorf("%s on the operator track", f)
		}
	}
	seen := map[string]bool{}
	for _, f := range AllFaults {
		if seen[f] {
			t.Errorf("%s twice in AllFaults", f)
		}
		seen[f] = true
		if strings.HasPrefix(f, "net-") {
			if _, _, ok := parseNetFault(f); !ok {
				t.Errorf("net fault %s does not parse", f)
			}
		}
	}
	// Every link has every kind of network fault.
	for _, kind := range []string{"latency", "blackhole", "reset", "partition"} {
		for _, link := range []string{"nats", "db", "zk", "route"} {
			if !seen["net-"+kind+"-"+link] {
				t.Errorf("net-%s-%s missing from AllFaults", kind, link)
			}
		}
	}
	// Clock: step and offset, both directions.
	for _, f := range []string{FaultClockBack1, FaultClockFwd1, FaultClockBack10, FaultClockFwd10, FaultClockSlow, FaultClockFast} {
		if !seen[f] {
			t.Errorf("%s missing from AllFaults", f)
		}
	}
}

func TestParseNetFault(t *testing.T) {
	tests := []struct {
		in         string
		kind, link string
		ok         bool
	}{
		{"net-latency-nats", "latency", "nats", true},
		{"net-partition-route", "partition", "route", true},
		{"net-db-reply-lost", "replylost", "db", true},
		{"net-latency", "", "", false},
		{"net-flood-db", "", "", false},
		{"net-reset-moon", "", "", false},
		{"kill-leafd", "", "", false},
	}
	for _, tt := range tests {
		kind, link, ok := parseNetFault(tt.in)
		if kind != tt.kind || link != tt.link || ok != tt.ok {
			t.Errorf("parseNetFault(%q) = %q %q %v, want %q %q %v", tt.in, kind, link, ok, tt.kind, tt.link, tt.ok)
		}
	}
}

func TestLinkProxies(t *testing.T) {
	if got := linkProxies("route", 2); !slices.Equal(got, []string{"route-1-3", "route-3-1", "route-2-3", "route-3-2"}) {
		t.Errorf("route proxies of server 3 = %v", got)
	}
	if got := linkProxies("nats", 0); len(got) != numNATS {
		t.Errorf("nats proxies = %v", got)
	}
	if got := linkProxies("db", 0); !slices.Equal(got, []string{"db"}) {
		t.Errorf("db proxies = %v", got)
	}
	for _, kind := range []string{"latency", "blackhole", "reset", "replylost"} {
		if len(toxicsFor(kind, time.Second)) == 0 {
			t.Errorf("no toxics for %s", kind)
		}
	}
	if ts := toxicsFor("replylost", 3*time.Second); len(ts) != 1 || ts[0].Stream != "downstream" || ts[0].Attributes["timeout"] != 3000 {
		t.Errorf("replylost toxics = %+v: want the replies (downstream) dropped, then closed after the hold", ts)
	}
}

func TestSummarize(t *testing.T) {
	faults := []*FaultResult{
		{Kind: "kill-leafd", Track: trackMain, Sent: 100, Failed: 3, Refusals: 1},
		{Kind: "op-sql-row-del", Track: trackOp, Sent: 50, Answered: 20, Refusals: 30, FloorViolations: 2},
		{Kind: "kill-leafd", Track: trackMain, Sent: 100, Failed: 1, Duplicates: 4, Error: "x"},
	}
	got := summarize(faults)
	want := []KindSummary{
		{Kind: "kill-leafd", Injected: 2, Requests: 200, Answered: 196, AnsweredShare: 0.98, Duplicates: 4, Refusals: 1, Errors: 1},
		{Kind: "op-sql-row-del", Injected: 1, Requests: 50, Answered: 20, AnsweredShare: 0.4, Refusals: 30, FloorViolations: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("summarize = %+v\nwant %+v", got, want)
	}
}

func TestLastWorker(t *testing.T) {
	dir := t.TempDir()
	log := dir + "/leafd.log"
	l := &leafd{proc: &proc{logPath: log}}
	if w := lastWorker(l); w != -1 {
		t.Errorf("no log: worker %d, want -1", w)
	}
	lines := `time=x level=INFO msg="snowflake worker registered" node=chaos-3 worker=109 last_lease=0001
time=x level=ERROR msg="snowflake lost" node=chaos-3 worker=109 reason="lost"
time=x level=INFO msg="snowflake worker registered" node=chaos-3 worker=346 last_lease=0001
time=x level=INFO msg="snowflake serving" node=chaos-3 worker=7
`
	if err := os.WriteFile(log, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	if w := lastWorker(l); w != 346 {
		t.Errorf("worker %d, want 346 (the last registered)", w)
	}
}

func TestWriteTextByKind(t *testing.T) {
	r := &Report{Pass: false, Failures: []string{"3 segment ids below a range already issued"}, FloorViolations: 3, Refusals: 7,
		Faults: []*FaultResult{{Kind: FaultOpSQLLowerMax, Track: trackOp, AtS: 12, FloorViolations: 3,
			FloorExamples: []string{"op4: id 5 < floor 900"}, Notes: []string{"floor of op4 after the act: 900"}}},
		ByKind: []KindSummary{{Kind: FaultOpSQLLowerMax, Injected: 1, Requests: 10, Answered: 3, AnsweredShare: 0.3, Refusals: 7, FloorViolations: 3}}}
	var b strings.Builder
	r.WriteText(&b)
	out := b.String()
	for _, want := range []string{
		"leafchaos: FAIL: 3 segment ids below a range already issued",
		"FLOOR VIOLATIONS 3, refusals 7",
		"fault kind",
		"FLOOR: op-sql-maxid-lower at 12.0s: op4: id 5 < floor 900",
		"note: op-sql-maxid-lower at 12.0s: floor of op4 after the act: 900",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`op-sql-maxid-lower\s+1\s+10\s+30\.000%\s+0\s+7\s+3\s+0`).MatchString(out) {
		t.Errorf("per-kind row missing or wrong:\n%s", out)
	}
}
