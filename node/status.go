package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/httpapi"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// maxStatusTags bounds the tags of one node's status.
const maxStatusTags = 300

// status is this node's wire.NodeStatus (leaf.admin.status, the status page).
func (n *Node) status() wire.NodeStatus {
	st := n.who()
	st.Store = n.storeKind()
	st.Mono = n.MonoLeading()
	if n.resp != nil {
		eps := n.resp.Service().Stats().Endpoints
		if sf := n.resp.SnowflakeService(); sf != nil {
			eps = append(eps, sf.Stats().Endpoints...)
		}
		for _, e := range eps {
			st.Requests += uint64(e.NumRequests)
			st.Errors += uint64(e.NumErrors)
		}
		st.Errors += n.resp.AsyncErrors()
	}
	if n.engine != nil {
		rings := map[string]int{}
		var rs = n.prod.Rings()
		for i, r := range rs {
			rings[r.Tag] = i
		}
		tags := n.engine.Tags() // sorted
		if len(tags) > maxStatusTags {
			tags, st.TagsCut = tags[:maxStatusTags], true
		}
		for _, tag := range tags {
			ts, ok := n.engine.State(tag.String())
			if !ok {
				continue
			}
			t := wire.TagStatus{Tag: tag.String(), Step: ts.Step, MinStep: ts.MinStep, Loads: ts.Loads, LastError: ts.LastError,
				Loading: ts.Loading, Current: ts.Current}
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
	if n.sf.src != nil {
		l := n.sf.layout
		sf := &wire.SnowflakeStatus{
			State:      n.sf.src.State().String(),
			Worker:     n.sf.src.Worker(),
			Registry:   n.cfg.Registry.Kind,
			Layout:     l.String(),
			Expires:    l.Expires().UnixNano(),
			Joined:     n.SnowflakeJoined(),
			PeerOffset: n.view.offset.Load(),
		}
		if c := n.sf.claim.Load(); c >= 0 {
			sf.Claim = &c
		}
		if lease := n.sf.src.Leased(); !lease.IsZero() {
			sf.LeaseUntil = lease.UnixNano()
		}
		past := n.sf.src.Past()
		now := n.clock.Now()
		for w, until := range n.sf.diskPast { // held before a restart
			if w != sf.Worker && until.After(now) && until.After(past[w]) {
				past[w] = until
			}
		}
		for w, until := range past {
			sf.Past = append(sf.Past, wire.WorkerLease{Worker: w, Until: until.UnixNano()})
		}
		sort.Slice(sf.Past, func(i, j int) bool { return sf.Past[i].Worker < sf.Past[j].Worker })
		if n.sf.ring != nil {
			rs := n.sf.ring.Stats()
			sf.RingLen, sf.RingCap, sf.Taken = rs.Len, rs.Cap, rs.Served
		}
		st.Snow = sf
	}
	problems, err := n.readiness()
	st.Ready, st.Problems = err == nil, problems
	return st
}

// Ready reports whether the node can answer: connected to NATS, segment
// loads of tags without ids left are not failing, and snowflake (when on)
// holds a worker id with an unexpired time lease. The error says what is
// wrong.
func (n *Node) Ready() error {
	_, err := n.readiness()
	return err
}

// readiness is Ready's error plus every problem worth showing (some, like
// a snowflake node waiting for its clock, do not make the node unready: it
// is out of the snowflake queue group meanwhile).
func (n *Node) readiness() ([]string, error) {
	var fatal, problems []string
	if n.nc == nil || !n.nc.IsConnected() {
		fatal = append(fatal, "not connected to NATS")
	}
	n.health.mu.Lock()
	failing := make(map[string]storeFail, len(n.health.fails))
	for tag, f := range n.health.fails {
		failing[tag] = f
	}
	n.health.mu.Unlock()
	tags := make([]string, 0, len(failing))
	for tag := range failing {
		tags = append(tags, tag)
	}
	sort.Strings(tags)
	for _, tag := range tags {
		f := failing[tag]
		msg := fmt.Sprintf("segment store: loads of %s failing (%d times since %s)", tag, f.n, f.since.UTC().Format(time.RFC3339))
		if ts, ok := n.engine.State(tag); ok && !ts.Segments[0].Ready && !ts.Segments[1].Ready {
			fatal = append(fatal, msg+", no ids left")
		} else {
			problems = append(problems, msg+", still serving from buffers")
		}
	}
	if n.sf.src != nil {
		switch st := n.sf.src.State(); st {
		case snowflake.StateServing:
			if lease := n.sf.src.Leased(); n.sf.now().After(lease) {
				fatal = append(fatal, fmt.Sprintf("snowflake: time lease expired at %s (worker registry unreachable?)", lease.UTC().Format(time.RFC3339)))
			}
		case snowflake.StateLost, snowflake.StateClosed:
			fatal = append(fatal, "snowflake: "+st.String()+": no worker id")
		default:
			problems = append(problems, "snowflake: "+st.String()+": out of the queue group until the clock catches up")
		}
	}
	problems = append(fatal, problems...)
	if len(fatal) > 0 {
		return problems, errors.New(strings.Join(fatal, "; "))
	}
	return problems, nil
}

// httpAPI is Leaf's HTTP API, /readyz and the live status page of every
// node (httpapi), on this node's engines.
func (n *Node) httpAPI() (http.Handler, error) {
	cfg := httpapi.Config{
		Segment: n.prod.Segment,
		Layout:  n.sf.layout,
		Status: func(ctx context.Context) ([]wire.NodeStatus, error) {
			return ask.Status(ctx, n.nc, 300*time.Millisecond)
		},
		Rows:   httpapi.StoreRows(n.store),
		Ready:  n.Ready,
		Clock:  n.clock,
		Logger: n.log,
	}
	if n.sf.ring != nil {
		cfg.Snowflake = n.sf.ring.Next
	}
	cfg.Mono = n.askMono
	cfg.Observe = n.met.observeHTTP
	return httpapi.New(cfg)
}
