package wire

import (
	"time"

	"github.com/nats-io/nats.go/micro"
)

// The admin subjects (admin user only, in deploy/nats/accounts.conf): the
// tag table of the segment store. Requests carry an AdminRequest (none for
// TagsSubject); replies a TagRow (a list of them for TagsSubject).
const (
	TagsSubject       = "leaf.admin.tags"
	TagCreateSubject  = "leaf.admin.tag.create"
	TagStepSubject    = "leaf.admin.tag.step"
	TagMaxSubject     = "leaf.admin.tag.max"
	TagRestartSubject = "leaf.admin.tag.restart"
	// TagDecodeSubject answers the sequence number of an opaque tag's id
	// (AdminRequest with Tag and ID; TagDecoded): only a node with the
	// tag's key can.
	TagDecodeSubject = "leaf.admin.tag.decode"
)

// ServiceSubject is the subject of a micro service request ($SRV.<verb>.<service>),
// with verb micro.PingVerb, micro.StatsVerb or micro.InfoVerb.
func ServiceSubject(verb micro.Verb, service string) (string, error) {
	return micro.ControlSubject(verb, service, "")
}

// TagRow is a tag as the admin subjects show it.
type TagRow struct {
	Tag         string    `json:"tag"`
	MaxID       int64     `json:"max_id"`
	Step        int       `json:"step"`
	Description string    `json:"description,omitempty"`
	UpdateTime  time.Time `json:"update_time,omitzero"`
	// Mode is segment, mono or opaque; Width and KeyID are an opaque
	// tag's (the key's id, never the key).
	Mode  string `json:"mode,omitempty"`
	Width int    `json:"width,omitempty"`
	KeyID string `json:"key_id,omitempty"`
}

// TagDecoded is the reply of TagDecodeSubject.
type TagDecoded struct {
	Tag      string `json:"tag"`
	ID       int64  `json:"id"`
	Sequence int64  `json:"sequence"`
}

// AdminRequest is the body of leaf.admin.tag.* requests.
type AdminRequest struct {
	Tag         string `json:"tag"`
	Step        int    `json:"step,omitempty"`
	MaxID       int64  `json:"max_id,omitempty"`
	Description string `json:"description,omitempty"`
	// Floor is the new max_id of leaf.admin.tag.restart: at least every
	// max_id the store remembers for the tag.
	Floor int64 `json:"floor,omitempty"`
	// Mode and Width are the mode of leaf.admin.tag.create: segment (the
	// default), mono or opaque, and an opaque tag's width in bits
	// (default 53). The node that creates an opaque tag records its own
	// key's id with it.
	Mode  string `json:"mode,omitempty"`
	Width int    `json:"width,omitempty"`
	// ID is the id of leaf.admin.tag.decode.
	ID int64 `json:"id,omitempty"`
	// Undeployed are region ids the operator states have no nodes and no
	// store yet (a deployment's --regions counts regions to come): a
	// monotonic create does not wait for their answer (region.Homes).
	Undeployed []int `json:"undeployed,omitempty"`
}
