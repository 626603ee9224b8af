package kvworker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/jskv"
	"github.com/leafmq/leafmq/snowflake"
)

// Reads that must see this node's own writes (the lease key before a CAS)
// go to the stream leader (jskv.MsgGet), not kv.Get: on an R>1 bucket a
// direct get may be answered by a follower that has not applied the latest
// write (see package jskv). Two exceptions: Lease and Register's fence,
// whose every decision is confirmed by a compare-and-swap, read a replica
// where the leader's read is refused for want of a JetStream meta leader
// (jskv.Get), as in a region cut off from the others.

// msgGet asks the stream leader for the last message on subject (or a
// replica, where ctx allows it: jskv.WithReplicaReads); nil, nil when
// there is none.
func (r *Registry) msgGet(ctx context.Context, subject string) (*jskv.StoredMsg, error) {
	return jskv.Get(ctx, r.nc, r.getSubj, r.dirSubj, jskv.MsgGetRequest{LastFor: subject})
}

// retry calls f until it succeeds or says not to retry, pausing a
// jittered, growing while (1ms doubling to 64ms), until ctx ends. It
// returns f's last error.
func retry(ctx context.Context, c clock.Clock, f func() (again bool, err error)) error {
	for attempt := 0; ; attempt++ {
		again, err := f()
		if err == nil || !again {
			return err
		}
		d := time.Millisecond << min(attempt, 6)
		d = d/2 + rand.N(d)
		if clock.Sleep(ctx, c, d) != nil {
			return err
		}
	}
}

// fail maps err of op to the error callers see. ctx is the caller's
// context, cctx the call's (ctx bounded by Timeout).
func fail(ctx, cctx context.Context, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("kvworker: %s: %w (%v)", op, ctx.Err(), err)
	case cctx.Err() != nil:
		return fmt.Errorf("%w: kvworker: %s: no answer in time: %v", snowflake.ErrRegistryUnavailable, op, err)
	case unavailable(err):
		return fmt.Errorf("%w: kvworker: %s: %w", snowflake.ErrRegistryUnavailable, op, err)
	default:
		return fmt.Errorf("kvworker: %s: %w", op, err)
	}
}

// The error classes of the shared JetStream KV code; a Create that finds
// the key taken counts as a conflict here too.
var (
	transient   = jskv.Transient
	unavailable = jskv.Unavailable
)

func conflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || jskv.Conflict(err)
}
