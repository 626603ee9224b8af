package wire

import "time"

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
