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
// such message. Within a compare-and-swap (jskv.WithReplicaReads) a leader that
// answers it sees no JetStream meta leader (a region cut off from the
// others' majority: its servers refuse the leader's reads although the
// bucket's leader is among them) is not the end: the read goes to any
// replica (jskv.DirectGet), and the call is marked, so that nothing is
// decided on what may be a follower's older copy but a write's
// compare-and-swap, which lands only on the revision that is the latest.
func (s *Store) msgGet(ctx context.Context, req jskv.MsgGetRequest) (*jskv.StoredMsg, error) {
	m, err := jskv.Get(ctx, s.nc, s.getSubj, s.dirSubj, req)
	if errors.Is(err, jskv.ErrBadReply) {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return m, err
}
