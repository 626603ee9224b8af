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
}
