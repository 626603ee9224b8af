package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

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
	if err := s.fail(ctx, cctx, "set region mark", "", err); err != nil || got != want || want.N < 1 {
		return got, err
	}
	return got, s.checkRegionID(ctx, want)
}

// RegionIDBucket is the bucket that records which region region id id
// is: one per id, so that each region's NATS user needs its own only.
func RegionIDBucket(id int) string { return fmt.Sprintf("leaf_region_%d", id) }

// regionIDKey is the key of RegionIDBucket's one record.
const regionIDKey = "region"

// checkRegionID records, where nothing is recorded yet, that want's region
// id is want's region, and refuses (segment.ErrRegionMark) when it is
// recorded as another region's. A region's store is named after the
// region (leaf_alloc_<region>), so a region renamed, or a new region
// given a retired region's id, starts on a new, empty bucket whose own
// record says nothing of the ids the id served before; the id's record
// does: its local numbers' history is in the old region's bucket
// (docs/regions.md, Retiring or renaming a region).
func (s *Store) checkRegionID(ctx context.Context, want segment.RegionMark) error {
	bucket := RegionIDBucket(want.R)
	val, err := json.Marshal(want)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var (
		had  segment.RegionMark
		ferr error
	)
	err = s.retry(cctx, func() (bool, error) {
		kv, err := s.regionIDKV(cctx, want.R)
		if err != nil {
			return transient(err), err
		}
		if _, err = kv.Create(cctx, regionIDKey, val); err == nil {
			had = want
			return false, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			// The bucket may be gone (deleted by hand while the region
			// ran): the next try opens, or makes, it again, so the running
			// check writes the record again as it does the store's.
			s.forgetRegionIDKV(kv)
			return transient(err), err
		}
		// Written, so there: a replica that has not applied it yet (kv.Get
		// may read any) is asked again.
		e, err := kv.Get(cctx, regionIDKey)
		if err != nil {
			return transient(err) || errors.Is(err, jetstream.ErrKeyNotFound), err
		}
		if err := json.Unmarshal(e.Value(), &had); err != nil {
			ferr = fmt.Errorf("%w: bucket %q key %q: %q is not a region record (%v)", ErrCorrupt, bucket, regionIDKey, e.Value(), err)
			return false, ferr
		}
		return false, nil
	})
	switch {
	case err != nil && err == ferr:
		return err
	case err != nil:
		return s.fail(ctx, cctx, "region id record", "", err)
	case had == want:
		return nil
	}
	return fmt.Errorf("%w: region id %d is recorded (bucket %s) as %s's, and this node is %s: a region id's ids are in its first region's store; "+
		"a renamed region, or a new region on a retired id, starts its tags above them (docs/regions.md, Retiring or renaming a region)",
		segment.ErrRegionMark, want.R, bucket, had, want)
}

// regionIDKV is RegionIDBucket(id), opened (or made) once: one open at a
// time, as a store's nodes check at once and every period.
func (s *Store) regionIDKV(ctx context.Context, id int) (jetstream.KeyValue, error) {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	if s.idKV != nil && s.idR == id {
		return s.idKV, nil
	}
	kv, err := jskv.OpenOrCreate(ctx, s.js, jetstream.KeyValueConfig{Bucket: RegionIDBucket(id), History: 1,
		Storage: jetstream.FileStorage, Replicas: s.replicas})
	if err != nil {
		return nil, err
	}
	s.idKV, s.idR = kv, id
	return kv, nil
}

// forgetRegionIDKV drops kv, if it is the one regionIDKV keeps.
func (s *Store) forgetRegionIDKV(kv jetstream.KeyValue) {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	if s.idKV == kv {
		s.idKV = nil
	}
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
