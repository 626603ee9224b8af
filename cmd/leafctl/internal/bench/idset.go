package bench

import "math/bits"

// idSet is a set of int64 ids for duplicate detection, compact for the ids
// leafmq hands out: segment ids are dense ranges and snowflake ids keep their
// sequence in the low bits, so ids cluster in runs. The set stores a bitmap
// of chunkBits consecutive ids per chunk: about one bit per id when ids are
// dense, at worst a chunk (128 B plus map overhead) per id when scattered.
// Not safe for concurrent use: each worker owns one and they are merged.
type idSet struct {
	chunks map[int64]*chunk
	// last chunk used: ids arrive in runs, so most adds skip the map.
	lastKey int64
	last    *chunk
}

const (
	chunkShift = 10
	chunkBits  = 1 << chunkShift
)

type chunk [chunkBits / 64]uint64

// add inserts id and reports whether it was new.
func (s *idSet) add(id int64) bool {
	key := id >> chunkShift // arithmetic shift: negative ids get their own chunks
	c := s.last
	if c == nil || key != s.lastKey {
		if s.chunks == nil {
			s.chunks = make(map[int64]*chunk)
		}
		c = s.chunks[key]
		if c == nil {
			c = new(chunk)
			s.chunks[key] = c
		}
		s.lastKey, s.last = key, c
	}
	bit := uint64(id) & (chunkBits - 1)
	w, m := &c[bit/64], uint64(1)<<(bit%64)
	if *w&m != 0 {
		return false
	}
	*w |= m
	return true
}

// merge adds every id of o to s and returns how many were already in s.
func (s *idSet) merge(o *idSet) int64 {
	if s.chunks == nil {
		s.chunks = make(map[int64]*chunk, len(o.chunks))
	}
	var dups int64
	for key, oc := range o.chunks {
		c := s.chunks[key]
		if c == nil {
			cp := *oc
			s.chunks[key] = &cp
			continue
		}
		for i := range c {
			dups += int64(bits.OnesCount64(c[i] & oc[i]))
			c[i] |= oc[i]
		}
	}
	return dups
}
