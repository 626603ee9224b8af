package node

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/jskv"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/segment/kvstore"
	"github.com/leafmq/leafmq/snowflake/kvworker"
)

// warnUnreplicated logs a warning for each JetStream stream an id depends
// on that has one replica on an external NATS. The embedded server runs
// with sync_always, so there one replica is durable; an external server
// syncs every 2 minutes by default, and a power cut (or a lost disk) of the
// one server that holds the stream rolls max_id, a worker's time lease or a
// taken pool batch back: ids repeat. R3 (--kv-replicas 3), or sync_always
// on every server, closes that.
func (n *Node) warnUnreplicated(ctx context.Context) {
	if n.conn.Server() != nil {
		return
	}
	var streams []string
	if n.cfg.Store.MySQL == "" {
		streams = append(streams, "KV_"+n.scope().Bucket(kvstore.DefaultBucket))
	}
	if n.cfg.Registry.Kind == config.RegistryKV {
		streams = append(streams, "KV_"+kvworker.BucketFor(n.cfg.Region.Name))
	}
	if n.seg.pool != nil {
		streams = append(streams, pool.StreamIn(n.scope()))
	}
	js, err := jetstream.New(n.conn.NC())
	if err != nil {
		return
	}
	for _, s := range jskv.Unreplicated(ctx, js, streams...) {
		n.log.Warn("a stream that ids depend on has one replica: a power cut of its server can repeat ids unless every server runs with sync_always; use --kv-replicas 3",
			"stream", s.Stream, "replicas", s.Replicas)
	}
}
