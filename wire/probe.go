package wire

// A node's self-probe: every few seconds a node sends a probe on each
// subject it serves, and the node whose subscription receives it answers
// with a ProbeReply instead of ids. Each node counts the probes its own
// subscriptions answered: a node that says it serves a subject while that
// count stands still has lost the subscription or its handler, whatever
// its local state says.
const (
	// ProbeToken is the last token of a probe on leaf.segment.<tag> and
	// leaf.snowflake.<key>. It is not a valid tag, so a node that does not
	// know probes answers it 400 without creating or loading a tag.
	ProbeToken = "~probe"
	// ProbeHeader marks a probe on leaf.mono.<tag>, whose last token is a
	// real tag; its value is the probing node's name.
	ProbeHeader = "Leaf-Probe"
)

// ProbeReply answers a probe: who received it, on which subject.
type ProbeReply struct {
	Node     string `json:"node"`
	Instance string `json:"instance,omitempty"` // as in NodeStatus
	Subject  string `json:"subject"`            // SubjectSegment, SubjectSnowflake or SubjectMono
}
