package responder

import (
	"sync/atomic"

	"github.com/nats-io/nats.go/micro"

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
