package node

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
)

// startPool starts topping up the configured pools.
func (n *Node) startPool(ctx context.Context) error {
	err := n.fillPool(ctx)
	if err != nil && n.seg.pool != nil { // Start may try again
		_ = n.seg.pool.Close()
		n.seg.pool = nil
	}
	return err
}

func (n *Node) fillPool(ctx context.Context) error {
	subjects, err := n.cfg.PoolSubjects(n.scope())
	if err != nil || len(subjects) == 0 {
		return err
	}
	js, err := jetstream.New(n.conn.NC())
	if err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	n.seg.pool, err = pool.NewFiller(ctx, pool.FillerConfig{
		JS:       js,
		Scope:    n.scope(),
		Depth:    n.cfg.Pool.Depth,
		Batch:    n.cfg.Pool.Batch,
		Replicas: n.cfg.Store.KVReplicas,
		Logger:   n.log,
		Clock:    n.clock,
		OnLow: func(subject string, level int) {
			n.events.Emit(events.Event{Kind: events.PoolLow, Level: events.Warn, Tag: subject,
				Message: fmt.Sprintf("pool %s holds %d of %d batches", subject, level, n.cfg.Pool.Depth),
				Fields:  map[string]any{"level": level, "depth": n.cfg.Pool.Depth}})
		},
	})
	if err != nil {
		return err
	}
	for _, subject := range subjects {
		var src pool.Source
		_, tag, _ := pool.Parse(subject) // checked by the pool's settings
		if tag == "" {
			r := n.serve.sf.Ring()
			if r == nil {
				return fmt.Errorf("%w: pool snowflake needs snowflake", config.ErrConfig)
			}
			src = r.Next
		} else {
			seg := wire.MustTag(tag)
			src = func(ctx context.Context, dst []int64) error { return n.seg.prod.Segment(ctx, seg, dst) }
		}
		if err := n.seg.pool.Add(ctx, subject, src); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) stopPool(context.Context) error {
	if n.seg.pool == nil {
		return nil
	}
	return n.seg.pool.Close()
}
