package httpapi_test

import (
	"context"
	"fmt"
	"github.com/leafmq/leafmq/wire"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/leafmq/leafmq/httpapi"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/snowflake"
)

// Serve Leaf's HTTP API from a segment engine, with snowflake off on this
// node, and call it as Leaf's users do.
func ExampleNew() {
	ctx := context.Background()
	store := memstore.New() // production: segment/mysql or segment/kvstore
	if err := store.Create(ctx, segment.Tag{Name: wire.MustTag("leaf-segment-test"), Step: 1000}); err != nil {
		panic(err)
	}
	engine, err := segment.New(segment.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer engine.Close()
	if err := engine.Start(ctx); err != nil {
		panic(err)
	}

	h, err := httpapi.New(httpapi.Config{
		Segment: func(ctx context.Context, tag wire.Tag, dst []int64) error {
			for i := 0; i < len(dst); {
				first, n, err := engine.Reserve(ctx, tag, len(dst)-i)
				if err != nil {
					return err
				}
				for j := range n {
					dst[i+j] = first + int64(j)
				}
				i += n
			}
			return nil
		},
		Layout:   snowflake.LeafLayout(),
		Location: time.FixedZone("CST", 8*3600), // Leaf formats dates in the JVM's zone
		Rows:     httpapi.StoreRows(store),
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	get := func(path string) {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		fmt.Printf("%d %s\n", res.StatusCode, body)
	}
	get("/api/segment/get/leaf-segment-test")
	get("/api/segment/get/leaf-segment-test")
	get("/api/segment/get/no-such-tag")
	get("/api/snowflake/get/test")
	get("/decodeSnowflakeId?snowflakeId=1169786042799259000")
	// Output:
	// 200 1
	// 200 2
	// 404 unknown tag: "no-such-tag"
	//
	// 501 snowflake ids are not enabled on this node
	//
	// 200 {"timestamp":"1567733700834(2019-09-06 09:35:00.834)","sequenceId":"3448","workerId":"39"}
}
