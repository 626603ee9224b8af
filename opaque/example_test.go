package opaque_test

import (
	"fmt"

	"github.com/leafmq/leafmq/opaque"
)

func Example() {
	key, err := opaque.ParseKey("000102030405060708090a0b0c0d0e0f")
	if err != nil {
		panic(err)
	}
	p, err := key.Perm("orders", 53)
	if err != nil {
		panic(err)
	}
	a, b := p.Permute(1), p.Permute(2)
	seq, _ := p.Sequence(b)
	fmt.Println(a != b, a < 1<<53, b < 1<<53, seq)
	// Output: true true true 2
}
