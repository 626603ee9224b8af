package ask

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// Mono fills dst with ids of a monotonic tag: its leader may be any node,
// so it asks leaf.mono.<tag> over NATS, and again after no responder or a
// 503 (a switch-over), backing off from 10 ms to 200 ms on clk, until ctx
// ends (segment.ErrNotReady). The Go client does the same with its own
// retry policy.
func Mono(ctx context.Context, nc *nats.Conn, clk clock.Clock, tag wire.Tag, dst []int64) error {
	clk = clock.Or(clk)
	backoff := 10 * time.Millisecond
	for {
		reply, err := nc.RequestMsgWithContext(ctx, wire.NewRequest(wire.MonoPrefix+tag.String(), len(dst), true))
		if err == nil {
			err = wire.ReplyError(reply)
		}
		if err == nil {
			ids, err := wire.DecodeIDs(dst[:0], reply.Data, true)
			if err == nil && len(ids) != len(dst) {
				err = fmt.Errorf("%w: %d ids, asked for %d", wire.ErrBadReply, len(ids), len(dst))
			}
			return err
		}
		if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, wire.ErrUnavailable) {
			return err
		}
		t := clk.NewTimer(backoff)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: monotonic tag %q: no leader answered: %w", segment.ErrNotReady, tag, err)
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}
