package node

import (
	"context"
	"fmt"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/datadir"
	"github.com/leafmq/leafmq/region"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// startRegion answers and checks, over the gateways (region.Start), the
// region count of every node, with regions or without, and with --regions
// the region id: a count another node runs with, or an id another region
// holds, is refused at start, and one found while running stops the node
// (Failed), as the ids could then repeat (docs/protocol.md, I5). With
// --regions it first names the region after the NATS cluster when
// --region is not given (the worker registries and stores of a region are
// named after it).
func (b *boot) startRegion(ctx context.Context) error {
	rc := &b.cfg.Region
	if rc.On() && rc.Name == "" {
		name, err := region.DefaultName(b.conn.NC())
		if err != nil || name == "" {
			return fmt.Errorf("%w: --regions needs the region's name: --region, or a NATS cluster with a name (%v)", config.ErrConfig, err)
		}
		rc.Name = name
	}
	if b.life.lock != nil { // before the region is announced: the data directory's region (datadir.CheckRegion)
		if err := datadir.CheckRegion(b.cfg.DataDir, datadir.Region(b.regionMark())); err != nil {
			return err
		}
	}
	g, err := region.Start(ctx, region.Config{Conn: b.conn.NC(), Count: rc.Count, Region: rc.Name, ID: rc.ID, Node: b.cfg.Name,
		Instance: b.instance, Conflict: b.fail, Clock: b.clock, Log: b.log})
	if err != nil {
		return err
	}
	b.life.region = g
	return nil
}

// scope is the region's share of the internal subjects and buckets
// (wire.Scope): none without regions.
func (n *Node) scope() wire.Scope {
	if !n.cfg.Region.On() {
		return ""
	}
	return wire.Scope(n.cfg.Region.Name)
}

// regionMark is the region this node serves, as its data directory and
// its store record it (none without regions).
func (n *Node) regionMark() segment.RegionMark {
	if rc := n.cfg.Region; rc.On() {
		return segment.RegionMark{N: rc.Count, R: rc.ID, Name: rc.Name}
	}
	return segment.RegionMark{}
}

// regions is where this region's segment ids lie among every region's.
func (n *Node) regions() segment.Regions {
	return segment.Regions{N: int64(n.cfg.Region.Count), R: int64(n.cfg.Region.ID)}
}

// fail stops the node for err: a start under way ends with it (Start
// returns it and stops what it started), and Failed delivers it to a
// started node's owner (leafd exits).
func (n *Node) fail(err error) {
	n.log.Error("leafd must stop", "err", err.Error())
	n.life.stopStart(err)
	select {
	case n.life.failed <- err:
	default:
	}
}

// Failed delivers the error for which the node must stop, found while it
// runs (a region id another region holds, another node's region count).
// Close it then.
func (n *Node) Failed() <-chan error { return n.life.failed }
