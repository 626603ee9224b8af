package segment

import (
	"context"
	"errors"
	"fmt"
)

// RegionMark is the region whose ids a store's rows count: --regions N,
// --region-id R, --region Name. The zero RegionMark is no region (a
// deployment without regions).
type RegionMark struct {
	N    int    `json:"regions"`
	R    int    `json:"region_id"`
	Name string `json:"region"`
}

func (m RegionMark) String() string {
	if m.N == 0 {
		return "no regions"
	}
	return fmt.Sprintf("region %s (--region-id %d, --regions %d)", m.Name, m.R, m.N)
}

// ErrRegionMark: the store records another region than the node's.
var ErrRegionMark = errors.New("store of another region")

// RegionMarker is implemented by stores that record the region they serve
// (a key in the KV bucket, a table in the MySQL database). Their rows are
// local numbers of that region (l·N + R): served by a node of another
// region id or region count, or by a second region beside the first, they
// map to ids served before (I5, docs/regions.md). A store keeps its record
// for its life; nothing removes it.
type RegionMarker interface {
	// RegionMark reads the record; ok is false when there is none.
	RegionMark(ctx context.Context) (m RegionMark, ok bool, err error)
	// SetRegionMark records m unless the store has a record, atomically
	// (two nodes of one region on an empty store both succeed), and returns
	// the record the store holds after it: m, or the one it had.
	SetRegionMark(ctx context.Context, m RegionMark) (RegionMark, error)
}

// CheckRegionMark refuses a store recorded for another region than want,
// with an error wrapping ErrRegionMark; a store without a record gets want
// when want has regions (a node's first start on it, or the move from one
// region to N on a MySQL database). A node without regions records
// nothing, and refuses a store with a record: its ids would be the
// region's local numbers themselves. A store that keeps no record passes.
func CheckRegionMark(ctx context.Context, s Store, want RegionMark) error {
	rm, ok := s.(RegionMarker)
	if !ok {
		return nil
	}
	var (
		had RegionMark
		err error
	)
	if want.N == 0 {
		if had, ok, err = rm.RegionMark(ctx); err != nil || !ok {
			return err
		}
	} else if had, err = rm.SetRegionMark(ctx, want); err != nil {
		return err
	}
	if had == want {
		return nil
	}
	return fmt.Errorf("%w: the segment store is recorded as the store of %s, and this node is %s: each region needs its own store "+
		"(its own KV bucket, its own MySQL database), and a region's id and the region count never change (docs/regions.md)", ErrRegionMark, had, want)
}

// RegionMarkConflict is CheckRegionMark for a running node, every period:
// a record an operator deleted is written again, and the error is one
// wrapping ErrRegionMark only (another region's record: a second region
// took the store while this one ran, and one of the two must stop); a
// store that cannot be read now is no conflict.
func RegionMarkConflict(ctx context.Context, s Store, want RegionMark) error {
	if err := CheckRegionMark(ctx, s, want); errors.Is(err, ErrRegionMark) {
		return err
	}
	return nil
}
