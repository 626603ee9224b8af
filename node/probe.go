package node

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/wire"
)

// probeEvery is how often a node probes each subject it serves.
var probeEvery = 5 * time.Second

// probeTimeout bounds one probe.
const probeTimeout = 2 * time.Second

// prober sends the node's self-probes (wire.ProbeToken, wire.ProbeHeader):
// every probeEvery one request on each subject the node serves, through the
// server, on the very subject and queue group that clients use.
//
// A probe through the queue group may be answered by any member, so the
// check that counts is on the receiving side: each node counts the probes
// its own subscriptions answered (SubjectStatus.Probed,
// leafmq_probes_answered_total). Every serving member probes at the same
// rate and NATS spreads them over the group, so a node receives about one
// probe per probeEvery per subject whatever the group's size; a node whose
// count stands still for minutes while it says it serves the subject does
// not get that subject's requests (a subscription the server dropped or
// refused, a handler that no longer runs), which a request or error rate
// cannot tell from a quiet subject. A probe to a node's own direct subject
// would test the connection, not the queue subscription that clients
// reach. A probe costs one small request per subject every few seconds
// and takes no id. Monotonic tags are plain subscriptions of their
// leader: a node probes the tags it leads, one per round.
type prober struct {
	n     *Node
	every time.Duration // probeEvery when the node started
	stop  chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex
	sent  map[probeKey]uint64 // probes this node sent, by subject and result
	round int                 // picks the monotonic tag of a round
}

type probeKey struct{ subject, result string }

// Results of a probe this node sent: some node answered (a ProbeReply, or
// an error reply from a node that does not know probes), or none did in
// time (no responders, a timeout).
const (
	probeAnswered = "answered"
	probeFailed   = "failed"
)

func (n *Node) startProber() {
	p := &prober{n: n, every: probeEvery, stop: make(chan struct{}), sent: map[probeKey]uint64{}}
	n.serve.probe = p
	n.life.stops.push("self-probes", func(context.Context) error { p.close(); return nil })
	p.wg.Add(1)
	go p.run()
}

func (p *prober) run() {
	defer p.wg.Done()
	t := p.n.clock.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C():
			p.probeAll()
		}
	}
}

func (p *prober) close() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
}

// probeAll probes each subject the node serves now, one after the other.
func (p *prober) probeAll() {
	n := p.n
	if n.serve.resp != nil {
		p.probe(wire.SubjectSegment, &nats.Msg{Subject: wire.SegmentPrefix + wire.ProbeToken})
		if n.serve.resp.SnowflakeService() != nil {
			p.probe(wire.SubjectSnowflake, &nats.Msg{Subject: wire.SnowflakePrefix + wire.ProbeToken})
		}
	}
	if tags := n.seg.mono.Load().LeadingTags(); len(tags) > 0 {
		p.mu.Lock()
		tag := tags[p.round%len(tags)]
		p.round++
		p.mu.Unlock()
		p.probe(wire.SubjectMono, &nats.Msg{Subject: wire.MonoPrefix + tag, Header: nats.Header{wire.ProbeHeader: []string{n.cfg.Name}}})
	}
}

func (p *prober) probe(subject string, msg *nats.Msg) {
	result := probeAnswered
	if _, err := p.n.conn.NC().RequestMsg(msg, probeTimeout); err != nil {
		result = probeFailed
		p.n.log.Debug("self-probe failed", "subject", msg.Subject, "err", err)
	}
	p.mu.Lock()
	p.sent[probeKey{subject, result}]++
	p.mu.Unlock()
}

// counts returns the probes sent so far, by subject and result.
func (p *prober) counts() map[probeKey]uint64 {
	out := map[probeKey]uint64{}
	if p == nil {
		return out
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, v := range p.sent {
		out[k] = v
	}
	return out
}

// startProbes starts the self-probes and warns of the streams an id
// depends on that are not replicated.
func (n *Node) startProbes(ctx context.Context) error {
	n.startProber()
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	n.warnUnreplicated(wctx)
	cancel()
	return nil
}
