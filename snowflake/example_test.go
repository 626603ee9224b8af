package snowflake_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
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

// Run a Source on a statically configured worker id whose time leases are
// kept in a file, so that a restart with the clock behind the last lease
// never reissues an id. (A fixed clock keeps the output stable.)
func ExampleStartSource() {
	dir, err := os.MkdirTemp("", "snowflake-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	layout := snowflake.LeafLayout()
	now := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	src, err := snowflake.StartSource(context.Background(), snowflake.SourceConfig{
		Open: func(context.Context) (snowflake.Registry, error) {
			st, err := snowflake.NewStatic(layout, 7)
			if err != nil {
				return nil, err
			}
			return snowflake.NewLeaseFile(st, filepath.Join(dir, "static-7.json")), nil
		},
		Layout:      layout,
		RandomStart: -1, // sequences from 0
		Clock:       clock.WithNow(nil, func() time.Time { return now }),
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer src.Close()
	fmt.Println(src.State(), "as worker", src.Worker(), "leased to", src.Leased().UTC().Format(time.RFC3339))

	ids := make([]int64, 3)
	if err := src.Next(context.Background(), ids); err != nil {
		panic(err)
	}
	for _, id := range ids {
		d := layout.Decompose(id)
		fmt.Println(id, d.Time.Format(time.RFC3339Nano), "worker", d.Worker, "sequence", d.Sequence)
	}
	// Output:
	// serving as worker 7 leased to 2020-01-01T00:00:03Z
	// 1212161512043474944 2020-01-01T00:00:00Z worker 7 sequence 0
	// 1212161512043474945 2020-01-01T00:00:00Z worker 7 sequence 1
	// 1212161512043474946 2020-01-01T00:00:00Z worker 7 sequence 2
}

// DecodeReply gives the fields of a snowflake id as leaf.snowflake.decode
// answers them.
func ExampleDecodeReply() {
	layout := snowflake.LeafLayout()
	id, err := layout.Compose(time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC), 1, 42)
	if err != nil {
		log.Fatal(err)
	}
	d := snowflake.DecodeReply(layout, id)
	fmt.Println(d.Time, d.Timestamp, d.Worker, d.Sequence)
	// Output: 2026-01-02T03:04:05.678Z 1767323045678 1 42
}
