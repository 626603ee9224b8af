package wire

import (
	"errors"
	"strings"
)

// StatusSubject is answered by every node (no queue group) with its
// NodeStatus as JSON; the status page gathers the answers.
const StatusSubject = "leaf.admin.status"

// NodeStatus is one node's state, as leaf.admin.status answers it and the
// status page shows it. Counters only grow while the node runs; a page
// computes rates from two snapshots.
type NodeStatus struct {
	Node string `json:"node"`
	// Instance is random per process: two answers with one Node and
	// different Instances are two processes under one --name.
	Instance string           `json:"instance,omitempty"`
	Host     string           `json:"host,omitempty"` // os.Hostname
	PID      int              `json:"pid,omitempty"`
	Version  string           `json:"version"`
	UnixNano int64            `json:"unix_nano"` // the node's clock when it answered
	Started  int64            `json:"started"`   // unix nanos of the node's start
	Store    string           `json:"store"`     // "mysql" or "jetstream-kv"
	Requests uint64           `json:"requests"`  // requests answered, every endpoint
	Errors   uint64           `json:"errors"`    // of which errors
	Tags     []TagStatus      `json:"tags"`      // sorted by tag; at most a few hundred
	Snow     *SnowflakeStatus `json:"snowflake"` // nil when snowflake is off
	TagsCut  bool             `json:"tags_cut"`  // Tags was cut short
	Ready    bool             `json:"ready"`     // what /readyz says
	Problems []string         `json:"problems"`  // why not ready, or warnings
	// Subjects says, for each kind of subject the node is set up for,
	// whether it serves it now and can answer (/readyz/<subject>).
	Subjects []SubjectStatus `json:"subjects,omitempty"`
	// Mono lists the monotonic tags this node leads now (leaf.mono.<tag>).
	Mono []string `json:"mono,omitempty"`
	// Starting: the node is not serving yet. It answers from its first
	// connection, so that nodes starting at the same moment see each
	// other's name and the worker id each is registering (Snow.Claim).
	Starting bool `json:"starting,omitempty"`
	// NATSRTT is the node's round trip to its NATS server in
	// nanoseconds, as last measured; 0 when unknown.
	NATSRTT int64 `json:"nats_rtt_ns,omitempty"`
}

// TagStatus is a segment tag on one node: Leaf's /cache row, plus the ring.
type TagStatus struct {
	Tag       string          `json:"tag"`
	Step      int             `json:"step"`       // step of the last load (dynamic)
	MinStep   int             `json:"min_step"`   // the row's step
	Loads     int             `json:"loads"`      // segments loaded
	LastLoad  int64           `json:"last_load"`  // unix nanos; 0 before the first
	LastError string          `json:"last_error"` // of the last load attempt; "" after a success
	Loading   bool            `json:"loading"`
	Current   int             `json:"current"` // index of the current buffer
	Buffers   [2]BufferStatus `json:"buffers"`
	RingLen   int             `json:"ring_len"`
	RingCap   int             `json:"ring_cap"`
	Taken     uint64          `json:"taken"` // ids taken from the ring
	// Headroom is the tag's capacity runway: its ids left above the
	// ranges this node reserved before its domain ends (2^63-1, an opaque
	// tag's 2^W-1; a region's share of either). -1 before the first load.
	Headroom int64 `json:"headroom"`
	// Refused is why this node serves none of the tag's ids until an
	// operator acts (an opaque tag whose key it lacks, a mode conflict, a
	// store below the ids already issued): requests get a 503, and the
	// node stays ready for every other tag.
	Refused string `json:"refused,omitempty"`
}

// Subjects of SubjectStatus: the kinds of subject a node serves.
const (
	SubjectSegment   = "segment"   // leaf.segment.<tag>, in the queue group
	SubjectSnowflake = "snowflake" // leaf.snowflake, in the queue group while the worker serves
	SubjectMono      = "mono"      // leaf.mono.<tag> of the monotonic tags the node leads
	SubjectPool      = "pool"      // the JetStream batch pool the node tops up
)

// SubjectStatus is one kind of subject on one node.
type SubjectStatus struct {
	Subject string `json:"subject"`
	// Serving: the node is subscribed (in the queue group): requests reach
	// it. A snowflake node waiting for its clock is not.
	Serving bool `json:"serving"`
	// Ready: serving, and it answers with ids (or, for the pool, can top
	// it up). A tag refused for good does not make segment unready.
	Ready    bool     `json:"ready"`
	Problems []string `json:"problems,omitempty"` // why not, or warnings
	// Probed counts the self-probes (wire.ProbeToken) this node's own
	// subscription answered: it grows while the subject really reaches
	// the node through the server.
	Probed uint64 `json:"probed"`
}

// Err is nil when the subject is ready, else why not: its problems, or
// "not serving" (the node's /readyz/<subject>).
func (s SubjectStatus) Err() error {
	switch {
	case s.Ready:
		return nil
	case len(s.Problems) > 0:
		return errors.New(strings.Join(s.Problems, "; "))
	default:
		return errors.New("not serving")
	}
}

// BufferStatus is one half of a tag's double buffer.
type BufferStatus struct {
	Value int64 `json:"value"` // next id
	Max   int64 `json:"max"`   // one past the last id
	Step  int   `json:"step"`
	Ready bool  `json:"ready"`
}

// SnowflakeStatus is the snowflake engine on one node.
type SnowflakeStatus struct {
	State      string `json:"state"`    // waiting, serving, paused, lost, closed
	Worker     int64  `json:"worker"`   // -1 while none
	Registry   string `json:"registry"` // kv, zk, mysql, static
	Layout     string `json:"layout"`
	Expires    int64  `json:"expires"`     // unix nanos when the layout runs out
	LeaseUntil int64  `json:"lease_until"` // unix nanos up to which the time lease is persisted
	Joined     bool   `json:"joined"`      // in the snowflake queue group
	PeerOffset int64  `json:"peer_offset"` // nanos: the peers' average clock minus ours, at start
	// Past are the worker ids the node held and lost, each with the highest
	// time lease it had: ids of it may have been made up to there.
	Past []WorkerLease `json:"past,omitempty"`
	// Claim is the worker id of the node's last registration, reported
	// from before the node asks the live nodes whether one serves it until
	// the next registration: of two nodes that register one worker id at
	// the same moment, the later sees the earlier's claim. Nil from a node
	// that has not registered (or from one of an older version).
	Claim   *int64 `json:"claim,omitempty"`
	RingLen int    `json:"ring_len"`
	RingCap int    `json:"ring_cap"`
	Taken   uint64 `json:"taken"` // ids taken from the ring
	// WorkersFree is the worker ids of the node's region that a new node
	// can still get: WorkersCap (the layout's 2^worker bits of a region)
	// less those its registry holds, as last counted (every 30 s). Nil
	// before a count, and for a registry that counts none (static).
	WorkersFree *int64 `json:"workers_free,omitempty"`
	WorkersCap  int64  `json:"workers_cap,omitempty"`
}

// Holds reports whether the node serves worker, or registers it (Claim).
// A nil status (snowflake off) holds none.
func (s *SnowflakeStatus) Holds(worker int64) bool {
	return s != nil && (s.Worker == worker || s.Claim != nil && *s.Claim == worker)
}

// WorkerLease is a worker id and a time lease (unix nanos).
type WorkerLease struct {
	Worker int64 `json:"worker"`
	Until  int64 `json:"until"`
}
