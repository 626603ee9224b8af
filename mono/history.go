package mono

import (
	"fmt"
	"slices"
	"sort"
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
