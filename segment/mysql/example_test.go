package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/leafmq/leafmq/wire"
	"log"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/mysql"
)

// Open a Leaf database, register a tag as Leaf's README does, and reserve
// its first range of ids.
func ExampleOpen() {
	ctx := context.Background()
	s, err := mysql.Open(ctx, "leaf:secret@tcp(127.0.0.1:3306)/leaf", mysql.Options{CreateTable: true})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	err = s.Create(ctx, segment.Tag{Name: wire.MustTag("leaf-segment-test"), MaxID: 1, Step: 2000,
		Description: "Test leaf Segment Mode Get Id"})
	if err != nil && !errors.Is(err, segment.ErrTagExists) {
		log.Fatal(err)
	}
	a, err := s.Advance(ctx, wire.MustTag("leaf-segment-test"), 0, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("ids [%d, %d) are ours\n", a.Start(), a.End())
}
