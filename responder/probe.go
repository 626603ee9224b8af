package responder

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/wire"
)

// probes counts the self-probes (wire.ProbeToken) this responder's own
// subscriptions answered, by subject.
type probes struct {
	segment, snowflake, mono atomic.Uint64
}

// answerProbe answers a probe that reached this node on subject (one of
// wire.SubjectSegment, wire.SubjectSnowflake) and counts it. A probe takes
// no id and is no id request: Observe does not see it.
func (r *Responder) answerProbe(req micro.Request, subject string) {
	switch subject {
	case wire.SubjectSegment:
		r.probes.segment.Add(1)
	case wire.SubjectSnowflake:
		r.probes.snowflake.Add(1)
	}
	r.respondJSON(req, wire.ProbeReply{Node: r.cfg.Node, Instance: r.cfg.Instance, Subject: subject})
}

// Probed is how many probes of subject (wire.SubjectSegment,
// wire.SubjectSnowflake, wire.SubjectMono) this responder's subscriptions
// answered.
func (r *Responder) Probed(subject string) uint64 {
	switch subject {
	case wire.SubjectSegment:
		return r.probes.segment.Load()
	case wire.SubjectSnowflake:
		return r.probes.snowflake.Load()
	case wire.SubjectMono:
		return r.probes.mono.Load()
	}
	return 0
}

// DefaultProbeEvery is ProberConfig.Every's default.
const DefaultProbeEvery = 5 * time.Second

// probeTimeout bounds one probe.
const probeTimeout = 2 * time.Second

// Results of a probe a Prober sent (ProbeKey.Result): some node answered
// (a ProbeReply, or an error reply from a node that does not know probes),
// or none did in time (no responders, a timeout).
const (
	ProbeAnswered = "answered"
	ProbeFailed   = "failed"
)

// ProbeKey is a subject probed and the probe's result.
type ProbeKey struct{ Subject, Result string }

// ProbeTargets are the subjects a node serves now.
type ProbeTargets struct {
	Segment   bool     // leaf.segment.<tag>
	Snowflake bool     // leaf.snowflake, while in its queue group
	Mono      []string // the monotonic tags it leads
}

// ProberConfig configures a Prober. Zero values mean the defaults in
// comments.
type ProberConfig struct {
	Conn    *nats.Conn          // required
	Targets func() ProbeTargets // required: what to probe at each round
	Node    string              // the node's name, in a monotonic probe's wire.ProbeHeader
	Every   time.Duration       // between rounds; default DefaultProbeEvery
	Clock   clock.Clock         // paces the rounds; default clock.Real (clock.Or)
	Logger  *slog.Logger        // default slog.Default()
}

// Prober sends a node's self-probes (wire.ProbeToken, wire.ProbeHeader):
// every Every one request on each subject the node serves, through the
// server, on the very subject and queue group that clients use.
//
// A probe through the queue group may be answered by any member, so the
// check that counts is on the receiving side: each node counts the probes
// its own subscriptions answered (Responder.Probed, SubjectStatus.Probed,
// leafmq_probes_answered_total). Every serving member probes at the same
// rate and NATS spreads them over the group, so a node receives about one
// probe per Every per subject whatever the group's size; a node whose
// count stands still for minutes while it says it serves the subject does
// not get that subject's requests (a subscription the server dropped or
// refused, a handler that no longer runs), which a request or error rate
// cannot tell from a quiet subject. A probe to a node's own direct subject
// would test the connection, not the queue subscription that clients
// reach. A probe costs one small request per subject every few seconds
// and takes no id. Monotonic tags are plain subscriptions of their
// leader: a node probes the tags it leads, one per round.
type Prober struct {
	cfg  ProberConfig
	stop chan struct{}
	wg   sync.WaitGroup

	mu    sync.Mutex
	sent  map[ProbeKey]uint64 // probes sent, by subject and result
	round int                 // picks the monotonic tag of a round
}

// StartProber validates cfg and starts probing; Close stops it.
func StartProber(cfg ProberConfig) (*Prober, error) {
	if cfg.Conn == nil || cfg.Targets == nil {
		return nil, errors.New("responder: ProberConfig.Conn and ProberConfig.Targets are required")
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultProbeEvery
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Prober{cfg: cfg, stop: make(chan struct{}), sent: map[ProbeKey]uint64{}}
	p.wg.Add(1)
	go p.run()
	return p, nil
}

func (p *Prober) run() {
	defer p.wg.Done()
	t := p.cfg.Clock.NewTicker(p.cfg.Every)
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

// Close stops the probes and waits for a round under way. It must be
// called once; a nil Prober's Close does nothing.
func (p *Prober) Close() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
}

// probeAll probes each subject the node serves now, one after the other.
func (p *Prober) probeAll() {
	t := p.cfg.Targets()
	if t.Segment {
		p.probe(wire.SubjectSegment, &nats.Msg{Subject: wire.SegmentPrefix + wire.ProbeToken})
	}
	if t.Snowflake {
		p.probe(wire.SubjectSnowflake, &nats.Msg{Subject: wire.SnowflakePrefix + wire.ProbeToken})
	}
	if len(t.Mono) > 0 {
		p.mu.Lock()
		tag := t.Mono[p.round%len(t.Mono)]
		p.round++
		p.mu.Unlock()
		p.probe(wire.SubjectMono, &nats.Msg{Subject: wire.MonoPrefix + tag, Header: nats.Header{wire.ProbeHeader: []string{p.cfg.Node}}})
	}
}

func (p *Prober) probe(subject string, msg *nats.Msg) {
	result := ProbeAnswered
	if _, err := p.cfg.Conn.RequestMsg(msg, probeTimeout); err != nil {
		result = ProbeFailed
		p.cfg.Logger.Debug("self-probe failed", "subject", msg.Subject, "err", err)
	}
	p.mu.Lock()
	p.sent[ProbeKey{subject, result}]++
	p.mu.Unlock()
}

// Sent returns the probes sent so far, by subject and result (none of a
// nil Prober).
func (p *Prober) Sent() map[ProbeKey]uint64 {
	out := map[ProbeKey]uint64{}
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
