package ff1_test

import (
	"fmt"

	"github.com/leafmq/leafmq/opaque/ff1"
)

// The n-th id of an opaque tag: a 53-bit permutation (exact in JavaScript
// numbers) keyed by a secret and tweaked by the tag's name.
func ExampleBits() {
	key := make([]byte, 32) // from a file or an environment variable, never logged
	c, err := ff1.New(key, 2)
	if err != nil {
		panic(err)
	}
	orders, err := ff1.NewBits(c, 53, []byte("orders"))
	if err != nil {
		panic(err)
	}
	for n := uint64(1); n <= 3; n++ {
		id, _ := orders.Encrypt(n)
		back, _ := orders.Decrypt(id)
		fmt.Println(id < 1<<53, back == n)
	}
	// Output:
	// true true
	// true true
	// true true
}
