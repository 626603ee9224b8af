package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/leafmq/leafmq/internal/jskv"
)

// Reads go to the stream leader (jskv.MsgGet) instead of kv.Get, which on an
// R>1 bucket may be answered by a follower that has not applied the latest
// write yet: see package jskv.

// last returns the latest message of tag's key, or nil if there is none.
func (s *Store) last(ctx context.Context, tag string) (*jskv.StoredMsg, error) {
	return s.msgGet(ctx, jskv.MsgGetRequest{LastFor: s.keyPre + tag})
}

// msgGet asks the stream leader for one message; nil, nil when there is no
// such message.
func (s *Store) msgGet(ctx context.Context, req jskv.MsgGetRequest) (*jskv.StoredMsg, error) {
	m, err := jskv.MsgGet(ctx, s.nc, s.getSubj, req)
	if errors.Is(err, jskv.ErrBadReply) {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return m, err
}
