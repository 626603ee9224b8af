package ringbuf_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leafmq/leafmq/ringbuf"
)

func ExampleRing() {
	r, err := ringbuf.New(ringbuf.Config[string]{
		Size:        2,
		RejectedPut: func(v string) { fmt.Println("rejected:", v) },
	})
	if err != nil {
		panic(err)
	}
	defer r.Close()

	fmt.Println(r.PutN([]string{"a", "b", "c"}))
	v, _ := r.Take()
	fmt.Println(v, r.Len())
	r.Put("d")
	dst := make([]string, 4)
	n, _ := r.TakeN(dst)
	fmt.Println(dst[:n])
	_, err = r.Take()
	fmt.Println(errors.Is(err, ringbuf.ErrEmpty))
	fmt.Printf("%+v\n", r.Stats())
	// Output:
	// rejected: c
	// 2
	// a 1
	// [b d]
	// true
	// {Puts:3 Takes:3 RejectedPuts:1 RejectedTakes:1 Refills:0 FillErrors:0}
}

// A ring refilled from a counter, as the id service's segment and
// snowflake engines use it.
func ExampleRing_fill() {
	var next uint64
	r, err := ringbuf.New(ringbuf.Config[uint64]{
		Size: 4,
		Fill: func(ctx context.Context, dst []uint64) (int, error) {
			for i := range dst {
				next++
				dst[i] = next
			}
			return len(dst), nil
		},
	})
	if err != nil {
		panic(err)
	}
	r.Start()
	defer r.Close()

	for r.Stats().Refills == 0 { // wait for the initial fill
		time.Sleep(time.Millisecond)
	}
	dst := make([]uint64, 8)
	n, _ := r.TakeN(dst)
	fmt.Println(dst[:n])
	// Output:
	// [1 2 3 4]
}

func ExampleNew() {
	_, err := ringbuf.New(ringbuf.Config[uint64]{PaddingPercent: 150})
	fmt.Println(err)
	fmt.Println(errors.Is(err, ringbuf.ErrInvalidConfig))
	// Output:
	// ringbuf: invalid config: PaddingPercent 150 is outside 1..100
	// true
}
