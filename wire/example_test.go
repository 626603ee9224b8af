package wire_test

import (
	"errors"
	"fmt"

	"github.com/leafmq/leafmq/wire"
)

func Example() {
	// Server side: parse the request body, encode the reply.
	n, err := wire.ParseCount([]byte("3"), wire.DefaultMaxBatch)
	if err != nil {
		panic(err)
	}
	ids := []int64{1001, 1002, 1003}[:n]
	text := wire.AppendDecimal(nil, ids)
	bin := wire.AppendBinary(nil, ids)
	fmt.Printf("%q, %d bytes binary\n", text, len(bin))

	// Client side: decode either form.
	back, _ := wire.DecodeIDs(nil, bin, true)
	fmt.Println(back)
	// Output:
	// "1001\n1002\n1003", 24 bytes binary
	// [1001 1002 1003]
}

func ExampleParseTag() {
	// An edge (a subject, an HTTP path, a flag) checks the name once...
	tag, err := wire.ParseTag("orders")
	if err != nil {
		panic(err)
	}
	fmt.Println(tag)

	// ...and a bad one is a 400 before it reaches anything else.
	_, err = wire.ParseTag("orders.eu")
	fmt.Println(wire.CodeOf(err), errors.Is(err, wire.ErrInvalid))
	// Output:
	// orders
	// 400 true
}
