package chaos

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Classes of request for availability: what a user asks for, bare (a NATS
// request with no retry) or through the Go client (retries, failover).
const (
	clsSegment = iota
	clsSnowflake
	clsClientSegment
	clsClientSnowflake
	clsMono
	clsPool
	numClasses
)

var classNames = [numClasses]string{"segment", "snowflake", "client-segment", "client-snowflake", "mono", "pool"}

// Availability goals (invariant 8 of DESIGN.md): after a fault heals, full
// service — at least goalShare of the requests sent answered with ids
// within goalLatency — returns within the recovery time named for that
// fault (recoveryGoal) and holds until the next fault.
const (
	goalShare   = 0.999
	goalLatency = time.Second
	// claimTTL and leaseAhead are leafd's worker claim TTL (KV lease and
	// ZooKeeper session) and its default --lease-ahead: a node that lost
	// its claim in a fault waits them out before it serves snowflake ids.
	claimTTL   = 10 * time.Second
	leaseAhead = 3 * time.Second
	// goalSustain: in --availability-goals runs the next fault waits this
	// long past the previous one's recovery time, so each goal is judged
	// on at least this much load.
	goalSustain = 10 * time.Second
	// minJudged: a stretch shorter than this after a fault's recovery time
	// is reported, not judged (a quick run packs its faults).
	minJudged = 2 * time.Second
	// recoverySustain: full service counts from a moment only if it
	// lasts this long (recovery).
	recoverySustain = 5 * time.Second
	// availBucket is the resolution of the availability timeline.
	availBucket = 100 * time.Millisecond
)

// recoveryGoal is the time from a fault's heal to full service that the
// README names for kind. A fault that can cost a node its worker claim
// (NATS, ZooKeeper, a frozen node, a cut link) gets claim TTL +
// --lease-ahead: the claim lapses and is taken again within that. The
// others leave the claims alone: the remaining nodes serve throughout, and
// the restarted one was ready before the heal.
func recoveryGoal(kind string) time.Duration {
	switch {
	case kind == FaultKillLeafd, kind == FaultPauseDB, strings.HasPrefix(kind, "hosts-"), strings.HasPrefix(kind, "clock-"):
		return 5 * time.Second
	}
	return claimTTL + leaseAhead
}

// availTL counts the outcome of every request by class and by the 100 ms
// bucket it was sent in. Requests still in flight when a fault struck are
// counted apart (straddled): they belong neither to the calm before it nor
// to its window. Safe for concurrent use.
type availTL struct {
	t0     int64 // unix ns
	bucket int64 // ns
	c      [numClasses][]availCounts

	// The requests not answered with ids within goalLatency, and the
	// stretches in which leafchaos itself did not run (watchStalls): a
	// request in flight across one is not judged (stalled), as its
	// lateness may be the harness's own.
	mu     sync.Mutex
	late   []lateReq
	stalls [][2]int64 // unix ns [from, to)
}

type lateReq struct {
	class      int
	sent, done int64
	silent     bool
}

// stallMin is the lag of leafchaos's own clock ticks from which it counts
// itself stalled: its goroutines did not run, and a request's answer may
// have waited for it rather than for the node.
const stallMin = 250 * time.Millisecond

type availCounts struct {
	sent      atomic.Int64 // not straddled
	ok        atomic.Int64 // ids
	fast      atomic.Int64 // ids within goalLatency
	refused   atomic.Int64 // an error answer: a wire code, no responders, an empty pool
	silent    atomic.Int64 // no answer within the deadline
	straddled atomic.Int64 // in flight when a fault struck
	stalled   atomic.Int64 // late, in flight while leafchaos itself stalled (excludeStalls)
}

func newAvailTL(t0 int64, span time.Duration) *availTL {
	tl := &availTL{t0: t0, bucket: int64(availBucket)}
	n := int(span/availBucket) + 2
	for c := range numClasses {
		tl.c[c] = make([]availCounts, n)
	}
	return tl
}

func (tl *availTL) index(t int64) int {
	return min(max(int((t-tl.t0)/tl.bucket), 0), len(tl.c[0])-1)
}

// Outcome categories of a code (see stats.go): "" is ids.
func category(code string) string {
	switch code {
	case "":
		return "ok"
	case CodeTimeout, CodeClientUnavailable, CodeOther:
		return "silent"
	case CodeBadReply:
		return "bad"
	}
	return "refused"
}

func (tl *availTL) record(class int, sent, done int64, code string, straddled bool) {
	b := &tl.c[class][tl.index(sent)]
	if straddled {
		b.straddled.Add(1)
		return
	}
	b.sent.Add(1)
	switch category(code) {
	case "ok":
		b.ok.Add(1)
		if time.Duration(done-sent) <= goalLatency {
			b.fast.Add(1)
		} else {
			tl.noteLate(lateReq{class, sent, done, false})
		}
	case "silent":
		b.silent.Add(1)
		tl.noteLate(lateReq{class, sent, done, true})
	case "refused":
		b.refused.Add(1)
	}
}

func (tl *availTL) noteLate(r lateReq) {
	tl.mu.Lock()
	tl.late = append(tl.late, r)
	tl.mu.Unlock()
}

// watchStalls ticks every 20 ms until ctx ends and notes each stretch in
// which a tick came stallMin late or more: leafchaos itself did not run
// (the machine starved it), and the answers of that stretch cannot be
// timed.
func (tl *availTL) watchStalls(ctx context.Context) {
	const every = 20 * time.Millisecond
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if now.Sub(last) >= every+stallMin {
			tl.mu.Lock()
			tl.stalls = append(tl.stalls, [2]int64{last.UnixNano(), now.UnixNano()})
			tl.mu.Unlock()
		}
		last = now
	}
}

// LateRequest is one request judged late (ids after goalLatency) or silent
// (none within the deadline), for finding what a node did at that moment.
type LateRequest struct {
	Class  string  `json:"class"`
	SentS  float64 `json:"sent_s"` // since the start of the load
	TookS  float64 `json:"took_s"`
	Silent bool    `json:"silent,omitempty"`
}

// maxLateListed bounds the late requests listed in the report (a dead
// cluster makes every request late).
const maxLateListed = 5000

// excludeStalls takes out of the counts every late or silent request that
// was in flight across a stall of leafchaos itself, counting it stalled
// instead, and returns how many, how long leafchaos stalled in all, and
// the late requests left judged (the first maxLateListed). Call it once,
// when the load has ended, before the sums.
func (tl *availTL) excludeStalls() (excluded int64, stalled time.Duration, judged []LateRequest) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, st := range tl.stalls {
		stalled += time.Duration(st[1] - st[0])
	}
	slices.SortFunc(tl.late, func(a, b lateReq) int { return cmp.Compare(a.sent, b.sent) })
late:
	for _, r := range tl.late {
		for _, st := range tl.stalls {
			if r.sent < st[1] && st[0] < r.done {
				b := &tl.c[r.class][tl.index(r.sent)]
				b.sent.Add(-1)
				if r.silent {
					b.silent.Add(-1)
				} else {
					b.ok.Add(-1)
				}
				b.stalled.Add(1)
				excluded++
				continue late
			}
		}
		if len(judged) < maxLateListed {
			judged = append(judged, LateRequest{Class: classNames[r.class], SentS: time.Duration(r.sent - tl.t0).Seconds(),
				TookS: time.Duration(r.done - r.sent).Seconds(), Silent: r.silent})
		}
	}
	tl.late = nil
	return excluded, stalled, judged
}

// Share is what the requests of one class sent in a stretch of time got.
type Share struct {
	Sent    int64 `json:"sent"`
	OK      int64 `json:"ok"`      // ids within the deadline
	Fast    int64 `json:"fast"`    // ids within 1 s
	Refused int64 `json:"refused"` // an error code: 503, 404, no responders, pool empty…
	Silent  int64 `json:"silent"`  // no answer within the deadline
	// Straddled: in flight when a fault struck, counted nowhere else.
	Straddled int64 `json:"straddled,omitempty"`
	// Stalled: late or silent while leafchaos itself did not run (a
	// stall of stallMin or more), counted nowhere else.
	Stalled int64 `json:"stalled,omitempty"`
}

func (s *Share) add(o Share) {
	s.Sent += o.Sent
	s.OK += o.OK
	s.Fast += o.Fast
	s.Refused += o.Refused
	s.Silent += o.Silent
	s.Straddled += o.Straddled
	s.Stalled += o.Stalled
}

// OKShare is the share of requests answered with ids (1 with none sent).
func (s Share) OKShare() float64 { return shareOf(s.OK, s.Sent) }

// FastShare is the share answered with ids within 1 s.
func (s Share) FastShare() float64 { return shareOf(s.Fast, s.Sent) }

// AnswerShare is the share answered at all: ids or an error code.
func (s Share) AnswerShare() float64 { return shareOf(s.Sent-s.Silent, s.Sent) }

func shareOf(a, b int64) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

// sum adds the buckets of class that lie wholly in [from, to). A bucket
// across either end is left out: a request sent after the next fault
// struck (in the bucket it struck in) would be judged with the calm before
// it, and one sent before the heal with the time after it.
func (tl *availTL) sum(class int, from, to int64) Share {
	var s Share
	if to <= from {
		return s
	}
	for i := tl.first(from); i < tl.upTo(class, to); i++ {
		b := &tl.c[class][i]
		s.add(Share{Sent: b.sent.Load(), OK: b.ok.Load(), Fast: b.fast.Load(), Refused: b.refused.Load(),
			Silent: b.silent.Load(), Straddled: b.straddled.Load(), Stalled: b.stalled.Load()})
	}
	return s
}

// upTo is the bucket after the last that ends at or before t.
func (tl *availTL) upTo(class int, t int64) int {
	i := 0
	if t > tl.t0 {
		i = int((t - tl.t0) / tl.bucket)
	}
	return min(i, len(tl.c[class]))
}

// first is the first bucket starting at or after t.
func (tl *availTL) first(t int64) int {
	i := tl.index(t)
	if tl.t0+int64(i)*tl.bucket < t {
		i++
	}
	return i
}

// recovery is how long after heal the requests of class reached full
// service within [heal, end): the start of the first bucket from which
// the next recoverySustain (or the rest of the window, if shorter but at
// least minJudged) has at least goalShare answered with ids within
// goalLatency. ok is false when there is no such moment.
func (tl *availTL) recovery(class int, heal, end int64) (after time.Duration, ok bool) {
	lo, hi := tl.first(heal), tl.upTo(class, end)
	if hi < lo {
		return 0, false
	}
	// prefix sums of sent and fast over [lo, hi)
	sent := make([]int64, hi-lo+1)
	fast := make([]int64, hi-lo+1)
	for i := lo; i < hi; i++ {
		b := &tl.c[class][i]
		sent[i-lo+1] = sent[i-lo] + b.sent.Load()
		fast[i-lo+1] = fast[i-lo] + b.fast.Load()
	}
	w := int(recoverySustain / availBucket)
	minW := int(minJudged / availBucket)
	for i := lo; i < hi; i++ {
		j := min(i+w, hi)
		if j-i < minW {
			break
		}
		n, f := sent[j-lo]-sent[i-lo], fast[j-lo]-fast[i-lo]
		if float64(f) >= goalShare*float64(n) {
			at := tl.t0 + int64(i)*tl.bucket
			return time.Duration(max(at-heal, 0)), true
		}
	}
	return 0, false
}

// ClassAvail is one class of request around one injection of a fault.
type ClassAvail struct {
	Class  string `json:"class"`
	During Share  `json:"during"` // sent from the fault to its heal
	After  Share  `json:"after"`  // sent from the heal to the next fault (or the end)
	// RecoveryS: from the heal to full service (goalShare within 1 s for
	// recoverySustain); Recovered false: not within the window.
	RecoveryS float64 `json:"recovery_s"`
	Recovered bool    `json:"recovered"`
	// AfterGoal: sent from the heal plus the fault's recovery goal to the
	// next fault; Judged: that stretch was at least minJudged long and
	// held a request.
	AfterGoal Share `json:"after_goal"`
	Judged    bool  `json:"judged"`
	GoalMet   bool  `json:"goal_met"`
}

// availability fills fr.Avail from the timeline: heal is fr.done, the
// window ends at next (the next fault, or the end of the load).
func availability(tl *availTL, fr *FaultResult, next time.Time) {
	at, heal, end := fr.at.UnixNano(), fr.done.UnixNano(), next.UnixNano()
	heal = min(max(heal, at), end)
	goal := recoveryGoal(fr.Kind)
	fr.GoalS = goal.Seconds()
	fr.HealS = time.Duration(heal - at).Seconds()
	fr.Avail = nil
	for c := range numClasses {
		ca := ClassAvail{Class: classNames[c], During: tl.sum(c, at, heal), After: tl.sum(c, heal, end)}
		if ca.During.Sent+ca.After.Sent+ca.During.Straddled+ca.After.Straddled == 0 {
			continue
		}
		rec, ok := tl.recovery(c, heal, end)
		ca.RecoveryS, ca.Recovered = rec.Seconds(), ok
		from := heal + int64(goal)
		ca.AfterGoal = tl.sum(c, from, end)
		ca.Judged = time.Duration(end-from) >= minJudged && ca.AfterGoal.Sent > 0
		ca.GoalMet = !ca.Judged || ca.AfterGoal.FastShare() >= goalShare
		fr.Avail = append(fr.Avail, ca)
	}
}

// KindAvail is one class of request over every injection of a fault kind.
type KindAvail struct {
	Class  string `json:"class"`
	During Share  `json:"during"`
	After  Share  `json:"after"`
	// MaxRecoveryS: the longest time from a heal to full service;
	// Unrecovered counts the injections after which it did not return
	// within the window.
	MaxRecoveryS float64 `json:"max_recovery_s"`
	Unrecovered  int     `json:"unrecovered"`
	AfterGoal    Share   `json:"after_goal"`
	Judged       int     `json:"judged"`      // injections judged against the goal
	GoalMissed   int     `json:"goal_missed"` // of which missed
}

// summarizeAvail adds up the injections of one kind, class by class.
func summarizeAvail(faults []*FaultResult) []KindAvail {
	var out []KindAvail
	idx := map[string]int{}
	for _, fr := range faults {
		for _, ca := range fr.Avail {
			i, ok := idx[ca.Class]
			if !ok {
				i = len(out)
				idx[ca.Class] = i
				out = append(out, KindAvail{Class: ca.Class})
			}
			k := &out[i]
			k.During.add(ca.During)
			k.After.add(ca.After)
			k.AfterGoal.add(ca.AfterGoal)
			if ca.Recovered {
				k.MaxRecoveryS = max(k.MaxRecoveryS, ca.RecoveryS)
			} else {
				k.Unrecovered++
			}
			if ca.Judged {
				k.Judged++
				if !ca.GoalMet {
					k.GoalMissed++
				}
			}
		}
	}
	return out
}

// goalFailures lists every injection after which a class missed its goal.
func goalFailures(faults []*FaultResult) []string {
	var out []string
	for _, fr := range faults {
		for _, ca := range fr.Avail {
			if ca.Judged && !ca.GoalMet {
				out = append(out, fmt.Sprintf("availability: %s at %.1fs: %s %.2f%% answered within %v from %.0fs after the heal to the next fault (goal %.1f%%; %d sent, %d silent, %d refused)",
					fr.Kind, fr.AtS, ca.Class, 100*ca.AfterGoal.FastShare(), goalLatency, fr.GoalS, 100*goalShare,
					ca.AfterGoal.Sent, ca.AfterGoal.Silent, ca.AfterGoal.Refused))
			}
		}
	}
	return out
}
