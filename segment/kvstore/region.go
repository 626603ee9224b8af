package kvstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/leafmq/leafmq/internal/jskv"
	"github.com/leafmq/leafmq/segment"
)

// regionKey holds the bucket's segment.RegionMark. It has a dot, so it
// never names a tag (wire.ParseTag) and the walks (Tags, Modes) pass it
// over, and it is not a mode key (mode.<tag>).
const regionKey = "leafmq.region"

// RegionMark implements segment.RegionMarker: the region key, read from
// the stream leader; a key an operator deleted is no record.
func (s *Store) RegionMark(ctx context.Context) (segment.RegionMark, bool, error) {
	if s.closed.Load() {
		return segment.RegionMark{}, false, closedErr("region mark")
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var (
		m  segment.RegionMark
		ok bool
	)
	err := s.retry(cctx, func() (bool, error) {
		var err error
		m, ok, _, err = s.regionMark(cctx)
		return transient(err), err
	})
	return m, ok, s.fail(ctx, cctx, "region mark", "", err)
}

// SetRegionMark implements segment.RegionMarker: the key is written only
// where it has no value (revision 0, or the delete marker's), so of two
// nodes writing at once one writes and the other reads what it wrote.
func (s *Store) SetRegionMark(ctx context.Context, want segment.RegionMark) (segment.RegionMark, error) {
	if s.closed.Load() {
		return segment.RegionMark{}, closedErr("set region mark")
	}
	val, err := json.Marshal(want)
	if err != nil {
		return segment.RegionMark{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var got segment.RegionMark
	err = s.retry(cctx, func() (bool, error) {
		had, ok, rev, err := s.regionMark(cctx)
		if err != nil {
			return transient(err), err
		}
		if ok {
			got = had
			return false, nil
		}
		if _, err := s.kv.Update(cctx, regionKey, val, rev); err != nil {
			return s.again(err), err // written meanwhile: read it
		}
		got = want
		return false, nil
	})
	return got, s.fail(ctx, cctx, "set region mark", "", err)
}

// regionMark reads the region key once; rev is the revision a write that
// finds no record must expect (0, or a delete marker's).
func (s *Store) regionMark(ctx context.Context) (m segment.RegionMark, ok bool, rev uint64, err error) {
	var msg *jskv.StoredMsg
	if msg, err = s.last(ctx, regionKey); err != nil || msg == nil {
		return m, false, 0, err
	}
	if msg.Deleted() {
		return m, false, msg.Sequence, nil
	}
	if err := json.Unmarshal(msg.Data, &m); err != nil || m.N < 1 {
		return m, false, 0, fmt.Errorf("%w: bucket %q key %q: %q is not a region record (%v)", ErrCorrupt, s.bucket, regionKey, msg.Data, err)
	}
	return m, true, msg.Sequence, nil
}

var _ segment.RegionMarker = (*Store)(nil)
