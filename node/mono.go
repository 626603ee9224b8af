package node

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/mono/kvlease"
	"github.com/leafmq/leafmq/region"
	"github.com/leafmq/leafmq/wire"
)

// monoBalanceEvery is how often the node's monotonic tags are balanced
// (mono.ServerConfig.BalanceEvery); tests shorten it.
var monoBalanceEvery = mono.DefaultBalanceEvery

// startMono opens the lease bucket and starts a leader for every
// monotonic tag. A node whose NATS has no JetStream for the lease logs it
// and serves no monotonic tag; the other modes are not affected. A bucket
// that does not answer in time is a transient error: Start tries again.
func (n *Node) startMono(ctx context.Context) error {
	js, err := jetstream.New(n.conn.NC())
	if err != nil {
		return err
	}
	lease, err := kvlease.Open(ctx, js, kvlease.Options{Replicas: n.cfg.Store.KVReplicas, Bucket: n.scope().Bucket(kvlease.DefaultBucket)})
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		n.log.Error("mono: no lease bucket: this node serves no monotonic tag", "err", err)
		return nil
	case transient(err):
		// JetStream is there but slow (a loaded server, a leader
		// election): Start tries again, as for the store. Given up at
		// once, the node served no monotonic tag until restarted (CI,
		// a loaded machine: TestNATSClusterPermissions).
		return err
	default:
		n.log.Error("mono: no lease bucket: this node serves no monotonic tag", "err", err)
		return nil
	}
	nc := n.conn.NC()
	m, err := mono.StartServer(ctx, mono.ServerConfig{
		Node:      n.cfg.Name,
		Regions:   n.regions(),
		Store:     n.seg.store,
		Lease:     lease,
		Floors:    n.seg.floors,
		PeerFloor: n.peers.Floor,
		PeerMode:  n.peers.Mode,
		Announce:  n.peers,
		Serve: func(tag wire.Tag, l *mono.Leader) (func(), error) {
			return n.serve.resp.ServeMono(tag, l)
		},
		MayLead: region.LeadCheck(region.HomesConfig{Conn: nc, Count: n.cfg.Region.Count, ID: n.cfg.Region.ID,
			Region: n.cfg.Region.Name, Node: n.cfg.Name, Store: n.seg.store}), // I6 at each leadership too
		Subscribe: func(announced func(tag string)) (func(), error) {
			sub, err := nc.Subscribe(n.scope().TagChangedPrefix()+"*", func(msg *nats.Msg) {
				announced(strings.TrimPrefix(msg.Subject, n.scope().TagChangedPrefix()))
			})
			if err != nil {
				return nil, err
			}
			return func() { _ = sub.Unsubscribe() }, nil
		},
		Nodes: func(ctx context.Context) ([]wire.NodeStatus, error) {
			return ask.Status(ctx, nc, n.scope(), ask.StatusWindow(n.conn.RTT())) // a slow leader hears its fast peers
		},
		MaxRTT:       n.cfg.NATS.MaxRTT,
		RTT:          n.conn.SteadyRTT,
		BalanceEvery: monoBalanceEvery,
		Logger:       n.log,
		Clock:        n.clock,
	})
	if err != nil {
		_ = lease.Close()
		return err
	}
	n.seg.mono.Store(m)
	return nil
}

// MonoLeading lists the monotonic tags this node leads now, sorted.
func (n *Node) MonoLeading() []string { return n.seg.mono.Load().LeadingTags() }

// stopMono releases the monotonic leases while NATS is up: others take
// over at once.
func (n *Node) stopMono(context.Context) error { n.seg.mono.Load().Close(); return nil }
