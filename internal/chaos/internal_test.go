package chaos

import (
	"errors"
	"slices"
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
			r := s.check()
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
		c.MaxStep != 10_000_000 {
		t.Errorf("defaults: %+v", c)
	}
	long := Config{Repo: "/x", Duration: 30 * time.Minute}
	_ = long.validate()
	if long.DBPause != time.Minute {
		t.Errorf("30m run pauses MariaDB for %v, want 1m", long.DBPause)
	}
}
