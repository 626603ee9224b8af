package ringbuf

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"testing/quick"
)

var errModelEmpty = errors.New("model: empty")

// runModel drives a ring, from a single goroutine, with the operations
// encoded in ops and compares every result with a slice model. sizeSeed
// picks the requested size (1..64). Each op byte selects Put, PutN, Take,
// TakeN, a Len/Stats check or Close; PutN and TakeN take their count from
// the following byte.
func runModel(sizeSeed uint8, ops []byte) error {
	var rejected []int
	r, err := New(Config[int]{
		Size:         1 + int(sizeSeed%64),
		RejectedPut:  func(v int) { rejected = append(rejected, v) },
		RejectedTake: func() error { return errModelEmpty },
	})
	if err != nil {
		return err
	}
	defer r.Close()

	var (
		model     []int
		wantRej   []int
		want      Stats
		closed    bool
		checked   int // rejections already compared
		next      int
		capacity  = r.Cap()
		countByte = func(i *int) int {
			if *i+1 >= len(ops) {
				return 1
			}
			*i++
			return int(ops[*i]) % (2*capacity + 2)
		}
	)
	emptyErr := func() error {
		want.RejectedTakes++
		if closed {
			return ErrClosed
		}
		return errModelEmpty
	}
	for i := 0; i < len(ops); i++ {
		op := ops[i] % 6
		switch op {
		case 0: // Put
			v := next
			next++
			ok := !closed && len(model) < capacity
			if ok {
				model = append(model, v)
				want.Puts++
			} else {
				wantRej = append(wantRej, v)
				want.RejectedPuts++
			}
			if got := r.Put(v); got != ok {
				return fmt.Errorf("op %d: Put(%d) = %v, want %v", i, v, got, ok)
			}
		case 1: // PutN
			vs := make([]int, countByte(&i))
			for j := range vs {
				vs[j] = next
				next++
			}
			n := 0
			if !closed {
				n = min(len(vs), capacity-len(model))
			}
			model = append(model, vs[:n]...)
			wantRej = append(wantRej, vs[n:]...)
			want.Puts += uint64(n)
			want.RejectedPuts += uint64(len(vs) - n)
			if got := r.PutN(vs); got != n {
				return fmt.Errorf("op %d: PutN(%d values) = %d, want %d", i, len(vs), got, n)
			}
		case 2: // Take
			v, err := r.Take()
			if len(model) == 0 {
				if wantErr := emptyErr(); !errors.Is(err, wantErr) {
					return fmt.Errorf("op %d: Take on empty = %v, %v, want %v", i, v, err, wantErr)
				}
				break
			}
			if err != nil || v != model[0] {
				return fmt.Errorf("op %d: Take = %v, %v, want %v", i, v, err, model[0])
			}
			model = model[1:]
			want.Takes++
		case 3: // TakeN
			dst := make([]int, countByte(&i))
			n, err := r.TakeN(dst)
			switch {
			case len(dst) == 0:
				if n != 0 || err != nil {
					return fmt.Errorf("op %d: TakeN(empty dst) = %d, %v", i, n, err)
				}
			case len(model) == 0:
				if wantErr := emptyErr(); n != 0 || !errors.Is(err, wantErr) {
					return fmt.Errorf("op %d: TakeN on empty = %d, %v, want %v", i, n, err, wantErr)
				}
			default:
				k := min(len(dst), len(model))
				if n != k || err != nil || !slices.Equal(dst[:n], model[:k]) {
					return fmt.Errorf("op %d: TakeN(%d) = %v, %v, want %v", i, len(dst), dst[:n], err, model[:k])
				}
				model = model[k:]
				want.Takes += uint64(k)
			}
		case 4: // Close
			if err := r.Close(); err != nil {
				return fmt.Errorf("op %d: Close: %v", i, err)
			}
			closed = true
		case 5: // just the checks below
		}
		if got := r.Len(); got != len(model) {
			return fmt.Errorf("op %d (%d): Len = %d, want %d", i, op, got, len(model))
		}
		if got := r.Stats(); got != want {
			return fmt.Errorf("op %d (%d): Stats = %+v, want %+v", i, op, got, want)
		}
		if len(rejected) != len(wantRej) || !slices.Equal(rejected[checked:], wantRej[checked:]) {
			return fmt.Errorf("op %d (%d): rejected %v, want %v", i, op, rejected, wantRej)
		}
		checked = len(rejected)
	}
	return nil
}

// TestModel checks the ring against the slice model on pseudo-random
// operation sequences (deterministic: fixed seed). Close is op 4 of 6, so
// most sequences also exercise the closed ring.
func TestModel(t *testing.T) {
	cfg := &quick.Config{MaxCount: 2000, Rand: rand.New(rand.NewSource(1))}
	check := func(sizeSeed uint8, ops []byte) bool {
		if err := runModel(sizeSeed, ops); err != nil {
			t.Logf("size seed %d, ops %v: %v", sizeSeed, ops, err)
			return false
		}
		return true
	}
	if err := quick.Check(check, cfg); err != nil {
		t.Fatal(err)
	}
}

// TestModelWithoutClose runs long sequences with Close mapped away, so
// rings go through many laps while open.
func TestModelWithoutClose(t *testing.T) {
	rnd := rand.New(rand.NewSource(2))
	for range 200 {
		ops := make([]byte, 2000)
		rnd.Read(ops)
		for i, b := range ops {
			if b%6 == 4 {
				ops[i]++
			}
		}
		size := uint8(rnd.Intn(256))
		if err := runModel(size, ops); err != nil {
			t.Fatalf("size seed %d: %v", size, err)
		}
	}
}

func FuzzRing(f *testing.F) {
	f.Add(uint8(3), []byte{0, 0, 0, 0, 0, 2, 2, 2, 2, 2})               // fill, overflow, drain, underflow
	f.Add(uint8(7), []byte{1, 20, 3, 5, 1, 9, 3, 100, 3, 0})            // PutN/TakeN runs and zero-length ops
	f.Add(uint8(1), []byte{0, 0, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2})         // size 2, many laps
	f.Add(uint8(15), []byte{1, 16, 4, 0, 1, 3, 2, 3, 7, 2, 3, 1, 4, 2}) // Close with values left
	f.Add(uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, sizeSeed uint8, ops []byte) {
		if err := runModel(sizeSeed, ops); err != nil {
			t.Fatal(err)
		}
	})
}
