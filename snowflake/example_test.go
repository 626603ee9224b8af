package snowflake_test

import (
	"fmt"
	"time"

	"github.com/leafmq/leafmq/snowflake"
)

// Decode an id issued by Meituan Leaf-snowflake, as its /decodeSnowflakeId
// does.
func ExampleLayout_Decompose() {
	id := snowflake.LeafLayout().Decompose(1212161512043474986)
	fmt.Println(id.Time.Format(time.RFC3339Nano))
	fmt.Println("timestamp", id.Timestamp, "worker", id.Worker, "sequence", id.Sequence)
	// Output:
	// 2020-01-01T00:00:00Z
	// timestamp 1577836800000 worker 7 sequence 42
}
