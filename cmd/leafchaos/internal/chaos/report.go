package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/wire"
)

// Report is what a run found. Times are seconds (since the load started
// where they are points in time).
type Report struct {
	Pass     bool     `json:"pass"`     // no duplicate, no crash, every fault injected
	Failures []string `json:"failures"` // why not

	Started   time.Time `json:"started"`
	DurationS float64   `json:"duration_s"` // of the load
	Rate      int       `json:"rate"`
	PoolRate  int       `json:"pool_rate"`
	Seed      int64     `json:"seed"`
	DBPauseS  float64   `json:"db_pause_s"`
	WorkDir   string    `json:"work_dir,omitempty"`

	Requests     int64   `json:"requests"` // requests and pool takes sent
	OK           int64   `json:"ok"`
	Availability float64 `json:"availability"` // ok / requests
	IDs          int64   `json:"ids"`
	Duplicates   int64   `json:"duplicates"`
	// MonoCalls is how many calls of the monotonic tag succeeded and were
	// checked for strict order (mono.CheckHistory); MonoOrder is the first
	// violation, "" when there is none.
	MonoCalls int64  `json:"mono_calls"`
	MonoOrder string `json:"mono_order,omitempty"`
	// FloorViolations: segment ids a node handed out after a restart or
	// an operator's act below the max_id its tag had before (a range
	// issued again, even if the harness never saw its first copy).
	FloorViolations int64            `json:"floor_violations"`
	Refusals        int64            `json:"refusals"` // faults answered with a clear error (see ByKind)
	Dropped         int64            `json:"dropped"`  // schedule slots not sent: every client was busy
	Errors          map[string]int64 `json:"errors"`   // by code, all requests

	Spaces   []SpaceReport  `json:"id_spaces"`
	Subjects []KindReport   `json:"subjects"`
	Kinds    []KindReport   `json:"kinds"`
	Faults   []*FaultResult `json:"faults"`
	ByKind   []KindSummary  `json:"by_fault_kind"`
	Problems []string       `json:"problems"` // unexpected exits, faults that could not be injected
	// Nodes: each main leafd asked one by one, every second, whether it
	// says it serves and whether it does (prober).
	Nodes []NodeReport `json:"nodes"`
	// Goals: the availability goals were enforced (Config.Goals); else
	// GoalMisses are reported only.
	Goals      bool     `json:"goals_enforced"`
	GoalMisses []string `json:"goal_misses"`
	// Calm: by class of request, what was sent from CalmFromS — calmAfter
	// past the heal of the main track's last fault — to the end of the load.
	CalmFromS float64      `json:"calm_from_s"`
	Calm      []ClassShare `json:"calm"`
	// Stalled counts the late or silent requests not judged: in flight
	// while leafchaos itself did not run for stallMin or more (StallS in
	// all), so their lateness may be the harness's own.
	Stalled int64   `json:"stalled_requests"`
	StallS  float64 `json:"stalls_s"`
	// Late: the requests judged late or silent, in the order sent (the
	// first 5000), to set beside the nodes' logs.
	Late []LateRequest `json:"late,omitempty"`
}

// ClassShare is one class of request over a stretch of time.
type ClassShare struct {
	Class string `json:"class"`
	Share
}

// calmAfter: the calm at the end of a run is counted from this long after
// the last heal.
const calmAfter = 5 * time.Second

// SpaceReport is one id space: a segment tag or snowflake.
type SpaceReport struct {
	Name       string   `json:"name"`
	IDs        int64    `json:"ids"`
	Runs       int      `json:"runs"` // runs of consecutive ids stored
	Duplicates int64    `json:"duplicates"`
	Examples   []string `json:"duplicate_examples,omitempty"`
	Min        int64    `json:"min"`
	Max        int64    `json:"max"`
	// Trend: per window of TrendWindowS, the ids taken and their range.
	// For a segment tag the window's max should rise; Falling counts the
	// windows whose max is below the previous window's.
	TrendWindowS float64       `json:"trend_window_s"`
	Trend        []trendWindow `json:"trend"`
	Falling      int           `json:"falling_windows"`
}

// KindReport is one kind of request, or all kinds on one subject.
type KindReport struct {
	Name         string            `json:"name"`
	Sent         int64             `json:"sent"`
	OK           int64             `json:"ok"`
	IDs          int64             `json:"ids"`
	Availability float64           `json:"availability"`
	LongestGapS  float64           `json:"longest_gap_s"`            // without a successful answer
	GapEndedAtS  float64           `json:"gap_ended_at_s"`           // when that gap ended
	Errors       map[string]int64  `json:"errors,omitempty"`         // by code
	Messages     map[string]string `json:"error_messages,omitempty"` // by code: the last one seen
}

// KindSummary is what every injection of one kind of fault added up to.
type KindSummary struct {
	Kind     string `json:"kind"`
	Injected int    `json:"injected"`
	Requests int64  `json:"requests"` // sent in its windows (operator faults: by its own clients)
	Answered int64  `json:"answered"`
	// AnsweredShare is Answered/Requests.
	AnsweredShare float64 `json:"answered_share"`
	// Duplicates: ids whose second sighting fell in its windows (operator
	// faults: in its own id spaces).
	Duplicates      int64 `json:"duplicates"`
	Refusals        int64 `json:"refusals"`
	FloorViolations int64 `json:"floor_violations"`
	Errors          int   `json:"injection_errors"`
	// GoalS is the recovery time named for the kind (recoveryGoal);
	// Avail its figures by class of request (main track only).
	GoalS float64     `json:"recovery_goal_s,omitempty"`
	Avail []KindAvail `json:"availability,omitempty"`
}

// FaultResult is one injected fault and what the clients saw around it.
type FaultResult struct {
	Kind     string  `json:"kind"`
	Track    string  `json:"track"` // main or operator
	Target   string  `json:"target"`
	AtS      float64 `json:"at_s"`
	TookS    float64 `json:"took_s"`             // injecting it, including restarts
	Recovery float64 `json:"restart_ready_s"`    // the restarted process was ready after
	InFlight int64   `json:"in_flight_at_fault"` // client requests in flight when it struck
	Error    string  `json:"error,omitempty"`

	// The window runs from the fault to the next one (or the end of the load).
	WindowS float64 `json:"window_s"`
	Sent    int64   `json:"sent"`   // requests sent in the window
	Failed  int64   `json:"failed"` // of which failed
	// ClientFailed counts the failures of requests made through the Go
	// client (retries, failover): what an application sees.
	ClientFailed int64 `json:"failed_via_client"`
	// FailedSoon counts failures seen within Timeout+1s of the fault: the
	// requests in flight that it cost, and those sent right after.
	FailedSoon int64 `json:"failed_within_timeout"`
	// ErrorsEndedAfterS: the last failed request of the window was sent this
	// long after the fault (0: none failed) — the client-visible recovery.
	ErrorsEndedAfterS float64 `json:"errors_ended_after_s"`
	// For pause-db: segment requests (not pool takes) sent while MariaDB
	// was stopped, how many failed, and the share answered (from the
	// nodes' buffers).
	PauseSegmentSent   int64   `json:"pause_segment_sent,omitempty"`
	PauseSegmentFailed int64   `json:"pause_segment_failed,omitempty"`
	PauseShare         float64 `json:"pause_segment_answered,omitempty"`
	// Failures of requests sent in the window, by code and by subject.
	Errors   map[string]int64 `json:"errors,omitempty"`
	Subjects map[string]int64 `json:"failed_subjects,omitempty"`

	// Refusals: requests answered with a wire error (400, 404, 409, 500,
	// 501, 503) in the window, plus nodes that refused to start or stopped
	// themselves: the product saying no rather than repeating an id.
	Refusals int64 `json:"refusals"`
	// Duplicates whose later sighting fell in this fault's window (for an
	// operator fault: in its id spaces).
	Duplicates      int64    `json:"duplicates"`
	FloorChecked    int64    `json:"floor_checked,omitempty"` // ids checked against a floor
	FloorViolations int64    `json:"floor_violations"`
	FloorExamples   []string `json:"floor_examples,omitempty"`
	Notes           []string `json:"notes,omitempty"`
	// Answered: for an operator fault, its own requests answered.
	Answered int64 `json:"answered,omitempty"`
	// HealS: the fault healed (the process back, the link open) this long
	// after it struck; GoalS: the recovery time named for it; Avail: by
	// class of request, during it and after its heal (main track only).
	HealS float64 `json:"heal_s,omitempty"`
	// Lane: with Config.Overlap, 0 for the faults of leafd processes, 1
	// for the infrastructure's; Overlapped: the other lane's faults that
	// struck between this one and the next of its lane (their figures
	// blend).
	Lane       int          `json:"lane,omitempty"`
	Overlapped []string     `json:"overlapped,omitempty"`
	GoalS      float64      `json:"recovery_goal_s,omitempty"`
	Avail      []ClassAvail `json:"availability,omitempty"`

	at, done           time.Time
	pauseFrom, pauseTo time.Time
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func buildReport(ctx context.Context, cfg *Config, c *cluster, l *load, f *faulter, pr *prober, spaces map[string]*idSpace, ops *opTrack, t0, end time.Time) *Report {
	r := &Report{Started: t0, DurationS: end.Sub(t0).Seconds(), Rate: cfg.Rate, PoolRate: max(cfg.PoolRate, 0),
		Seed: cfg.Seed, DBPauseS: cfg.DBPause.Seconds(), Errors: map[string]int64{}, Dropped: l.dropped.Load(),
		Failures: []string{}, Problems: []string{}, Goals: cfg.Goals, GoalMisses: []string{}}
	if cfg.Keep {
		r.WorkDir = c.dir
	}
	f.mu.Lock()
	all0 := slices.Clone(f.results)
	f.mu.Unlock()
	var mainRes, opRes []*FaultResult
	for _, fr := range all0 {
		if fr.Track != trackOp {
			mainRes = append(mainRes, fr)
		} else {
			opRes = append(opRes, fr)
		}
	}
	// Id spaces and duplicates: each blamed on the main fault whose window
	// holds its later sighting (before the first: none). The operator
	// track's spaces are its own and blamed in opTrack.
	var unblamed int64
	blame := func(at, n int64) {
		for i := len(mainRes) - 1; i >= 0; i-- {
			if mainRes[i].at.UnixNano() <= at {
				mainRes[i].Duplicates += n
				return
			}
		}
		unblamed += n
	}
	for _, name := range slices.Sorted(maps.Keys(spaces)) {
		sp := spaces[name]
		res := sp.check(blame)
		s := SpaceReport{Name: name, IDs: res.IDs, Runs: res.Runs, Duplicates: res.Duplicates, Min: res.Min, Max: res.Max,
			TrendWindowS: time.Duration(sp.window).Seconds(), Trend: sp.trendWindows()}
		for _, id := range res.Examples {
			ex := fmt.Sprint(id)
			if name == "snowflake" { // Leaf's layout: 41 bits of ms, 10 of worker, 12 of sequence
				ex += fmt.Sprintf(" (tick %d, worker %d, seq %d)", id>>22, id>>12&1023, id&4095)
			}
			s.Examples = append(s.Examples, ex)
		}
		var prev int64
		for _, w := range s.Trend {
			if w.IDs == 0 {
				continue
			}
			if w.Max < prev {
				s.Falling++
			}
			prev = max(prev, w.Max)
		}
		r.Duplicates += res.Duplicates
		r.Spaces = append(r.Spaces, s)
	}
	// The operator track's id spaces: its own, blamed on its faults.
	for _, name := range slices.Sorted(maps.Keys(ops.spaces)) {
		res := ops.spaces[name].check(func(at, n int64) {
			for i := len(opRes) - 1; i >= 0; i-- {
				if opRes[i].at.UnixNano() <= at {
					opRes[i].Duplicates += n
					return
				}
			}
			unblamed += n
		})
		s := SpaceReport{Name: "op." + name, IDs: res.IDs, Runs: res.Runs, Duplicates: res.Duplicates, Min: res.Min, Max: res.Max}
		for _, id := range res.Examples {
			s.Examples = append(s.Examples, fmt.Sprint(id))
		}
		r.Duplicates += res.Duplicates
		r.Spaces = append(r.Spaces, s)
	}
	// The monotonic tag's order, over every successful call.
	l.monoMu.Lock()
	r.MonoCalls = int64(len(l.monoOps))
	if err := mono.CheckHistory(l.monoOps); err != nil {
		r.MonoOrder = err.Error()
	}
	l.monoMu.Unlock()
	// Requests.
	all := append(append([]*kind(nil), l.kinds...), l.pools...)
	seen := map[*kindStats]bool{}
	for _, k := range all {
		k.stats.finish(end.UnixNano())
		r.Kinds = append(r.Kinds, kindReport(k.name, k.stats, t0))
		r.Requests += k.stats.sent.Load()
		r.OK += k.stats.ok.Load()
		r.IDs += k.stats.ids.Load()
		for code, n := range k.stats.errorsCopy() {
			r.Errors[code] += n
		}
		if !seen[k.subj] {
			seen[k.subj] = true
			k.subj.finish(end.UnixNano())
			r.Subjects = append(r.Subjects, kindReport(k.subject, k.subj, t0))
		}
	}
	r.Availability = ratio(r.OK, r.Requests)
	stalled, stallTime, late := l.av.excludeStalls()
	r.Stalled, r.StallS, r.Late = stalled, stallTime.Seconds(), late
	// Faults.
	r.Faults = all0
	tl := l.tl
	engines := []int{engSegment, engSnowflake, engPool, engMono}
	for i, fr := range mainRes {
		to := end
		if i+1 < len(mainRes) {
			to = mainRes[i+1].at
		}
		prevFrom := int64(0) // start of the previous fault's window
		if i > 0 {
			prevFrom = mainRes[i-1].at.UnixNano()
		}
		if fr.done.IsZero() {
			fr.done = end
		}
		laneNext := end
		for _, nx := range mainRes[i+1:] {
			if nx.Lane == fr.Lane {
				laneNext = nx.at
				break
			}
		}
		fr.Overlapped = nil
		for _, o := range mainRes {
			if o.Lane != fr.Lane && o.at.Before(laneNext) && (o.done.IsZero() || o.done.After(fr.at)) {
				fr.Overlapped = append(fr.Overlapped, o.Kind)
			}
		}
		availability(l.av, fr, laneNext)
		from, upTo := fr.at.UnixNano(), to.UnixNano()
		fr.AtS = fr.at.Sub(t0).Seconds()
		fr.TookS = fr.done.Sub(fr.at).Seconds()
		fr.WindowS = to.Sub(fr.at).Seconds()
		for _, e := range engines { // sent: to the timeline's resolution
			fr.Sent += tl.sum(tl.sentOK[e], from, upTo) + tl.sum(tl.sentKO[e], from, upTo)
		}
		var lastFail int64
		soon := from + int64(cfg.Timeout+time.Second)
		l.errMu.Lock()
		for _, e := range l.errLog { // failures: exact
			if e.done >= from && e.done <= soon {
				fr.FailedSoon++
			}
			// A failure counts for the fault whose window it was sent in,
			// unless it was still in flight when the next fault struck: then
			// it counts for that one (the earlier fault was over, the
			// request had not failed yet).
			inWindow := e.sent >= from && e.sent < upTo && (i+1 == len(mainRes) || e.done <= upTo)
			inFlightAtStart := e.sent >= prevFrom && e.sent < from && e.done > from
			if !inWindow && !inFlightAtStart {
				continue
			}
			if fr.Errors == nil {
				fr.Errors, fr.Subjects = map[string]int64{}, map[string]int64{}
			}
			fr.Failed++
			if refusalCodes[e.code] {
				fr.Refusals++
			}
			fr.Errors[e.code]++
			fr.Subjects[e.subject]++
			lastFail = max(lastFail, e.sent, from)
			if strings.HasPrefix(e.subject, clientPrefix) {
				fr.ClientFailed++
			}
			if e.sent >= fr.pauseFrom.UnixNano() && e.sent < fr.pauseTo.UnixNano() &&
				strings.HasPrefix(strings.TrimPrefix(e.subject, clientPrefix), wire.SegmentPrefix) {
				fr.PauseSegmentFailed++
			}
		}
		l.errMu.Unlock()
		if lastFail > 0 {
			fr.ErrorsEndedAfterS = time.Duration(lastFail - from).Seconds()
		}
		if !fr.pauseFrom.IsZero() {
			a, b := fr.pauseFrom.UnixNano(), fr.pauseTo.UnixNano()
			fr.PauseSegmentSent = tl.sum(tl.sentOK[engSegment], a, b) + tl.sum(tl.sentKO[engSegment], a, b)
			// Sent is counted to the timeline's resolution, failures
			// exactly: a short pause can count more failures than sends.
			fr.PauseSegmentSent = max(fr.PauseSegmentSent, fr.PauseSegmentFailed)
			fr.PauseShare = 1 - ratio(fr.PauseSegmentFailed, fr.PauseSegmentSent)
		}
	}
	calm := t0
	for _, fr := range mainRes {
		if fr.done.After(calm) {
			calm = fr.done
		}
	}
	calm = calm.Add(calmAfter)
	r.CalmFromS = calm.Sub(t0).Seconds()
	for c := range numClasses {
		if sh := l.av.sum(c, calm.UnixNano(), end.UnixNano()); sh.Sent > 0 {
			r.Calm = append(r.Calm, ClassShare{Class: classNames[c], Share: sh})
		}
	}
	for _, fr := range r.Faults {
		if fr.Track == trackOp && !fr.done.IsZero() {
			fr.AtS = fr.at.Sub(t0).Seconds()
			fr.TookS = fr.done.Sub(fr.at).Seconds()
		}
		r.FloorViolations += fr.FloorViolations
		r.Refusals += fr.Refusals
	}
	r.ByKind = summarize(r.Faults)
	// The nodes, one by one: a lie counts apart while a fault or its
	// recovery time lasts.
	r.Nodes = pr.report(t0, func(t int64) bool {
		for _, fr := range mainRes {
			if t >= fr.at.UnixNano() && t < fr.done.Add(recoveryGoal(fr.Kind)).UnixNano() {
				return true
			}
		}
		return false
	})
	r.GoalMisses = append(r.GoalMisses, goalFailures(mainRes)...)
	for _, n := range r.Nodes {
		for _, check := range slices.Sorted(maps.Keys(n.Persistent)) {
			r.GoalMisses = append(r.GoalMisses, fmt.Sprintf("node %s said it serves %s and did not answer it in %d rounds in a row outside every fault",
				n.Node, check, n.Persistent[check]+1))
		}
	}
	if unblamed > 0 {
		r.ByKind = append(r.ByKind, KindSummary{Kind: "(before any fault)", Duplicates: unblamed})
	}
	// Verdict.
	c.mu.Lock()
	r.Problems = append(r.Problems, c.problems...)
	c.mu.Unlock()
	if r.Duplicates > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d duplicate ids", r.Duplicates))
	}
	if r.MonoOrder != "" {
		r.Failures = append(r.Failures, "monotonic tag: "+r.MonoOrder)
	}
	if r.FloorViolations > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d segment ids below a range already issued", r.FloorViolations))
	}
	if len(r.Problems) > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d problems (crashes, faults not injected)", len(r.Problems)))
	}
	injected := map[string]bool{}
	for _, fr := range r.Faults {
		injected[fr.Kind] = true
	}
	for _, k := range cfg.Faults {
		if !injected[k] {
			r.Failures = append(r.Failures, "fault "+k+" was never injected")
		}
	}
	if ctx.Err() != nil {
		r.Failures = append(r.Failures, "interrupted")
	}
	if r.OK == 0 {
		r.Failures = append(r.Failures, "no request succeeded")
	}
	if cfg.Goals && len(r.GoalMisses) > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d availability goals missed", len(r.GoalMisses)))
	}
	r.Pass = len(r.Failures) == 0
	return r
}

// summarize adds up the faults by kind, in the order each kind was first
// injected.
func summarize(faults []*FaultResult) []KindSummary {
	var out []KindSummary
	idx := map[string]int{}
	for _, fr := range faults {
		i, ok := idx[fr.Kind]
		if !ok {
			i = len(out)
			idx[fr.Kind] = i
			out = append(out, KindSummary{Kind: fr.Kind})
		}
		s := &out[i]
		s.Injected++
		s.Requests += fr.Sent
		if fr.Track == trackOp {
			s.Answered += fr.Answered
		} else {
			s.Answered += fr.Sent - min(fr.Failed, fr.Sent)
		}
		s.GoalS = fr.GoalS
		s.Duplicates += fr.Duplicates
		s.Refusals += fr.Refusals
		s.FloorViolations += fr.FloorViolations
		if fr.Error != "" {
			s.Errors++
		}
	}
	for i := range out {
		out[i].AnsweredShare = ratio(out[i].Answered, out[i].Requests)
		var of []*FaultResult
		for _, fr := range faults {
			if fr.Kind == out[i].Kind {
				of = append(of, fr)
			}
		}
		out[i].Avail = summarizeAvail(of)
	}
	return out
}

func kindReport(name string, k *kindStats, t0 time.Time) KindReport {
	k.mu.Lock()
	gap, gapEnd := k.maxGap, k.maxGapEnd
	k.mu.Unlock()
	kr := KindReport{Name: name, Sent: k.sent.Load(), OK: k.ok.Load(), IDs: k.ids.Load(),
		LongestGapS: gap.Seconds(), Errors: k.errorsCopy()}
	k.mu.Lock()
	kr.Messages = maps.Clone(k.samples)
	k.mu.Unlock()
	kr.Availability = ratio(kr.OK, kr.Sent)
	if gapEnd > 0 {
		kr.GapEndedAtS = time.Unix(0, gapEnd).Sub(t0).Seconds()
	}
	return kr
}

// WriteJSON writes the report as indented JSON to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteText prints the summary.
func (r *Report) WriteText(w io.Writer) {
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL: " + strings.Join(r.Failures, "; ")
	}
	fmt.Fprintf(w, "leafchaos: %s\n", verdict)
	fmt.Fprintf(w, "load %.0fs at %d req/s + %d pool takes/s (seed %d); MariaDB pause %.0fs\n",
		r.DurationS, r.Rate, r.PoolRate, r.Seed, r.DBPauseS)
	fmt.Fprintf(w, "requests %d, answered %d (%.3f%%), ids %d, DUPLICATES %d, FLOOR VIOLATIONS %d, refusals %d, slots dropped (clients busy) %d\n",
		r.Requests, r.OK, 100*r.Availability, r.IDs, r.Duplicates, r.FloorViolations, r.Refusals, r.Dropped)
	order := "strictly ordered"
	if r.MonoOrder != "" {
		order = "ORDER BROKEN: " + r.MonoOrder
	}
	fmt.Fprintf(w, "monotonic tag %q: %d calls through the client, %s (mono.CheckHistory)\n", MonoTag, r.MonoCalls, order)
	fmt.Fprintf(w, "errors by code: %s\n\n", codes(r.Errors))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "id space\tids\truns\tduplicates\tmin\tmax\tfalling windows")
	for _, s := range r.Spaces {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d of %d\n", s.Name, s.IDs, s.Runs, s.Duplicates, s.Min, s.Max, s.Falling, len(s.Trend))
	}
	_ = tw.Flush()
	for _, s := range r.Spaces {
		if len(s.Examples) > 0 {
			fmt.Fprintf(w, "  %s duplicates, e.g. %s\n", s.Name, strings.Join(s.Examples, ", "))
		}
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "subject / kind\tsent\tanswered\tavailability\tlongest gap\tgap ended at\terrors")
	for _, list := range [][]KindReport{r.Subjects, r.Kinds} {
		for _, k := range list {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f%%\t%.2fs\t%.1fs\t%s\n", k.Name, k.Sent, k.OK, 100*k.Availability,
				k.LongestGapS, k.GapEndedAtS, codes(k.Errors))
		}
		fmt.Fprintln(tw, "\t\t\t\t\t\t")
	}
	_ = tw.Flush()
	for _, k := range r.Subjects {
		for _, code := range slices.Sorted(maps.Keys(k.Messages)) {
			fmt.Fprintf(w, "  %s %s, e.g.: %s\n", k.Name, code, k.Messages[code])
		}
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tat\ttook\tready after\tin flight\tsent in window\tfailed\tfailed ≤timeout+1s\tvia client\terrors ended after\terrors\ttarget")
	for _, f := range r.Faults {
		fmt.Fprintf(tw, "%s\t%.1fs\t%.1fs\t%.2fs\t%d\t%d\t%d\t%d\t%d\t%.2fs\t%s\t%s\n", f.Kind, f.AtS, f.TookS, f.Recovery,
			f.InFlight, f.Sent, f.Failed, f.FailedSoon, f.ClientFailed, f.ErrorsEndedAfterS, codes(f.Errors), f.Target)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	r.writeByKind(w)
	fmt.Fprintln(w)
	r.writeAvail(w)
	fmt.Fprintln(w)
	r.writeNodes(w)
	for _, f := range r.Faults {
		for _, ex := range f.FloorExamples {
			fmt.Fprintf(w, "FLOOR: %s at %.1fs: %s\n", f.Kind, f.AtS, ex)
		}
		for _, n := range f.Notes {
			fmt.Fprintf(w, "note: %s at %.1fs: %s\n", f.Kind, f.AtS, n)
		}
		if f.PauseSegmentSent > 0 {
			fmt.Fprintf(w, "%s at %.1fs, for %.1fs: %d segment requests sent, %d failed: %.3f%% answered (from buffers)\n",
				f.Kind, f.AtS, f.pauseTo.Sub(f.pauseFrom).Seconds(), f.PauseSegmentSent, f.PauseSegmentFailed, 100*f.PauseShare)
		}
		if f.Error != "" {
			fmt.Fprintf(w, "fault %s at %.1fs failed: %s\n", f.Kind, f.AtS, f.Error)
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "PROBLEM: %s\n", p)
	}
}

// writeAvail prints, per fault kind of the main track and class of
// request, the share answered with ids during the fault, the worst
// recovery after its heal, and what the silent and refused requests were.
func (r *Report) writeAvail(w io.Writer) {
	if r.Stalled > 0 {
		fmt.Fprintf(w, "not judged: %d late or silent requests in flight while leafchaos itself stalled (%.1f s in all, each %v or more)\n",
			r.Stalled, r.StallS, stallMin)
	}
	fmt.Fprintf(w, "availability by fault kind: ids answered during the fault (from the strike to the heal) / recovery: from the heal until %.1f%% are\n", 100*goalShare)
	fmt.Fprintf(w, "answered with ids within %v for %v (worst injection; '>' not within the window to the next fault); goal: the recovery time named for the fault\n", goalLatency, recoverySustain)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "fault kind\theal\tgoal")
	for _, c := range classNames {
		fmt.Fprintf(tw, "\t%s", c)
	}
	fmt.Fprintln(tw, "\tmeanwhile (not ids: refused / silent)\tafter goal")
	heal := map[string]float64{}
	window := map[string]float64{}
	overlapped := map[string]bool{}
	for _, f := range r.Faults {
		heal[f.Kind] = max(heal[f.Kind], f.HealS)
		window[f.Kind] = max(window[f.Kind], f.WindowS-f.HealS)
		overlapped[f.Kind] = overlapped[f.Kind] || len(f.Overlapped) > 0
	}
	for _, k := range r.ByKind {
		if len(k.Avail) == 0 {
			continue
		}
		name := k.Kind
		if overlapped[k.Kind] {
			name += " *"
		}
		fmt.Fprintf(tw, "%s\t%.1fs\t%.0fs", name, heal[k.Kind], k.GoalS)
		var refused, silent int64
		judged, missed := 0, 0
		for _, c := range classNames {
			i := slices.IndexFunc(k.Avail, func(a KindAvail) bool { return a.Class == c })
			if i < 0 {
				fmt.Fprint(tw, "\t-")
				continue
			}
			a := k.Avail[i]
			refused += a.During.Refused
			silent += a.During.Silent
			judged += a.Judged
			missed += a.GoalMissed
			rec := fmt.Sprintf("%.1fs", a.MaxRecoveryS)
			if a.Unrecovered > 0 {
				rec = fmt.Sprintf(">%.1fs", window[k.Kind])
			}
			fmt.Fprintf(tw, "\t%.1f%% / %s", 100*a.During.OKShare(), rec)
		}
		verdict := "not judged"
		if judged > 0 {
			verdict = "met"
			if missed > 0 {
				verdict = fmt.Sprintf("MISSED %d of %d", missed, judged)
			}
		}
		fmt.Fprintf(tw, "\t%d / %d\t%s\n", refused, silent, verdict)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "after the last heal (from %.1fs to the end):", r.CalmFromS)
	for _, c := range r.Calm {
		fmt.Fprintf(w, " %s %.2f%% of %d", c.Class, 100*c.OKShare(), c.Sent)
	}
	fmt.Fprintln(w)
	for _, k := range r.ByKind {
		if overlapped[k.Kind] {
			fmt.Fprintln(w, "* another fault struck in its window (--overlap): the figures blend both")
			break
		}
	}
	for _, m := range r.GoalMisses {
		fmt.Fprintf(w, "GOAL: %s\n", m)
	}
}

// writeNodes prints what the prober found of each node.
func (r *Report) writeNodes(w io.Writer) {
	fmt.Fprintln(w, "nodes asked one by one (every second: /readyz, leaf.admin.status, a segment and a snowflake id from the node, its queue subscriptions in /connz):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "node\trounds\tready\tsaid it serves, did not: in faults\twhen healed\ttwo rounds in a row")
	for _, n := range r.Nodes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", n.Node, n.Rounds, n.ReadyRounds, counts(n.LiesInFaults), counts(n.LiesHealed), counts(n.Persistent))
	}
	_ = tw.Flush()
	for _, n := range r.Nodes {
		for _, ex := range n.Examples {
			fmt.Fprintf(w, "  %s: %s\n", n.Node, ex)
		}
	}
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// writeByKind prints the per-kind table.
func (r *Report) writeByKind(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault kind\tinjected\trequests\tanswered\tduplicates\trefusals\tfloor violations\tinjection errors")
	for _, k := range r.ByKind {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f%%\t%d\t%d\t%d\t%d\n", k.Kind, k.Injected, k.Requests, 100*k.AnsweredShare,
			k.Duplicates, k.Refusals, k.FloorViolations, k.Errors)
	}
	_ = tw.Flush()
}

func codes(m map[string]int64) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
