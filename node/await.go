package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/peers"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/snowflake"
)

// Backoff of the start's retries while a backend does not answer.
const (
	awaitFirst = 250 * time.Millisecond
	awaitMax   = 5 * time.Second
)

// await runs step until it succeeds, retrying with backoff (250 ms doubling
// to 5 s) for as long as ctx allows while it fails for a reason that passes
// (transient): a NATS cluster still electing its JetStream leader, a store
// or registry that does not answer yet. Each attempt has startTimeout. A
// wrong configuration, or anything else, fails at once. /readyz shows the
// phase and the last error meanwhile.
func (n *Node) await(ctx context.Context, phase string, step func(context.Context) error) error {
	n.start.Set(phase, nil)
	defer n.start.End(phase)
	wait := awaitFirst
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, startTimeout)
		err := step(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !transient(err) {
			return err
		}
		n.start.Set(phase, err)
		n.log.Warn("start: waiting; will try again", "phase", phase, "attempt", attempt, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %w)", phase, ctx.Err(), err)
		case <-n.clock.After(wait):
		}
		wait = min(2*wait, awaitMax)
	}
}

// transient reports whether err may pass by itself: no answer in time, no
// responders yet (a stream without a leader publishes "no response from
// stream"), a live node that did not answer a check, a JetStream or store
// that is (temporarily) unavailable, a connection refused.
func transient(err error) bool {
	if errors.Is(err, config.ErrConfig) {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && api.Code >= 500 {
		return true
	}
	var ne net.Error
	return errors.Is(err, segment.ErrUnavailable) || errors.Is(err, peers.ErrSilent) || errors.Is(err, snowflake.ErrRegistryUnavailable) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrNoServers) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne)
}
