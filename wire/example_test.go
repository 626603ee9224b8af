package wire_test

import (
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
