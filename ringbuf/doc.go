// Package ringbuf is a generic, bounded, lock-free multi-producer
// multi-consumer ring buffer with an asynchronous refill: the hot path of
// the id service, which hands out values a background goroutine produced
// ahead of time.
//
// # Lineage
//
// The semantics follow the RingBuffer of Baidu UidGenerator's
// CachedUidGenerator: a fixed power-of-two ring, a padding threshold below
// which a take triggers an asynchronous refill to full (paddingBuffer), an
// optional scheduled refill, and pluggable rejected-put and rejected-take
// policies. The implementation is Dmitry Vyukov's bounded MPMC queue
// instead of UidGenerator's flag array: every slot carries a sequence
// number saying which lap it is in, producers and consumers claim
// positions by CAS on a tail and a head cursor, and the two cursors live
// on separate, padded cache lines.
//
//	        head (consumers)                 tail (producers)
//	          v                                v
//	+-----+-----+-----+-----+-----+-----+-----+-----+
//	|     |  v  |  v  |  v  |  v  |  v  |  v  |     |   size = power of two
//	+-----+-----+-----+-----+-----+-----+-----+-----+
//	slot i: seq == pos     free for the producer of pos
//	        seq == pos+1   value of pos, ready for its consumer
//
// # Padding threshold and refill
//
// With Config.Fill set, Start runs one refill goroutine and fills the ring.
// A take that leaves fewer than Size*PaddingPercent/100 values (at least 1)
// triggers a refill; so does TriggerRefill, each RefillInterval tick, and a
// take that finds the ring empty. Triggers coalesce: at most one refill is
// pending at a time. A refill calls Fill for chunks of at most FillChunk
// values until the ring is full, Fill returns 0, or Fill returns an error
// (reported to OnFillError). A take never waits for a refill.
//
// # Policies
//
// A put that finds the ring full (or closed) is rejected: the value is
// passed to Config.RejectedPut, if set, and counted in Stats.RejectedPuts.
// Values a Fill produced that no longer fit, because another producer
// raced the refill, are rejected the same way. A take that finds the ring
// empty returns the error of Config.RejectedTake (ErrEmpty by default), or
// ErrClosed once the ring is closed and drained.
//
// # Concurrency contract
//
// All methods of Ring are safe for concurrent use. Take and TakeN never
// wait: a take that reaches a position whose producer has reserved it but
// not yet published it reports the ring empty (a producer descheduled in
// that window of a few instructions makes the ring look empty until it
// resumes; the value is not lost). Put and PutN never wait for space
// either, but a put that meets a slot a consumer has claimed and not yet
// released yields and retries rather than report a full ring that is not.
// Fill is only ever called from the refill goroutine, never concurrently
// with itself; OnFillError is called from the refill goroutine;
// RejectedPut and RejectedTake are called from the goroutine whose put or
// take was rejected (RejectedPut also from the refill goroutine). Close
// cancels the context passed to Fill and waits for the refill goroutine:
// no goroutine outlives Close. Values are taken in the order of the
// positions they were put at, so one consumer sees one producer's values in
// order. Config.FillLock, held from each Fill call to the put of its values,
// lets a caller that draws from the same source keep the source's order.
//
// # Cost
//
// A Take is one CAS on the shared head and one atomic store to its slot;
// on amd64 both are locked instructions, and with several consumers the
// head's cache line moves between cores on every take. Stats costs the
// fast path nothing (Puts and Takes are the cursors). A consumer that can
// use several values at once should call TakeN: one CAS per call.
//
// # Example
//
//	var next uint64
//	r, err := ringbuf.New(ringbuf.Config[uint64]{
//		Size: 8192,
//		Fill: func(ctx context.Context, dst []uint64) (int, error) {
//			for i := range dst {
//				next++
//				dst[i] = next
//			}
//			return len(dst), nil
//		},
//	})
//	if err != nil {
//		return err
//	}
//	r.Start()
//	defer r.Close()
//	id, err := r.Take() // ErrEmpty if consumers outrun the refill
package ringbuf
