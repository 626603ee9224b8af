package mono

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// Op is one call of a history of a monotonic tag as a client saw it: when
// it was sent and its reply received (readings of one monotonic clock,
// e.g. time.Since of one start) and the id it got.
type Op struct {
	Send, Recv time.Duration
	ID         int64
}

// CheckHistory checks a history of successful calls against the promise
// of a monotonic tag: ids are unique, and whenever the reply of one call
// was received before another call was sent, the later call's id is
// larger. It returns the first violation found, or nil.
//
// For this model the check is exact, so no search is needed (which is what
// a general linearizability checker such as Porcupine adds): a history is
// linearizable iff ordering its calls by id respects real time, because
// the model allows exactly the orders in which ids increase. Calls that
// failed, or whose reply never came, constrain nothing (a gap is allowed).
func CheckHistory(ops []Op) error {
	seen := make(map[int64]Op, len(ops))
	for _, op := range ops {
		if was, ok := seen[op.ID]; ok {
			return fmt.Errorf("mono: id %d handed out twice (calls sent at %v and %v)", op.ID, was.Send, op.Send)
		}
		seen[op.ID] = op
	}
	byRecv := slices.Clone(ops)
	sort.Slice(byRecv, func(i, j int) bool { return byRecv[i].Recv < byRecv[j].Recv })
	bySend := slices.Clone(ops)
	sort.Slice(bySend, func(i, j int) bool { return bySend[i].Send < bySend[j].Send })
	var high Op // the call with the largest id among those received before the current send
	r := 0
	for _, op := range bySend {
		for r < len(byRecv) && byRecv[r].Recv < op.Send {
			if byRecv[r].ID > high.ID {
				high = byRecv[r]
			}
			r++
		}
		if op.ID <= high.ID {
			return fmt.Errorf("mono: order broken: id %d, sent at %v, is not above id %d, received at %v before that send",
				op.ID, op.Send, high.ID, high.Recv)
		}
	}
	return nil
}

// History records the calls of many clients of a monotonic tag, on one
// monotonic clock, for CheckHistory. Safe for concurrent use; the zero
// value is not: use NewHistory.
type History struct {
	t0  time.Time
	mu  sync.Mutex
	ops []Op
}

// NewHistory starts a history's clock.
func NewHistory() *History { return &History{t0: time.Now()} }

// Call runs take (one call of the tag, returning its ids) and records each
// id it got with the call's send and receive times. A failed call records
// nothing (it constrains nothing) and returns take's error.
func (h *History) Call(take func() ([]int64, error)) error {
	send := time.Since(h.t0)
	ids, err := take()
	recv := time.Since(h.t0)
	if err != nil {
		return err
	}
	h.mu.Lock()
	for _, id := range ids {
		h.ops = append(h.ops, Op{Send: send, Recv: recv, ID: id})
	}
	h.mu.Unlock()
	return nil
}

// Len is the number of ids recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// Ops returns a copy of what was recorded.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// Check is CheckHistory of what was recorded.
func (h *History) Check() error { return CheckHistory(h.Ops()) }

// Load calls take in a loop on n goroutines, recording every call, until
// the stop it returns is called (stop waits for them). A failed call ends
// its goroutine after fail(err): the load of a test or a soak.
func (h *History) Load(n int, take func() ([]int64, error), fail func(error)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := h.Call(take); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}
