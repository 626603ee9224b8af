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

	Requests     int64            `json:"requests"` // requests and pool takes sent
	OK           int64            `json:"ok"`
	Availability float64          `json:"availability"` // ok / requests
	IDs          int64            `json:"ids"`
	Duplicates   int64            `json:"duplicates"`
	Dropped      int64            `json:"dropped"` // schedule slots not sent: every client was busy
	Errors       map[string]int64 `json:"errors"`  // by code, all requests

	Spaces   []SpaceReport  `json:"id_spaces"`
	Subjects []KindReport   `json:"subjects"`
	Kinds    []KindReport   `json:"kinds"`
	Faults   []*FaultResult `json:"faults"`
	Problems []string       `json:"problems"` // unexpected exits, faults that could not be injected
}

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

// FaultResult is one injected fault and what the clients saw around it.
type FaultResult struct {
	Kind     string  `json:"kind"`
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

	at, done           time.Time
	pauseFrom, pauseTo time.Time
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func buildReport(ctx context.Context, cfg *Config, c *cluster, l *load, f *faulter, spaces map[string]*idSpace, t0, end time.Time) *Report {
	r := &Report{Started: t0, DurationS: end.Sub(t0).Seconds(), Rate: cfg.Rate, PoolRate: max(cfg.PoolRate, 0),
		Seed: cfg.Seed, DBPauseS: cfg.DBPause.Seconds(), Errors: map[string]int64{}, Dropped: l.dropped.Load(),
		Failures: []string{}, Problems: []string{}}
	if cfg.Keep {
		r.WorkDir = c.dir
	}
	// Id spaces and duplicates.
	for _, name := range slices.Sorted(maps.Keys(spaces)) {
		sp := spaces[name]
		res := sp.check()
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
	// Faults.
	f.mu.Lock()
	r.Faults = f.results
	f.mu.Unlock()
	tl := l.tl
	engines := []int{engSegment, engSnowflake, engPool}
	for i, fr := range r.Faults {
		to := end
		if i+1 < len(r.Faults) {
			to = r.Faults[i+1].at
		}
		prevFrom := int64(0) // start of the previous fault's window
		if i > 0 {
			prevFrom = r.Faults[i-1].at.UnixNano()
		}
		if fr.done.IsZero() {
			fr.done = end
		}
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
			inWindow := e.sent >= from && e.sent < upTo && (i+1 == len(r.Faults) || e.done <= upTo)
			inFlightAtStart := e.sent >= prevFrom && e.sent < from && e.done > from
			if !inWindow && !inFlightAtStart {
				continue
			}
			if fr.Errors == nil {
				fr.Errors, fr.Subjects = map[string]int64{}, map[string]int64{}
			}
			fr.Failed++
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
			fr.PauseShare = 1 - ratio(fr.PauseSegmentFailed, fr.PauseSegmentSent)
		}
	}
	// Verdict.
	c.mu.Lock()
	r.Problems = append(r.Problems, c.problems...)
	c.mu.Unlock()
	if r.Duplicates > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d duplicate ids", r.Duplicates))
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
	r.Pass = len(r.Failures) == 0
	return r
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
	fmt.Fprintf(w, "requests %d, answered %d (%.3f%%), ids %d, DUPLICATES %d, slots dropped (clients busy) %d\n",
		r.Requests, r.OK, 100*r.Availability, r.IDs, r.Duplicates, r.Dropped)
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
	for _, f := range r.Faults {
		if f.PauseSegmentSent > 0 {
			fmt.Fprintf(w, "MariaDB stopped at %.1fs for %.0fs: %d segment requests sent, %d failed: %.3f%% answered from buffers\n",
				f.AtS, r.DBPauseS, f.PauseSegmentSent, f.PauseSegmentFailed, 100*f.PauseShare)
		}
		if f.Error != "" {
			fmt.Fprintf(w, "fault %s at %.1fs failed: %s\n", f.Kind, f.AtS, f.Error)
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "PROBLEM: %s\n", p)
	}
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
