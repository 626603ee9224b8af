package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/httpapi"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// maxStatusTags bounds the tags of one node's status.
const maxStatusTags = 300

// status is this node's wire.NodeStatus (leaf.admin.status, the status page).
func (n *Node) status() wire.NodeStatus {
	st := n.who()
	st.Store = n.storeKind()
	st.Mono = n.MonoLeading()
	if n.serve.resp != nil {
		for _, e := range n.serve.resp.Endpoints() {
			st.Requests += uint64(e.NumRequests)
			st.Errors += uint64(e.NumErrors)
		}
		st.Errors += n.serve.resp.AsyncErrors()
	}
	refused := map[string]string{}
	for _, f := range n.failingTags() {
		if f.Refused() {
			refused[f.Tag] = f.Err.Error()
		}
	}
	if n.seg.engine != nil {
		rings := map[string]int{}
		var rs = n.seg.prod.Rings()
		for i, r := range rs {
			rings[r.Tag] = i
		}
		tags := n.seg.engine.Tags() // sorted
		if len(tags) > maxStatusTags {
			tags, st.TagsCut = tags[:maxStatusTags], true
		}
		for _, tag := range tags {
			ts, ok := n.seg.engine.State(tag.String())
			if !ok {
				continue
			}
			t := wire.TagStatus{Tag: tag.String(), Step: ts.Step, MinStep: ts.MinStep, Loads: ts.Loads, LastError: ts.LastError,
				Loading: ts.Loading, Current: ts.Current, Refused: refused[tag.String()], Headroom: ts.Headroom}
			if !ts.LastLoad.IsZero() {
				t.LastLoad = ts.LastLoad.UnixNano()
			}
			for i, sg := range ts.Segments {
				t.Buffers[i] = wire.BufferStatus{Value: sg.Value, Max: sg.Max, Step: sg.Step, Ready: sg.Ready}
			}
			if i, ok := rings[tag.String()]; ok {
				t.RingLen, t.RingCap, t.Taken = rs[i].Len, rs[i].Cap, rs[i].Stats.Takes
			}
			st.Tags = append(st.Tags, t)
		}
	}
	st.Snow = n.serve.sf.Status(n.SnowflakeJoined())
	st.NATSRTT = int64(n.conn.RTT())
	subjects, problems, err := n.readiness()
	st.Ready, st.Problems, st.Subjects = err == nil, problems, subjects
	return st
}

// Ready reports whether the node can answer every subject it serves:
// connected to NATS with a round trip within --max-nats-rtt, segment loads
// of tags without ids left are not failing (a tag refused for a reason of
// its own, tagRefused, does not count), and
// snowflake (when on) holds a worker id with an unexpired time lease. The
// error says what is wrong. ReadySubject tells one subject.
func (n *Node) Ready() error {
	_, _, err := n.readiness()
	return err
}

// ReadySubject is Ready for one subject (wire.SubjectSegment,
// wire.SubjectSnowflake, wire.SubjectMono, wire.SubjectPool): nil when the
// node serves it and can answer it. ok is false for a subject the node is
// not set up for.
func (n *Node) ReadySubject(subject string) (ok bool, err error) {
	subjects, _, _ := n.readiness()
	for _, s := range subjects {
		if s.Subject == subject {
			return true, s.Err()
		}
	}
	return false, nil
}

// failingTags are the tags whose loads fail now, sorted.
func (n *Node) failingTags() []segment.LoadFailure { return n.seg.health.Failing() }

// readiness is each subject's readiness, the node's problems (Ready's
// error, then warnings: some, like a snowflake node waiting for its
// clock, do not make the node unready, as it is out of the snowflake
// queue group meanwhile) and Ready's error.
func (n *Node) readiness() ([]wire.SubjectStatus, []string, error) {
	var fatal, problems []string
	connected := n.conn.NC() != nil && n.conn.NC().IsConnected()
	// offline are the problems of every subject the node answers through
	// NATS: not connected, or a round trip too slow for the answers to
	// reach clients in time (natsconn.Conn.RTT). They make each such
	// subject, and the node, not ready.
	var offline []string
	if !connected {
		offline = []string{"not connected to NATS"}
		fatal = append(fatal, offline...)
	} else if rtt, most := n.conn.RTT(), n.cfg.NATS.MaxRTT; most > 0 && rtt > most {
		offline = []string{fmt.Sprintf("NATS round trip %v above --max-nats-rtt %v", rtt.Round(time.Millisecond), most)}
		fatal = append(fatal, offline...)
	}
	slow := connected && len(offline) > 0
	var subjects []wire.SubjectStatus

	seg := wire.SubjectStatus{Subject: wire.SubjectSegment, Serving: n.serve.resp != nil && n.serve.resp.SegmentService() != nil, Problems: offline}
	if n.serve.resp != nil {
		seg.Probed = n.serve.resp.Probed(wire.SubjectSegment)
	}
	var state func(string) (segment.TagState, bool)
	if n.seg.engine != nil {
		state = n.seg.engine.State
	}
	segFatal, segWarn := segment.Problems(n.failingTags(), state)
	if n.serve.resp != nil && !seg.Serving && slow {
		segWarn = append(segWarn, n.serve.yield.Yielded(wire.SubjectSegment))
	}
	fatal = append(fatal, segFatal...)
	problems = append(problems, segWarn...)
	seg.Problems = append(append(seg.Problems, segFatal...), segWarn...)
	seg.Ready = seg.Serving && connected && !slow && len(segFatal) == 0
	subjects = append(subjects, seg)

	if n.serve.sf.Source() != nil {
		sf := wire.SubjectStatus{Subject: wire.SubjectSnowflake, Problems: offline}
		if n.serve.resp != nil {
			sf.Serving = n.serve.resp.SnowflakeService() != nil
			sf.Probed = n.serve.resp.Probed(wire.SubjectSnowflake)
		}
		msg, isFatal := n.serve.sf.Problem()
		if msg == "" && !sf.Serving && slow {
			msg = n.serve.yield.Yielded(wire.SubjectSnowflake)
		}
		switch {
		case isFatal:
			fatal, sf.Problems = append(fatal, msg), append(sf.Problems, msg)
		case msg != "":
			problems, sf.Problems = append(problems, msg), append(sf.Problems, msg)
		}
		sf.Ready = sf.Serving && connected && !slow && msg == ""
		subjects = append(subjects, sf)
	}
	if m := n.seg.mono.Load(); m != nil {
		serving, waiting, dry := m.ServingNow()
		ms := wire.SubjectStatus{Subject: wire.SubjectMono, Serving: m.Leading() > 0,
			Ready: serving > 0 && connected && !slow, Problems: offline, Probed: n.serve.resp.Probed(wire.SubjectMono)}
		for _, tag := range waiting {
			ms.Problems = append(ms.Problems, "mono: "+tag+": taking over, no ids until the last leader's lease has run out")
		}
		for _, why := range dry { // as a segment tag without ids: not ready
			ms.Problems = append(ms.Problems, "mono: "+why)
			fatal = append(fatal, "mono: "+why)
		}
		subjects = append(subjects, ms)
	}
	if n.seg.pool != nil {
		// The pool is topped up through JetStream and read from it by the
		// clients, not answered by this node: a slow round trip slows its
		// top-ups only.
		var pp []string
		if !connected {
			pp = offline
		}
		subjects = append(subjects, wire.SubjectStatus{Subject: wire.SubjectPool, Serving: true, Ready: connected, Problems: pp})
	}
	problems = append(fatal, problems...)
	if len(fatal) > 0 {
		return subjects, problems, errors.New(strings.Join(fatal, "; "))
	}
	return subjects, problems, nil
}

// httpAPI is Leaf's HTTP API, /readyz and the live status page of every
// node (httpapi), on this node's engines.
func (n *Node) httpAPI() (http.Handler, error) {
	cfg := httpapi.Config{
		Segment: n.seg.prod.Segment,
		Layout:  n.serve.sf.Layout(),
		Status: func(ctx context.Context) ([]wire.NodeStatus, error) {
			return ask.Status(ctx, n.conn.NC(), "", 300*time.Millisecond) // every region's nodes, as leafctl status
		},
		Rows:         httpapi.StoreRows(n.seg.store),
		Ready:        n.Ready,
		ReadySubject: n.ReadySubject,
		Clock:        n.clock,
		Logger:       n.log,
	}
	if r := n.serve.sf.Ring(); r != nil {
		cfg.Snowflake = r.Next
	}
	cfg.Mono = func(ctx context.Context, tag wire.Tag, dst []int64) error {
		return ask.Mono(ctx, n.conn.NC(), n.clock, tag, dst)
	}
	cfg.Observe = n.met.ObserveHTTP
	return httpapi.New(cfg)
}
