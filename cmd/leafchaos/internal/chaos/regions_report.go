package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"
)

// RegionsReport is what a many-regions run found.
type RegionsReport struct {
	Regions          int           `json:"regions"`
	LeafdsPerRegion  int           `json:"leafds_per_region"`
	ServersPerRegion int           `json:"servers_per_region"`
	GatewayLatency   time.Duration `json:"gateway_latency_ns"` // each way, on every gateway link
	RegionFor        time.Duration `json:"region_for_ns"`
	Seed             int64         `json:"seed"`
	Started, Ended   time.Time
	// Calm is each region's requests before the first fault.
	Calm []RegionWindow `json:"calm"`
	// RTT is the harness's probes: from a region's client to a responder
	// in the same region (From = To) or across the gateways, in the calm.
	RTT    []RegionRTT         `json:"rtt"`
	Faults []RegionFaultResult `json:"faults"`
	// Whole run, per region.
	Total []RegionWindow `json:"total"`
	// Dropped is each region's load slots that no worker was free for:
	// while requests time out, fewer are sent than the rate asks.
	Dropped    []int64              `json:"dropped"`
	Spaces     map[string]dupResult `json:"spaces"`
	IDs        int64                `json:"ids"`
	Duplicates int64                `json:"duplicates"`
	Problems   []string             `json:"problems,omitempty"`
	Failures   []string             `json:"failures,omitempty"`
	Pass       bool                 `json:"pass"`
}

// RegionWindow is one region's clients' requests in a window of time.
type RegionWindow struct {
	Region string `json:"region"`
	Sent   int64  `json:"sent"`
	OK     int64  `json:"ok"`
	Fast   int64  `json:"fast"` // ids within goalLatency
	// InRegion is the answers with an id of the client's own region;
	// their latency is P50 and P99.
	InRegion int64         `json:"in_region"`
	P50      time.Duration `json:"p50_ns"`
	P99      time.Duration `json:"p99_ns"`
	// CrossP50 is the median latency of the answers from another region.
	CrossP50 time.Duration `json:"cross_p50_ns,omitempty"`
}

// Answered is the share of the requests sent that got ids.
func (w RegionWindow) Answered() float64 {
	if w.Sent == 0 {
		return 0
	}
	return float64(w.OK) / float64(w.Sent)
}

// FastShare is the share of the requests sent that got ids within
// goalLatency (1 with none sent).
func (w RegionWindow) FastShare() float64 { return shareOf(w.Fast, w.Sent) }

// regionRecoveryGoal is the time from a region fault's heal (the links
// back, or the killed servers restarted) to full service that the
// many-regions mode judges, for every region: the claim TTL plus
// --lease-ahead, as for a cut link in one region. A cut or a kill costs
// JetStream's meta group (one for the whole super-cluster) its leader
// for a few seconds after the heal, and what needs it (the message gets of
// a worker registration, a range take that must read its key) waits that
// out; a restarted leafd waits out the lease a stopped one may have had.
const regionRecoveryGoal = claimTTL + leaseAhead

// RegionAfter is one region's clients' requests from a fault's heal to
// the next fault (or the end of the load).
type RegionAfter struct {
	Region string       `json:"region"`
	After  RegionWindow `json:"after"`
	// RecoveryS: from the heal to full service (goalShare within
	// goalLatency for recoverySustain, or the rest of the stretch if
	// shorter but at least minJudged); Recovered false: none.
	RecoveryS float64 `json:"recovery_s"`
	Recovered bool    `json:"recovered"`
	// AfterGoal: sent from the heal plus regionRecoveryGoal to the next
	// fault; Judged: that stretch was at least minJudged long and held a
	// request; GoalMet: judged and goalShare of it within goalLatency.
	AfterGoal RegionWindow `json:"after_goal"`
	Judged    bool         `json:"judged"`
	GoalMet   bool         `json:"goal_met"`
}

// regionAfter judges region i's requests recs after a heal at heal, up to
// end (ns since the load's start).
func regionAfter(name string, i int, recs []reqRec, heal, end int64) RegionAfter {
	a := RegionAfter{Region: name, After: window(name, i, recs, heal, end)}
	rec, ok := regionRecovery(recs, heal, end)
	a.RecoveryS, a.Recovered = rec.Seconds(), ok
	from := heal + int64(regionRecoveryGoal)
	a.AfterGoal = window(name, i, recs, from, end)
	a.Judged = time.Duration(end-from) >= minJudged && a.AfterGoal.Sent > 0
	a.GoalMet = !a.Judged || a.AfterGoal.FastShare() >= goalShare
	return a
}

// regionRecovery is how long after heal the requests recs sent in [heal,
// end) reached full service: the start of the first availBucket from
// which the next recoverySustain (or the rest, if shorter but at least
// minJudged) has at least goalShare of them answered within goalLatency.
func regionRecovery(recs []reqRec, heal, end int64) (time.Duration, bool) {
	if end <= heal {
		return 0, false
	}
	bucket := int64(availBucket)
	n := int((end - heal + bucket - 1) / bucket)
	sent := make([]int64, n+1) // prefix sums over the buckets
	fast := make([]int64, n+1)
	for _, x := range recs {
		if x.at < heal || x.at >= end {
			continue
		}
		b := int((x.at-heal)/bucket) + 1
		sent[b]++
		if x.ok && x.lat <= int64(goalLatency) {
			fast[b]++
		}
	}
	for b := 1; b <= n; b++ {
		sent[b] += sent[b-1]
		fast[b] += fast[b-1]
	}
	w := int(recoverySustain / availBucket)
	for b := 0; b < n; b++ {
		j := min(b+w, n)
		if time.Duration(min(int64(j-b)*bucket, end-heal-int64(b)*bucket)) < minJudged {
			break
		}
		s, f := sent[j]-sent[b], fast[j]-fast[b]
		if float64(f) >= goalShare*float64(s) {
			return time.Duration(int64(b) * bucket), true
		}
	}
	return 0, false
}

// RegionRTT is the probes from one region to one region's responder.
type RegionRTT struct {
	From  string        `json:"from"`
	To    string        `json:"to"`
	Probe int           `json:"probes"`
	OK    int           `json:"ok"`
	P50   time.Duration `json:"p50_ns"`
	P99   time.Duration `json:"p99_ns"`
}

// RegionFaultResult is one fault of the many-regions mode.
type RegionFaultResult struct {
	Fault  string        `json:"fault"`
	Region string        `json:"region"`
	Target string        `json:"target"`
	From   time.Duration `json:"from_ns"` // since the load's start
	To     time.Duration `json:"to_ns"`   // the heal (restart) began
	// Recovery: from the heal until the region was whole again (gateways
	// up; for a kill, its leafds ready and its clients home).
	Recovery time.Duration `json:"recovery_ns"`
	Err      string        `json:"err,omitempty"`
	// During is each region's requests sent between From and To.
	During []RegionWindow `json:"during"`
	// Phases: for a kill, During split at the nats-server's kill: first
	// the region's leafds down (its clients' requests cross a gateway),
	// then its NATS too (its clients fail over to another region's).
	Phases     []RegionPhase `json:"phases,omitempty"`
	natsKilled time.Duration
	// After is each region's requests from To to the next fault (or the
	// end of the load), judged against regionRecoveryGoal.
	After []RegionAfter `json:"after"`
	// DuplicatesAfter: duplicates over every id space, after the calm
	// that follows the fault.
	DuplicatesAfter int64 `json:"duplicates_after"`
}

// RegionPhase is each region's requests in a part of a fault.
type RegionPhase struct {
	Name   string         `json:"name"`
	During []RegionWindow `json:"during"`
}

// window sums region i's requests sent in [from, to).
func window(name string, i int, recs []reqRec, from, to int64) RegionWindow {
	w := RegionWindow{Region: name}
	var in, cross []int64
	for _, x := range recs {
		if x.at < from || x.at >= to {
			continue
		}
		w.Sent++
		if !x.ok {
			continue
		}
		w.OK++
		if x.lat <= int64(goalLatency) {
			w.Fast++
		}
		if int(x.by) == i {
			in = append(in, x.lat)
		} else {
			cross = append(cross, x.lat)
		}
	}
	w.InRegion = int64(len(in))
	w.P50, w.P99 = time.Duration(quantile(in, 0.5)), time.Duration(quantile(in, 0.99))
	w.CrossP50 = time.Duration(quantile(cross, 0.5))
	return w
}

// quantile is the q-quantile of xs (sorted in place), 0 for none.
func quantile(xs []int64, q float64) int64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[min(int(q*float64(len(xs))), len(xs)-1)]
}

// finish fills the report from the records and judges it.
func (rr *regionsRun) finish(rep *RegionsReport, calmEnd time.Duration) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	end := rep.Ended.Sub(rr.t0).Nanoseconds() + 1
	for i, r := range rr.rs {
		rep.Calm = append(rep.Calm, window(r.name, i, rr.recs[i], 0, calmEnd.Nanoseconds()))
		rep.Total = append(rep.Total, window(r.name, i, rr.recs[i], 0, end))
		rep.Dropped = append(rep.Dropped, r.dropped.Load())
	}
	for _, from := range rr.rs {
		for _, to := range rr.rs {
			rt := RegionRTT{From: from.name, To: to.name}
			var lat []int64
			for _, x := range rr.rtts {
				if int(x.from) != from.idx || int(x.to) != to.idx || x.at >= calmEnd.Nanoseconds() {
					continue
				}
				rt.Probe++
				if x.ok {
					rt.OK++
					lat = append(lat, x.lat)
				}
			}
			rt.P50, rt.P99 = time.Duration(quantile(lat, 0.5)), time.Duration(quantile(lat, 0.99))
			rep.RTT = append(rep.RTT, rt)
		}
	}
	for fi := range rep.Faults {
		f := &rep.Faults[fi]
		next := end
		if fi+1 < len(rep.Faults) {
			next = rep.Faults[fi+1].From.Nanoseconds()
		}
		for i, r := range rr.rs {
			w := window(r.name, i, rr.recs[i], f.From.Nanoseconds(), f.To.Nanoseconds())
			f.During = append(f.During, w)
			a := regionAfter(r.name, i, rr.recs[i], f.To.Nanoseconds(), next)
			f.After = append(f.After, a)
			if f.Err == "" && !a.GoalMet {
				rep.Failures = append(rep.Failures, fmt.Sprintf("availability: %s on %s at %v: region %s %.2f%% of %d requests answered within %v from %v after the heal to the next fault (goal %.1f%%)",
					f.Fault, f.Region, f.From.Round(time.Millisecond), r.name, 100*a.AfterGoal.FastShare(), a.AfterGoal.Sent,
					goalLatency, regionRecoveryGoal, 100*goalShare))
			}
			if f.natsKilled > 0 {
				if len(f.Phases) == 0 {
					f.Phases = []RegionPhase{{Name: "leafds down"}, {Name: "leafds and NATS down"}}
				}
				f.Phases[0].During = append(f.Phases[0].During, window(r.name, i, rr.recs[i], f.From.Nanoseconds(), f.natsKilled.Nanoseconds()))
				f.Phases[1].During = append(f.Phases[1].During, window(r.name, i, rr.recs[i], f.natsKilled.Nanoseconds(), f.To.Nanoseconds()))
			}
			if f.Err != "" {
				continue
			}
			if f.Fault == FaultRegionKill {
				// The killed region's clients are answered across a
				// gateway (its leafds down), then by another region's
				// servers (its NATS down too); the others as before.
				for _, ph := range f.Phases {
					pw := ph.During[i]
					if pw.Sent > 0 && pw.Answered() < regionsMinAnswered {
						rep.Failures = append(rep.Failures, fmt.Sprintf("%s on %s (%s): region %s answered %.1f%% of %d requests (want ≥ %.0f%%)",
							f.Fault, f.Region, ph.Name, r.name, 100*pw.Answered(), pw.Sent, 100*regionsMinAnswered))
					}
				}
				continue
			}
			if w.Sent == 0 || w.Answered() < regionsMinAnswered {
				rep.Failures = append(rep.Failures, fmt.Sprintf("%s on %s: region %s answered %.1f%% of %d requests (want ≥ %.0f%%)",
					f.Fault, f.Region, r.name, 100*w.Answered(), w.Sent, 100*regionsMinAnswered))
			}
			if w.OK > w.InRegion {
				rep.Failures = append(rep.Failures, fmt.Sprintf("%s on %s: region %s got %d answers from another region while the gateways were down",
					f.Fault, f.Region, r.name, w.OK-w.InRegion))
			}
		}
		if f.Err != "" {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s on %s: %s", f.Fault, f.Region, f.Err))
		}
	}
	rep.Spaces = map[string]dupResult{}
	for name, s := range rr.spaces {
		d := s.check(nil)
		rep.Spaces[name] = d
		rep.IDs += d.IDs
		rep.Duplicates += d.Duplicates
	}
	if rep.Duplicates > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d duplicate ids", rep.Duplicates))
	}
	rr.c.mu.Lock()
	rep.Problems = slices.Clone(rr.c.problems)
	rr.c.mu.Unlock()
	for _, p := range rep.Problems {
		rep.Failures = append(rep.Failures, firstLine(p))
	}
	rep.Pass = len(rep.Failures) == 0
}

// WriteJSON writes the report to path.
func (r *RegionsReport) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

// WriteText writes the report for people.
func (r *RegionsReport) WriteText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("leafchaos regions: %d regions, %d nats-server and %d leafd each, gateway latency %v each way, seed %d, %v\n",
		r.Regions, max(r.ServersPerRegion, 1), r.LeafdsPerRegion, r.GatewayLatency, r.Seed, r.Ended.Sub(r.Started).Round(time.Second))
	row := func(x RegionWindow) {
		p("  %-4s sent %7d  answered %6.2f%%  in-region %7d  p50 %6s ms  p99 %7s ms  cross-region p50 %6s ms\n",
			x.Region, x.Sent, 100*x.Answered(), x.InRegion, ms(x.P50), ms(x.P99), ms(x.CrossP50))
	}
	p("calm (before the first fault), answers with an id of the client's own region:\n")
	for _, x := range r.Calm {
		row(x)
	}
	p("round trip of the harness's probes (calm), client region → responder region:\n")
	for _, x := range r.RTT {
		p("  %s → %s  %d/%d  p50 %6s ms  p99 %6s ms\n", x.From, x.To, x.OK, x.Probe, ms(x.P50), ms(x.P99))
	}
	for _, f := range r.Faults {
		p("%s on %s at %v for %v (recovery %v)%s: %s\n", f.Fault, f.Region, f.From.Round(time.Millisecond),
			(f.To - f.From).Round(time.Millisecond), f.Recovery.Round(time.Millisecond), errSuffix(f.Err), f.Target)
		for _, x := range f.During {
			row(x)
		}
		for _, ph := range f.Phases {
			p(" %s:\n", ph.Name)
			for _, x := range ph.During {
				row(x)
			}
		}
		if len(f.After) > 0 {
			p(" after the heal, to the next fault (full service: %.1f%% within %v; judged from %v after the heal):\n",
				100*goalShare, goalLatency, regionRecoveryGoal)
		}
		for _, a := range f.After {
			row(a.After)
			rec := "not reached"
			if a.Recovered {
				rec = fmt.Sprintf("after %.1fs", a.RecoveryS)
			}
			judged := "not judged (under " + minJudged.String() + ")"
			switch {
			case a.Judged && a.GoalMet:
				judged = fmt.Sprintf("%.2f%% of %d: met", 100*a.AfterGoal.FastShare(), a.AfterGoal.Sent)
			case a.Judged:
				judged = fmt.Sprintf("%.2f%% of %d: MISSED", 100*a.AfterGoal.FastShare(), a.AfterGoal.Sent)
			}
			p("       full service %s; from the recovery goal on %s\n", rec, judged)
		}
		p("  duplicates after it: %d\n", f.DuplicatesAfter)
	}
	p("whole run:\n")
	for _, x := range r.Total {
		row(x)
	}
	p("  load slots dropped (every worker busy), per region: %v\n", r.Dropped)
	names := make([]string, 0, len(r.Spaces))
	for n := range r.Spaces {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		d := r.Spaces[n]
		p("  %-12s ids %9d  duplicates %d\n", n, d.IDs, d.Duplicates)
	}
	p("ids %d, duplicates %d\n", r.IDs, r.Duplicates)
	for _, f := range r.Failures {
		p("FAIL: %s\n", f)
	}
	if r.Pass {
		p("PASS\n")
	} else {
		p("FAILED\n")
	}
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return " ERROR " + e
}
