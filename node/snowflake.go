package node

import (
	"context"
	"errors"
	"time"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/peers"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snownode"
	"github.com/leafmq/leafmq/wire"
)

// newSnowflake makes the node's snowflake (n.serve.sf; none with
// --worker-registry off) before the node answers anyone: a starting
// node's status names the worker id it registers.
func (n *Node) newSnowflake() error {
	cfg := n.cfg
	if cfg.Registry.Kind == config.RegistryOff {
		return nil
	}
	layout, err := cfg.Layout()
	if err != nil {
		return err
	}
	open, err := registries[cfg.Registry.Kind](n, layout)
	if err != nil {
		return err
	}
	var leaseFiles string // the registries that keep lease files of this data directory (leaseFiles)
	switch cfg.Registry.Kind {
	case config.RegistryKV, config.RegistryMySQL:
		leaseFiles = cfg.Registry.Kind
	}
	if cfg.Fault.ClockOffset != 0 || cfg.Fault.ClockStep != "" {
		n.log.Warn("FAULT DRILL: the snowflake clock is offset", "offset", cfg.Fault.ClockOffset, "step", cfg.Fault.ClockStep)
	}
	n.serve.sf = snownode.New(snownode.Config{
		Name:             cfg.Name,
		Registry:         cfg.Registry.Kind,
		Layout:           layout,
		Region:           int64(cfg.Region.ID),
		Scope:            n.scope(),
		DataDir:          cfg.DataDir,
		LeaseFiles:       leaseFiles,
		Open:             open,
		Clock:            n.clock,
		IDClock:          cfg.SnowClock(),
		LeaseAhead:       cfg.Snowflake.LeaseAhead,
		MaxBackward:      cfg.Snowflake.MaxBackward,
		MaxStartWait:     cfg.Snowflake.MaxStartWait,
		Ring:             cfg.Snowflake.Ring,
		LayoutWarn:       cfg.Snowflake.LayoutWarn,
		PeerClockMax:     cfg.Snowflake.PeerClockMax,
		PeerClockEvery:   peerClockEvery,
		WorkerCountEvery: workerCountEvery,
		Peers:            n.snowflakePeers,
		Holder:           n.peerHolder,
		Lease:            n.peers.Lease,
		NewWorker:        n.noPeerServes,
		Clocks:           n.peers.Clocks,
		Conn:             n.conn.NC(),
		Yield:            n.serve.yield.YieldFunc(wire.SubjectSnowflake),
		Events:           n.events,
		Logger:           n.log,
	})
	return nil
}

// startSnowflake is one attempt to start the node's snowflake
// (snownode.Server.Start); its refusals of the configuration are config.ErrConfig.
func (n *Node) startSnowflake(ctx context.Context) error {
	err := n.serve.sf.Start(ctx)
	if errors.Is(err, snownode.ErrConfig) {
		return refused{err}
	}
	return err
}

// refused is an error of a package below that refuses the configuration:
// a config.ErrConfig, with the message it has.
type refused struct{ error }

func (r refused) Is(target error) bool { return target == config.ErrConfig }
func (r refused) Unwrap() error        { return r.error }

// SnowflakeJoined reports whether the node is in the snowflake queue group
// (it leaves while its snowflake source does not serve).
func (n *Node) SnowflakeJoined() bool {
	return n.serve.resp != nil && n.serve.resp.SnowflakeService() != nil
}

// Snowflake is the node's snowflake source, or nil when it has none.
func (n *Node) Snowflake() *snowflake.Source { return n.serve.sf.Source() }

// snowflakePeers is snownode.Config.Peers: the live nodes other than this
// process, each member waited for. Members that did not answer fail the
// attempt (Start asks again); a gather that fails otherwise checks against
// no one, with a warning.
func (n *Node) snowflakePeers(ctx context.Context) ([]wire.NodeStatus, error) {
	live, err := n.peers.Statuses(ctx)
	if errors.Is(err, peers.ErrSilent) {
		return nil, err
	}
	if err != nil {
		n.log.Warn("snowflake: cannot ask the live nodes for their layout and registry", "err", err)
		return nil, nil
	}
	return live, nil
}

// noPeerServes reports whether no live node says it holds worker: asked
// when the registry has no time lease for a worker id it gave this node
// (an operator deleted its record, or the whole registry, under a live
// node; see snowflake.SourceConfig.NewWorker). A node that does not answer
// (frozen, cut off) is not seen: README, "Outside the promise".
func (n *Node) noPeerServes(ctx context.Context, worker int64) bool {
	live, err := n.peers.Recent(ctx)
	if err != nil {
		n.log.Warn("snowflake: cannot ask the live nodes for their worker ids; waiting out the claim TTL", "worker", worker, "err", err)
		return false
	}
	for _, p := range live {
		if p.Snow.Holds(worker) {
			n.log.Warn("snowflake: a live node holds the worker id the registry gave this node with no lease on record (its record was deleted?)",
				"worker", worker, "holder", p.Node, "holder_state", p.Snow.State)
			return false
		}
	}
	return true
}

// peerClockEvery is how often a serving node compares its clock with its
// peers' again (snownode.Config.PeerClockEvery; at start, a clock too far
// off refuses snowflake).
var peerClockEvery = 30 * time.Second

// workerCountEvery is how often a node counts its region's held worker ids.
var workerCountEvery = 30 * time.Second

// serveSnowflake puts the node in the snowflake queue group while its
// worker serves (snownode.Server.Serve).
func (n *Node) serveSnowflake(context.Context) error { return n.serve.sf.Serve(n.serve.resp) }

func (n *Node) stopSnowflake(context.Context) error { n.serve.sf.Stop(); return nil }
