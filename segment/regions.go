package segment

import "fmt"

// Regions places one region's ids in the id space of a deployment of N
// regions (docs/regions.md). Each region keeps its own store, and a tag's
// counter there (max_id, the ranges, the floors, the hand-back) counts
// local sequence numbers; the id of local sequence number l is l*N + R,
// and an opaque tag's is P(l)*N + R, P its permutation of the region's
// share [1, Last(2^W-1)] (Config.Opaque). Every id a region serves, of
// every mode, is R mod N: ids of two regions differ in their remainder, so
// they are never equal, whatever either region's store holds (a tag's
// mode, key and width included), and no region asks another for anything
// on the request path.
//
// The zero Regions (and N 1) is one region: ids are the local sequence
// numbers themselves, as without regions. N is fixed for the life of a
// deployment: with another N the same local numbers map to other ids,
// which may repeat ids served before.
type Regions struct {
	N int64 // regions in the deployment; 0 or 1: one region
	R int64 // this region's id, 0..N-1
}

// Check returns an error wrapping ErrInvalid unless 0 <= R < max(N, 1).
func (r Regions) Check() error {
	switch {
	case r.N < 0:
		return fmt.Errorf("%w: regions %d must not be negative", ErrInvalid, r.N)
	case r.R < 0 || r.R >= max(r.N, 1):
		return fmt.Errorf("%w: region id %d must be 0-%d (regions %d)", ErrInvalid, r.R, max(r.N, 1)-1, r.N)
	}
	return nil
}

// Many reports whether the deployment has more than one region: ids are
// spread over the id space, N apart, and no two consecutive.
func (r Regions) Many() bool { return r.N > 1 }

// ID is the id of local sequence number local (>= 1), which must be at
// most Last(limit) for the limit in force (the engine never maps one
// beyond).
func (r Regions) ID(local int64) int64 {
	if r.N <= 1 {
		return local
	}
	return local*r.N + r.R
}

// Local inverts ID: the local sequence number of id and the region that
// served it. ok is false for an id no region of the deployment serves (below
// 1 as a local number). For an opaque id, local is the permuted value:
// leafctl tag decode inverts the region's permutation of it and answers
// ID of the local number it came from, which Local splits again.
func (r Regions) Local(id int64) (local, region int64, ok bool) {
	if r.N <= 1 {
		return id, 0, id >= 1
	}
	local, region = id/r.N, id%r.N
	return local, region, id > 0 && local >= 1
}

// Last is the highest local sequence number whose id is at most limit
// (math.MaxInt64 for a plain tag, the domain's Max for an opaque one), 0 if
// none. With one region it is limit.
func (r Regions) Last(limit int64) int64 {
	if r.N <= 1 {
		return limit
	}
	if limit < r.R {
		return 0
	}
	return (limit - r.R) / r.N
}
