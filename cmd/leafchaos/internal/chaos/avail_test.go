package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// fill records n requests of class sent at each 100 ms from from to to
// (seconds after t0), bad of each bucket's n without an answer.
func fill(tl *availTL, class int, from, to float64, n, bad int) {
	for b := int64(from * 10); b < int64(to*10); b++ {
		sent := tl.t0 + b*int64(availBucket)
		for i := range n {
			code := ""
			if i < bad {
				code = CodeTimeout
			}
			tl.record(class, sent, sent+int64(10*time.Millisecond), code, false)
		}
	}
}

func TestAvailRecovery(t *testing.T) {
	sec := func(s float64) int64 { return int64(s * float64(time.Second)) }
	tests := []struct {
		name   string
		setup  func(tl *availTL)
		heal   float64
		end    float64
		want   float64
		wantOK bool
	}{
		{name: "never failed", setup: func(tl *availTL) { fill(tl, clsSegment, 0, 20, 10, 0) }, heal: 5, end: 20, want: 0, wantOK: true},
		{name: "failed 3s after the heal", setup: func(tl *availTL) {
			fill(tl, clsSegment, 0, 8, 10, 5)
			fill(tl, clsSegment, 8, 20, 10, 0)
		}, heal: 5, end: 20, want: 3, wantOK: true},
		{name: "a third silent to the end", setup: func(tl *availTL) { fill(tl, clsSnowflake, 0, 20, 9, 3) }, heal: 5, end: 20, wantOK: false},
		{name: "one blip after recovery", setup: func(tl *availTL) {
			fill(tl, clsSegment, 5, 20, 10, 0)
			tl.record(clsSegment, sec(15), sec(16.5), CodeTimeout, false)
		}, heal: 5, end: 20, want: 0, wantOK: true},
		{name: "recovered too close to the end", setup: func(tl *availTL) {
			fill(tl, clsSegment, 0, 19, 10, 5)
			fill(tl, clsSegment, 19, 20, 10, 0)
		}, heal: 5, end: 20, wantOK: false},
		{name: "slow ids are not full service", setup: func(tl *availTL) {
			for s := 5.0; s < 9; s += 0.1 {
				tl.record(clsSegment, sec(s), sec(s+1.5), "", false)
			}
			fill(tl, clsSegment, 9, 20, 1, 0)
		}, heal: 5, end: 20, want: 4, wantOK: true},
		{name: "straddlers do not count", setup: func(tl *availTL) {
			tl.record(clsSegment, sec(6), sec(8), CodeTimeout, true)
			fill(tl, clsSegment, 5, 20, 1, 0)
		}, heal: 5, end: 20, want: 0, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := newAvailTL(0, 30*time.Second)
			tt.setup(tl)
			class := clsSegment
			if tt.name == "a third silent to the end" {
				class = clsSnowflake
			}
			got, ok := tl.recovery(class, sec(tt.heal), sec(tt.end))
			if ok != tt.wantOK || (ok && (got-time.Duration(sec(tt.want))).Abs() > time.Millisecond) {
				t.Errorf("recovery = %v, %v; want %vs, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestAvailabilityGoal(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := newAvailTL(t0.UnixNano(), time.Minute)
	// kill-nats at 10s, healed at 19s; a third of snowflake silent for
	// good, segment fine after 2s.
	fill(tl, clsSegment, 10, 21, 10, 10)
	fill(tl, clsSegment, 21, 50, 10, 0)
	fill(tl, clsSnowflake, 10, 50, 9, 3)
	fr := &FaultResult{Kind: FaultKillNATS, at: t0.Add(10 * time.Second), done: t0.Add(19 * time.Second), AtS: 10}
	availability(tl, fr, t0.Add(50*time.Second))
	if len(fr.Avail) != 2 || fr.GoalS != 13 || fr.HealS != 9 {
		t.Fatalf("avail %+v goal %v heal %v", fr.Avail, fr.GoalS, fr.HealS)
	}
	seg, sf := fr.Avail[0], fr.Avail[1]
	if !seg.Recovered || seg.RecoveryS < 1.9 || seg.RecoveryS > 2.1 || !seg.Judged || !seg.GoalMet || seg.During.OK != 0 {
		t.Errorf("segment: %+v", seg)
	}
	if sf.Recovered || !sf.Judged || sf.GoalMet || sf.During.Silent == 0 {
		t.Errorf("snowflake: %+v", sf)
	}
	misses := goalFailures([]*FaultResult{fr})
	if len(misses) != 1 || !strings.Contains(misses[0], "kill-nats at 10.0s: snowflake 66.67%") {
		t.Errorf("goal failures = %q", misses)
	}
	sum := summarizeAvail([]*FaultResult{fr, fr})
	if len(sum) != 2 || sum[1].Unrecovered != 2 || sum[1].GoalMissed != 2 || sum[0].MaxRecoveryS < 1.9 {
		t.Errorf("summary = %+v", sum)
	}
	// A window too short past the goal is reported, not judged.
	short := &FaultResult{Kind: FaultKillNATS, at: t0.Add(10 * time.Second), done: t0.Add(19 * time.Second)}
	availability(tl, short, t0.Add(33*time.Second))
	for _, ca := range short.Avail {
		if ca.Judged || !ca.GoalMet {
			t.Errorf("short window judged: %+v", ca)
		}
	}
}

// The requests sent after the next fault struck, in the bucket it struck
// in, belong to that fault: they are not judged against the goal of the
// fault before it, whose window ends there.
func TestGoalWindowEndsAtTheNextStrike(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tl := newAvailTL(t0.UnixNano(), time.Minute)
	fill(tl, clsSegment, 0, 40, 10, 0)
	next := t0.Add(39*time.Second + 930*time.Millisecond) // strikes at 39.93 s
	for i := range 30 {                                   // silent: the next fault froze their node
		sent := next.UnixNano() + int64(i)*int64(time.Millisecond)
		tl.record(clsSegment, sent, sent+int64(2*time.Second), CodeTimeout, false)
	}
	fr := &FaultResult{Kind: FaultRestartZK, at: t0.Add(10 * time.Second), done: t0.Add(11 * time.Second)}
	availability(tl, fr, next)
	if seg := fr.Avail[0]; !seg.Judged || !seg.GoalMet || seg.AfterGoal.Silent != 0 {
		t.Errorf("segment after the goal: %+v, want judged and met with none silent", seg.AfterGoal)
	}
	if sh := tl.sum(clsSegment, next.UnixNano(), t0.Add(41*time.Second).UnixNano()); sh.Silent != 0 {
		t.Errorf("the bucket the next fault struck in is partly before it, yet summed: %+v", sh)
	}
}

func TestCategory(t *testing.T) {
	for code, want := range map[string]string{"": "ok", CodeTimeout: "silent", CodeClientUnavailable: "silent",
		"503": "refused", CodeNoResponders: "refused", CodePoolEmpty: "refused", CodeBadReply: "bad"} {
		if got := category(code); got != want {
			t.Errorf("category(%q) = %q, want %q", code, got, want)
		}
	}
}

func TestProberReport(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) int64 { return t0.Add(time.Duration(s) * time.Second).UnixNano() }
	p := &prober{rounds: map[string][]probeRound{"n1": {
		{at: at(1), ready: true, status: true, joined: true},
		{at: at(2), ready: true, status: true, joined: true, sf: "no answer"}, // in a fault
		{at: at(3), ready: true, status: true, joined: true, sf: "no answer"}, // in a fault
		{at: at(20), ready: true, status: true, joined: true, dupSubs: "leaf.snowflake (queue leaf) ×2"},
		{at: at(21), ready: true, status: true, joined: true, dupSubs: "leaf.snowflake (queue leaf) ×2"},
		{at: at(22), ready: true, status: false, joined: false, sf: "503: paused"}, // out of the group: no claim
		{at: at(23), ready: false, seg: "no answer"},                               // not ready: no claim
	}}}
	got := p.report(t0, func(t int64) bool { return t < at(10) })
	if len(got) != 1 {
		t.Fatalf("report = %+v", got)
	}
	n := got[0]
	if n.Rounds != 7 || n.ReadyRounds != 6 || n.LiesInFaults["snowflake"] != 2 || n.LiesHealed["dup-subscription"] != 2 ||
		n.Persistent["dup-subscription"] != 1 || n.LiesHealed["status"] != 1 || n.Persistent["status"] != 0 || n.LiesHealed["segment"] != 0 {
		t.Errorf("report = %+v", n)
	}
}

// A late or silent request in flight while leafchaos itself did not run is
// not judged; one late outside every stall still counts, as do fast ones.
func TestExcludeStalls(t *testing.T) {
	sec := func(s float64) int64 { return int64(s * float64(time.Second)) }
	tl := newAvailTL(0, 30*time.Second)
	tl.record(clsSegment, sec(1), sec(1)+int64(10*time.Millisecond), "", false) // fast
	tl.record(clsSegment, sec(2), sec(4), "", false)                            // late, across the stall
	tl.record(clsSegment, sec(2), sec(5), CodeTimeout, false)                   // silent, across the stall
	tl.record(clsSegment, sec(8), sec(10), "", false)                           // late, no stall
	tl.stalls = append(tl.stalls, [2]int64{sec(3), sec(3) + int64(400*time.Millisecond)})
	n, d, late := tl.excludeStalls()
	if n != 2 || d != 400*time.Millisecond {
		t.Fatalf("excluded %d over %v, want 2 over 400ms", n, d)
	}
	if want := []LateRequest{{Class: "segment", SentS: 8, TookS: 2}}; !slices.Equal(late, want) {
		t.Errorf("late requests listed: %+v, want %+v", late, want)
	}
	sh := tl.sum(clsSegment, 0, sec(20))
	if sh.Sent != 2 || sh.OK != 2 || sh.Fast != 1 || sh.Silent != 0 || sh.Stalled != 2 {
		t.Errorf("after the exclusion: %+v, want 2 sent (1 fast, 1 late), 2 stalled", sh)
	}
}
