package kvstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

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
// nodes writing at once one writes and the other reads what it wrote. A
// region's bucket (leaf_alloc_<region>) is refused its first record when
// another region's bucket records want's region id under another name, or
// another region count (idElsewhere).
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
		if err := s.idElsewhere(cctx, want); err != nil {
			return transient(err), err
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

// idElsewhere refuses, with an error wrapping segment.ErrRegionMark, a
// first record of want in a region's bucket while another region's bucket
// (leaf_alloc_<other>) records want's region id, or another region count:
// a region renamed, or a retired region's id given to a new one, would
// start its tags at 1 in the empty bucket and serve the ids the other
// bucket's rows issued, and another count maps the same local numbers to
// other ids. In one JetStream system (a super-cluster) every region's
// buckets are listed; the list needs JetStream's meta leader, as creating
// the bucket did.
func (s *Store) idElsewhere(ctx context.Context, want segment.RegionMark) error {
	family := DefaultBucket + "_"
	if !strings.HasPrefix(s.bucket, family) {
		return nil
	}
	names := s.js.KeyValueStoreNames(ctx)
	var others []string
	for name := range names.Name() {
		if name != s.bucket && strings.HasPrefix(name, family) {
			others = append(others, name)
		}
	}
	if err := names.Error(); err != nil {
		return err
	}
	for _, name := range others {
		m, err := jskv.MsgGet(ctx, s.nc, jskv.GetSubject(s.js, name), jskv.MsgGetRequest{LastFor: "$KV." + name + "." + regionKey})
		if err != nil {
			return err
		}
		if m == nil || m.Deleted() {
			continue
		}
		var had segment.RegionMark
		switch {
		case json.Unmarshal(m.Data, &had) != nil:
		case had.N != want.N:
			return fmt.Errorf("%w: bucket %q records %s, and this node is %s: the region count is fixed for the deployment's life "+
				"(with another, the same local numbers map to other ids)", segment.ErrRegionMark, name, had, want)
		case had.R == want.R:
			return fmt.Errorf("%w: bucket %q records %s, and bucket %q would be a second store of region id %d: a region renamed, or a retired "+
				"region's id given to a new region, serves its tags from an empty store at 1, repeating the ids bucket %q issued; "+
				"keep the name %s, or rename the region as docs/regions.md says (Retiring or renaming a region: delete the key %s of bucket %q, "+
				"and create every tag in the new store at its old max_id before it serves)", segment.ErrRegionMark, name, had, s.bucket, want.R, name, had.Name, regionKey, name)
		}
	}
	return nil
}

var _ segment.RegionMarker = (*Store)(nil)
