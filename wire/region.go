package wire

import (
	"fmt"
	"strconv"
	"time"
)

// RegionPrefix + <id> is answered by every node whose region id is <id>
// (no queue group, in every region: NATS gateways carry the interest to
// the other clusters of a supercluster) with its NodeRegion: two regions
// configured with one region id would make the same ids, so a node that
// hears a node of another region on its id refuses to start, and a running
// one stops serving what depends on the region id.
const RegionPrefix = "leaf.region."

// RegionsSubject is answered by every node, with regions or without (no
// queue group, in every region), with its NodeRegion, Regions its region
// count: nodes given two counts map local numbers to ids differently, and
// their ids repeat (a region of N 4 serves 4l+2, one of N 2 serves 2l), so
// a node that hears a count other than its own refuses to start, and a
// running one stops. It has two tokens, so it meets no RegionPrefix
// subject (three tokens) nor a subscription to RegionPrefix + "*".
const RegionsSubject = "leaf.regions"

// RegionSubject is the subject of region id id (RegionPrefix + id).
func RegionSubject(id int) string { return RegionPrefix + strconv.Itoa(id) }

// NodeRegion is the reply of RegionPrefix + <id> and of RegionsSubject;
// Region is "" and ID 0 for a node without regions.
type NodeRegion struct {
	Node     string `json:"node"`
	Instance string `json:"instance,omitempty"` // as in NodeStatus
	Region   string `json:"region"`
	ID       int    `json:"id"`
	// Cluster is the NATS cluster the node is connected to as it answers
	// (to tell an operator where a conflicting node is).
	Cluster string `json:"cluster,omitempty"`
	// Home is the NATS cluster the node was connected to when it started:
	// its region's cluster, kept through a failover to another one. A
	// region is one NATS cluster, so a node of this region name and id
	// whose Home and Cluster are both another cluster's is another region
	// (a configuration copied to a second cluster); "" (a server without
	// a cluster, a node of an older version) is compared with nothing.
	Home string `json:"home,omitempty"`
	// Checked: the node has passed its start check and serves under this
	// id. A node still starting answers too (so that two starting at once
	// see each other), but only a checked node's answer stops a running
	// one: a node that starts, hears a conflict and refuses must not stop
	// the region that was there first.
	Checked bool `json:"checked,omitempty"`
	// Since is when the node's region first served, by the node's clock:
	// when the earliest node of its region it heard at start (or this
	// node) passed its start check; zero while not Checked. Of two
	// regions found on one id once a partition heals, the one that served
	// clearly first keeps serving and the other stops.
	Since time.Time `json:"since,omitzero"`
	// Stopped: the node found a conflict and serves no more under this
	// id (it answers until it exits). A region clearly older than it
	// (Since) keeps serving; any other still counts it.
	Stopped bool `json:"stopped,omitempty"`
	// Regions is the node's region count (--regions), 0 without regions;
	// compared only in answers on RegionsSubject (a node of an older
	// version answers RegionPrefix + <id> without it).
	Regions int `json:"regions"`
}

// MaxRegionLen is the longest region name.
const MaxRegionLen = 64

// CheckRegion checks a region name: 1..MaxRegionLen characters of
// [A-Za-z0-9_-], a single NATS subject token (as a tag is). A bad name is
// an error wrapping ErrInvalid.
func CheckRegion(name string) error {
	if len(name) > MaxRegionLen || !validTag(name) {
		return fmt.Errorf("%w: region %q must be 1-%d characters of [A-Za-z0-9_-]", ErrInvalid, name, MaxRegionLen)
	}
	return nil
}

// RegionTagSubject is where the nodes of region id id answer what their
// region's store holds of tag (a RegionTag; no queue group: a node in the
// middle of creating the tag answers so as well). A monotonic tag lives in
// one region (its home): a create asks every other region first
// (docs/protocol.md, I6). Five tokens: it meets no RegionPrefix + <id>
// subject.
func RegionTagSubject(id int, tag string) string {
	return RegionPrefix + strconv.Itoa(id) + ".tag." + tag
}

// RegionTag is the reply of RegionTagSubject: what the answering
// region's store holds of the tag (Has: a row, in Mode), or, with Creating, that the answering node is
// creating the tag in Mode; Err why the store could not be read. Mode,
// Width and KeyID are as in TagRow. Leader, with no row, names the node of
// the answering region that holds the tag's monotonic lease (Mode "mono"):
// it may still serve the tag (its row deleted by hand), so the region
// holds the tag as monotonic until that leader stops. Floor is the
// answering node's floor of the tag where the tag is monotonic to it (it
// served it or heard it served so), 0 otherwise: the highest range end it
// received or heard announced, in its region's local numbers (row or
// none).
type RegionTag struct {
	Node     string `json:"node"`
	Region   string `json:"region"`
	ID       int    `json:"id"`
	Has      bool   `json:"has,omitempty"`
	Creating bool   `json:"creating,omitempty"`
	Leader   string `json:"leader,omitempty"`
	Mode     string `json:"mode,omitempty"`
	Width    int    `json:"width,omitempty"`
	KeyID    string `json:"key_id,omitempty"`
	Floor    int64  `json:"floor,omitempty"`
	Err      string `json:"error,omitempty"`
}

// Holds reports whether the answering region holds the tag: a row, or a
// monotonic leader without one.
func (a RegionTag) Holds() bool { return a.Has || a.Leader != "" }
