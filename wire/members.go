package wire

// MembersBucket is the JetStream KV bucket where every live node keeps a
// key of its own, its instance, renewed every few seconds; a key not
// renewed within the bucket's TTL goes away with its node. The checks that
// ask the live nodes (a second --name, a worker id a live node holds, the
// floors of a tag) know from it whom to wait for: an answer that is slow —
// a node far from NATS, cluster routes with latency, a loaded host — is
// waited for, not taken for no node at all.
const MembersBucket = "leaf_nodes"

// Member is the value of a node's key in MembersBucket: who it is, and
// which of the gathers it answers by now.
type Member struct {
	Node     string `json:"node"`
	Instance string `json:"instance"`
	// Floors: the node answers FloorsSubject (it keeps floors).
	Floors bool `json:"floors,omitempty"`
	// Serving: the node answers FloorPrefix+tag. A node sets it from its
	// first record on: it answers its floors before its engine loads a
	// range (a node of an older version set it once its responder ran).
	Serving bool `json:"serving,omitempty"`
}
