package node

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/leafmq/leafmq/internal/datadir"
	"github.com/leafmq/leafmq/peers"
)

// lockDir is Start's first phase. Two nodes on one data directory refuse
// at once. A directory that cannot be written at all only costs a node on
// an external NATS its hints (the embedded server cannot start without it
// anyway). The instance that ran on the directory before, if it is known
// dead, is b.prev: its members key goes at the join.
func (b *boot) lockDir(context.Context) error {
	store := "" // the embedded nats-server's JetStream directory
	if b.cfg.NATS.URL == "" {
		store = filepath.Join(b.cfg.DataDir, "jetstream")
	}
	var err error
	if b.life.lock, err = datadir.Acquire(b.cfg.DataDir, store, b.cfg.Name); err != nil {
		if errors.Is(err, datadir.ErrInUse) || b.cfg.NATS.URL == "" {
			return err
		}
		b.log.Warn("running without a data directory lock", "err", err)
	}
	b.instance = peers.NewInstance()
	b.prev = b.life.lock.TakeOver(b.instance)
	return nil
}
