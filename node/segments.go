package node

import (
	"context"
	"path/filepath"

	"github.com/leafmq/leafmq/internal/datadir"
	"github.com/leafmq/leafmq/segment"
)

// openFloors opens the tag floors, a guard against a store that goes back:
// a floor file that cannot be read stops the node, unless the
// node runs without a data directory lock (lockDir), which keeps them in
// memory.
func (b *boot) openFloors(context.Context) error {
	ff, err := segment.OpenFloorFile(filepath.Join(b.cfg.DataDir, datadir.FloorFileName))
	switch {
	case err == nil:
		b.seg.floors = ff
		b.own, b.ownModes = ff.All, ff.Modes
	case b.life.lock == nil:
		b.log.Warn("segment: tag floors kept in memory only", "err", err)
		b.seg.floors = segment.NewMemFloors()
	default:
		return err
	}
	return nil
}
