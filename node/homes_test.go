package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/wire"
)

// TestMonoHomeRegion: a monotonic tag lives in one region (I6). Two
// regions, each a NATS cluster, an operator connected to each (the admin
// queue group answers from the caller's cluster): a monotonic tag created
// in one region is refused in the other, as a monotonic tag and as a tag
// of another mode, and a tag another region holds is refused as a
// monotonic one; with the regions cut apart a monotonic create is refused
// (the other region cannot say it has no such tag) while a segment tag is
// created. Before, the second region created the tag too, elected a second
// leader on leaf.mono.<tag>, and callers took the first of two answers.
func TestMonoHomeRegion(t *testing.T) {
	t.Parallel()
	sc := natstest.RunSuperCluster(t, 1, 1)
	var ncs []*nats.Conn
	for i := range 2 {
		waitServing(t, startNode(t, regionConfig(sc.URL(i), fmt.Sprintf("r%d-1", i), "", i, 2)))
		ncs = append(ncs, natstest.Connect(t, sc.URL(i)))
	}
	refused := func(nc *nats.Conn, req wire.AdminRequest, want string) {
		t.Helper()
		err := adminErr(t, nc, wire.TagCreateSubject, req)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("create %+v: %v, want an error saying %q", req, err, want)
		}
	}
	admin(t, ncs[0], wire.TagCreateSubject, wire.AdminRequest{Tag: "ticks", Mode: "mono"})
	refused(ncs[1], wire.AdminRequest{Tag: "ticks", Mode: "mono"}, "lives in one region")
	refused(ncs[1], wire.AdminRequest{Tag: "ticks"}, "lives in one region")
	admin(t, ncs[0], wire.TagCreateSubject, wire.AdminRequest{Tag: "orders"})
	refused(ncs[1], wire.AdminRequest{Tag: "orders", Mode: "mono"}, "lives in one region")
	admin(t, ncs[1], wire.TagCreateSubject, wire.AdminRequest{Tag: "orders"}) // a segment tag lives in every region

	// Callers of both regions reach the one leader, in order.
	var last int64
	for i := range 20 {
		ids, err := takeMono(ncs[i%2], "ticks")
		if err != nil {
			t.Fatal(err)
		}
		if ids[0] <= last || ids[0]%2 != 0 {
			t.Fatalf("mono id %d after %d: want a larger one of region 0", ids[0], last)
		}
		last = ids[0]
	}

	sc.Cut(0)
	sc.Cut(1)
	refused(ncs[1], wire.AdminRequest{Tag: "beats", Mode: "mono"}, "no answer from region ids [0]")
	admin(t, ncs[1], wire.TagCreateSubject, wire.AdminRequest{Tag: "lines"})
	sc.Heal(0)
	sc.Heal(1)
}

// takeMono asks nc for one id of the monotonic tag, asked again while not
// ready (a leader being elected).
func takeMono(nc *nats.Conn, tag string) ([]int64, error) {
	var err error
	for range 100 {
		var ids []int64
		if ids, err = takeFrom(nc, wire.MonoPrefix+tag, 1, false); err == nil {
			return ids, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, err
}
